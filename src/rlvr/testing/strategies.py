"""Hypothesis strategies for model outputs (needs the `hypothesis` package, a development dependency).

    @given(strategies.scripts(SURFACE, max_turns=2))
    def test_fuzz(script): fuzz.check_environment(env, [script], BOUNDS)

Replies mix the hand-written corpus with generated text: arbitrary unicode (surrogates and controls included),
text wrapped in the environment's tags (closed, unclosed, nested), JSON tool commands with generated arguments,
native tool calls with generated argument texts, and text actions with generated arguments.
"""

from __future__ import annotations

import json

try:
    from hypothesis import strategies as st
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("rlvr.testing.strategies needs hypothesis: pip install 'rlvr[dev]' or pip install hypothesis") from e

from rlvr.testing.client import Reply
from rlvr.testing.corpus import Surface, corpus

# any code point (lone surrogates included), with the characters parsers care about drawn more often
SPECIAL = st.sampled_from(["\ud800", "\udfff", "\x00", "\u202e", "<", ">", "/", "[", "]", "{", "}", '"', " ", "\n"])
TEXT = st.text(st.characters(exclude_categories=()) | SPECIAL, max_size=200)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


def _json_text(value) -> str:
    return json.dumps(value, allow_nan=True)


def replies(surface: Surface) -> st.SearchStrategy[Reply]:
    """One assistant message for an environment with this surface."""
    options = [st.sampled_from(corpus(surface)), TEXT.map(lambda t: Reply(t, label="generated text"))]
    if surface.tags:
        tags = st.sampled_from(surface.tags)
        options.append(st.builds(lambda tag, text, close, times: Reply(
            (f"<{tag}>{text}" + (f"</{tag}>" if close else "")) * times, label=f"generated <{tag}> text"),
            tags, TEXT, st.booleans(), st.integers(1, 3)))
    if surface.json_tool_tag:
        names = st.sampled_from([*surface.tools, "unknown"]) | TEXT
        options.append(st.builds(lambda name, args: Reply(
            f"<{surface.json_tool_tag}>" + _json_text({"name": name, "args": args}) + f"</{surface.json_tool_tag}>",
            label="generated JSON tool command"), names, JSON_VALUES))
    elif surface.tools:
        names = st.sampled_from([*surface.tools, "unknown"]) | TEXT
        arguments = JSON_VALUES.map(_json_text) | TEXT
        call = st.tuples(names, arguments)
        options.append(st.builds(lambda content, calls: Reply(content, tuple(calls), label="generated native calls"),
                                 st.none() | TEXT, st.lists(call, min_size=1, max_size=5)))
    for action in surface.actions:
        options.append(TEXT.map(lambda t, a=action: Reply(a.format(t), label=f"generated {a}")))
    if surface.good:
        options.append(st.sampled_from(surface.good))
    return st.one_of(options)


def scripts(surface: Surface, max_turns: int) -> st.SearchStrategy[list[Reply]]:
    """A rollout's replies, one per turn (the client repeats the last one if the rollout goes on)."""
    return st.lists(replies(surface), min_size=1, max_size=max_turns)
