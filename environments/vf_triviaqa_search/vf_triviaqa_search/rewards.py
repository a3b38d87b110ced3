"""TriviaQA-specific rewards: answers are matched against every alias after TriviaQA's own normalisation.

The reward layout is the MT-GRPO paper's (SiliangZeng/Multi-Turn-RL-Agent, verifiers/examples/triviaqa_search.py
and verifiers/rubrics/triviaqa_tool_rubric.py); the weights live in `load_environment`. Aliases come from the
row's `info["aliases"]`, since verifiers keeps `answer` a string.
"""

from __future__ import annotations

import re
import string

import verifiers as vf

from rlvr.rubrics.rewards import is_tool_result, tool_results
from rlvr.rubrics.turn_rubric import reward_name
from vf_triviaqa_search.protocols import XML_TAGS

_PUNCTUATION = set(string.punctuation + "‘’´`")


def normalize_triviaqa(s: str) -> str:
    """The official TriviaQA normalize_answer (mandarjoshi90/triviaqa evaluation/triviaqa_evaluation.py):
    underscores to spaces, lower case, punctuation (with curly quotes) to spaces, drop a/an/the, squeeze spaces.
    Unlike SQuAD's, punctuation becomes a space, so "Fat Larry’s Band" and "fat larry s band" match."""
    s = s.replace("_", " ").lower()
    s = "".join(" " if ch in _PUNCTUATION else ch for ch in s)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def contains_alias(text: str, aliases: list[str]) -> bool:
    """Whether a normalised alias occurs in the normalised text as whole words.

    The original tests `alias.lower() in text.lower()` (exist_answer_reward_func, exist_answer_in_search_results);
    matching whole normalised words keeps that meaning without rewarding "us" inside "bus" or "1" inside "1946".
    """
    haystack = f" {normalize_triviaqa(text)} "
    return any(f" {alias} " in haystack for alias in map(normalize_triviaqa, aliases) if alias)


def exact_match(completion, info, parser: vf.Parser, **kwargs) -> float:
    """1.0 when the final <answer> equals an alias after normalisation (original: exact_match_reward_func)."""
    prediction = parser.parse_answer(completion)
    if prediction is None:
        return 0.0
    pred = normalize_triviaqa(prediction)
    return float(any(pred == normalize_triviaqa(a) for a in info["aliases"]))


def answer_contains_alias(completion, info, parser: vf.Parser, **kwargs) -> float:
    """1.0 when the final <answer> contains an alias (original: exist_answer_reward_func)."""
    prediction = parser.parse_answer(completion)
    return float(prediction is not None and contains_alias(prediction, info["aliases"]))


def answer_in_first_search_result(env_reply, info, step, prompt, **kwargs) -> float:
    """Turn reward: 1.0 when this turn's reply is the rollout's first search result and contains an alias.

    Original: exist_answer_in_search_results reads the first search result of the rollout (with the default
    max_turns=2 there is only one). Only the first counts, so that repeating a search earns nothing more.
    `step["prompt"]` holds the conversation before this turn: an earlier tool result there means this is not
    the first.
    """
    if is_tool_result(step["prompt"][len(prompt) :]):
        return 0.0
    results = tool_results(env_reply)
    return float(bool(results) and contains_alias("\n".join(results), info["aliases"]))


def answer_required(func):
    """The outcome reward `func`, scored 0 when the rollout ends without an <answer>.

    The paper's protocol is one search, then the answer (Multi-Turn-RL-Agent, verifiers/examples/
    triviaqa_search.py: ToolEnv(max_steps=2)); a second tool call where the answer is due ends the rollout
    unexecuted there and here. The original rubric still pays such a non-answer its format scores
    (get_format_reward_func, get_xml_reward_func: up to 0.4, as much as a wrong answer gets), so among rollouts
    that all miss the answer, searching again costs nothing, and a small policy drifts into it (issue 44: SmolLM2-135M
    stopped answering after 6 MT-GRPO steps). Gated, a non-answer scores as a failed outcome, 0 on every term.
    """

    def gated(completion, parser: vf.Parser, **kwargs) -> float:
        if parser.parse_answer(completion) is None:
            return 0.0
        return func(completion=completion, parser=parser, **kwargs)

    # named after the wrapped function: metrics stay comparable with ungated runs
    gated.__name__ = reward_name(func)
    return gated


def xml_tag_reward(completion, parser: vf.Parser, tags: tuple[str, ...] = XML_TAGS, **kwargs) -> float:
    """Mean over assistant messages of how well each used tag appears exactly once, opened and closed.

    The original XMLParser.get_xml_reward_func (Multi-Turn-RL-Agent, verifiers/parsers/xml_parser.py): per
    message, for each tag of the schema that occurs, 1 - |count(<tag>) - 1| and 1 - |count(</tag>) - 1|,
    averaged over those checks (0 when no tag occurs); the mean over messages is floored at 0.
    """
    scores = []
    for msg in parser.get_assistant_messages(completion):
        content = str(msg.get("content") or "")
        checks = [
            1 - abs(content.count(tag) - 1)
            for name in tags
            if f"<{name}>" in content or f"</{name}>" in content
            for tag in (f"<{name}>", f"</{name}>")
        ]
        scores.append(sum(checks) / len(checks) if checks else 0.0)
    return max(0.0, sum(scores) / len(scores)) if scores else 0.0
