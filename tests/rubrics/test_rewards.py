"""The shared reward functions and the linear-time parsing, on hand-written messages."""

from __future__ import annotations

import functools
import re

import pytest
import verifiers as vf
from hypothesis import given
from hypothesis import strategies as st

from rlvr.rubrics import rewards
from rlvr.rubrics.parsing import XMLParser, tag_contents, tagged

XML = XMLParser(fields=["think", "answer"])


def assistant(content, tool_calls=None):
    msg = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = [{"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": "{}"}} for i in range(tool_calls)]
    return msg


def tool(content):
    return {"role": "tool", "content": content, "tool_call_id": "c0"}


def user(content):
    return {"role": "user", "content": content}


def test_squad_normalisation_exact_match_and_f1():
    assert rewards.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert rewards.exact_match_score("the Eiffel Tower.", ["Tour Eiffel", "Eiffel tower"]) == 1.0
    assert rewards.exact_match_score("Eiffel", ["Eiffel Tower"]) == 0.0
    # "paris france" vs "paris": precision 1/2, recall 1 -> F1 = 2/3; best over the aliases
    assert rewards.token_f1_score("Paris, France", ["Lyon", "Paris"]) == pytest.approx(2 / 3)
    assert rewards.token_f1_score("Paris", {"aliases": ["Paris"]}) == 1.0
    assert rewards.token_f1_score(None, "Paris") == 0.0


def test_tool_execution_reward_native_calls():
    # two calls, one failed: 0.2 * 1/2
    reply = [tool("Paris is in France"), tool("Error: timeout")]
    assert rewards.tool_execution_reward([assistant("", tool_calls=2)], reply) == pytest.approx(0.1)
    assert rewards.tool_execution_reward([assistant("", tool_calls=1)], [tool("ok")], scale=1.0) == 1.0
    assert rewards.tool_execution_reward([assistant("<answer>x</answer>")], []) == 0.0


def test_tool_execution_reward_xml_calls():
    call = [assistant('<tool>{"query": "x"}</tool>')]
    assert rewards.tool_execution_reward(call, [user("<result>\nParis\n</result>")]) == pytest.approx(0.2)
    assert rewards.tool_execution_reward(call, [user("<result>\nError: bad json\n</result>")]) == 0.0
    assert rewards.tool_execution_reward(call, [user("Invalid tool call")]) == 0.0  # attempted, no result
    assert rewards.tool_execution_reward(call, []) == 0.0  # never answered: not attempted (as the original)


def turn_values(prompt, turns):
    """Each turn's tool_execution_reward in a rollout of (assistant message, env reply) turns, as TurnRubric calls it."""
    history, values = list(prompt), []
    for message, reply in turns:
        values.append(rewards.tool_execution_reward([message], reply, step={"prompt": list(history)}, prompt=prompt))
        history += [message, *reply]
    return values


def test_tool_execution_reward_sums_to_the_trajectory_ratio_over_turns():
    prompt = [user("Who wrote Hamlet?")]
    call = assistant('<tool>{"name": "wiki_search"}</tool>')
    ok, failed = [user("<result>\nShakespeare\n</result>")], [user("<result>\nError: empty\n</result>")]
    # Searching again after a success earns nothing more: the rollout's ratio stays 1/1 -> 2/2.
    assert turn_values(prompt, [(call, ok), (call, ok), (assistant("<answer>x</answer>"), [])]) == pytest.approx([0.2, 0.0, 0.0])
    # A failure after a success: ratio 1/1 -> 1/2, so the second turn gives back 0.1; the sum is the original 0.1.
    assert turn_values(prompt, [(call, ok), (call, failed)]) == pytest.approx([0.2, -0.1])
    # Failure first, then success: 0/1 -> 1/2.
    assert turn_values(prompt, [(call, failed), (call, ok)]) == pytest.approx([0.0, 0.1])
    # Native: two parallel calls (one fails) then one good call: 1/2 -> 2/3.
    native = [(assistant("", tool_calls=2), [tool("a"), tool("Error: x")]), (assistant("", tool_calls=1), [tool("b")])]
    assert turn_values(prompt, native) == pytest.approx([0.1, 0.2 * (2 / 3 - 1 / 2)])


@given(st.lists(st.sampled_from(["ok", "error", "none"]), min_size=1, max_size=8))
def test_tool_execution_reward_turns_sum_to_the_original_and_stay_bounded(outcomes):
    prompt = [user("q")]
    turns = []
    for outcome in outcomes:
        if outcome == "none":
            turns.append((assistant("thinking"), [user("Error: no call")]))
        else:
            result = "ok" if outcome == "ok" else "Error: no"
            turns.append((assistant("<tool>{}</tool>"), [user(f"<result>{result}</result>")]))
    values = turn_values(prompt, turns)
    attempted = sum(o != "none" for o in outcomes)
    original = 0.2 * outcomes.count("ok") / attempted if attempted else 0.0
    assert sum(values) == pytest.approx(original)
    assert all(-0.2 - 1e-12 <= v <= 0.2 + 1e-12 for v in values)


def test_earlier_turns_pairs_assistant_messages_with_their_replies():
    prompt = [user("q")]
    history = [*prompt, assistant("a1"), tool("r1"), tool("r2"), assistant("a2"), user("r3")]
    turns = rewards.earlier_turns({"prompt": history}, prompt)
    assert turns == [([assistant("a1")], [tool("r1"), tool("r2")]), ([assistant("a2")], [user("r3")])]
    assert rewards.earlier_turns(None, prompt) == []


def test_is_tool_result():
    assert rewards.is_tool_result([tool("x")])
    assert rewards.is_tool_result([user("Here: <output>4</output>")])
    assert rewards.is_tool_result("<result>x</result>")
    assert not rewards.is_tool_result([user("Please use the right format")])
    assert not rewards.is_tool_result([])


def test_xml_format_reward():
    # message 1: both fields (0.4) + spacing (0.2) + starts with <think> (0.2) + ends with </answer> (0.2) = 1.0
    # message 2: no field, spacing vacuously fine: 0.2. Mean 0.6
    completion = [assistant("<think>\nx\n</think>\n<answer>\nParis\n</answer>"), assistant("Paris")]
    assert rewards.xml_format_reward(completion, parser=XML) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="XMLParser"):
        rewards.xml_format_reward(completion, parser=vf.Parser())


def test_partial_keeps_its_parameters():
    scaled = functools.partial(rewards.tool_execution_reward, scale=1.0)
    assert scaled([assistant("", tool_calls=1)], [tool("Paris")]) == 1.0


# ---- linear-time parsing: the same answers as verifiers' regex ------------------------------------------------

PIECES = st.sampled_from(["<a>", "</a>", "<b>", "</b>", " ", "\n", "\t", "\u00a0", "\x1c", "x", "yz", "<", ">", "/"])
TEXTS = st.lists(PIECES, max_size=24).map("".join)


def regex_contents(text: str, tag: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"<{tag}>\s*(.*?)\s*</{tag}>", text, re.DOTALL)]


@given(TEXTS)
def test_tag_contents_match_the_regex(text):
    for tag in ("a", "b"):
        assert list(tag_contents(text, tag)) == regex_contents(text, tag)
        assert tagged(text, tag) == next(iter(regex_contents(text, tag)), None)


@given(TEXTS, st.booleans(), st.booleans())
def test_xml_parser_matches_verifiers(text, strip, last):
    fields = ["a", ("b", "c")]
    ours, theirs = XMLParser(fields), vf.XMLParser(fields)
    assert vars(ours.parse(text, strip=strip, last=last)) == vars(theirs.parse(text, strip=strip, last=last))
    completion = [assistant(text), assistant(text[::-1])]
    assert ours.get_format_reward_func()(completion) == theirs.get_format_reward_func()(completion)
    assert ours.parse_answer(completion) == theirs.parse_answer(completion)


def test_unclosed_tag_with_a_long_tail_is_read_at_once():
    """The input that costs verifiers' regex cubic time (27 s at 4,000 spaces, issue 21), at 200,000 spaces."""
    text = "<answer>" + " " * 200_000
    assert tagged(text, "answer") is None
    assert XMLParser(["answer"]).parse_answer([assistant(text)]) is None
    assert tagged(text + "</answer>", "answer") == ""
