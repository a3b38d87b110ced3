"""The shared reward functions, on hand-written messages."""

from __future__ import annotations

import functools

import pytest
import verifiers as vf

from rlvr.rubrics import rewards

XML = vf.XMLParser(fields=["think", "answer"])


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


def test_outcome_functions_read_the_final_answer_with_the_rubric_parser():
    completion = [assistant("<think>\nhm\n</think>\n<answer>\nthe Paris\n</answer>")]
    assert rewards.exact_match(completion, "Paris", parser=XML) == 1.0
    assert rewards.token_f1(completion, ["Paris City"], parser=XML, weight=2.0) == pytest.approx(2 * 2 / 3)
    with pytest.raises(ValueError, match="no parser given"):
        rewards.exact_match(completion, "Paris")


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


def test_answer_in_search_results():
    assert rewards.answer_in_search_results([user("<result>PARIS is big</result>")], ["Lutetia", "paris"]) == 0.5
    assert rewards.answer_in_search_results([tool("Lyon")], "Paris") == 0.0
    assert rewards.answer_in_search_results([user("Paris but no result tag")], "Paris") == 0.0
    assert rewards.answer_in_search_results([tool("Paris")], "Paris", reward=1.0) == 1.0


def test_is_tool_result():
    assert rewards.is_tool_result([tool("x")])
    assert rewards.is_tool_result([user("Here: <output>4</output>")])
    assert rewards.is_tool_result("<result>x</result>")
    assert not rewards.is_tool_result([user("Please use the right format")])
    assert not rewards.is_tool_result([])


def test_xml_format_reward():
    # message 1: both fields (0.4) + spacing (0.2) + starts with <think> (0.2) + ends with </answer> (0.2) = 1.0
    # message 2: no field, spacing vacuously fine: 0.2. Mean 0.6, weight 2 -> 1.2
    completion = [assistant("<think>\nx\n</think>\n<answer>\nParis\n</answer>"), assistant("Paris")]
    assert rewards.xml_format_reward(completion, parser=XML, weight=2.0) == pytest.approx(1.2)
    with pytest.raises(ValueError, match="XMLParser"):
        rewards.xml_format_reward(completion, parser=vf.Parser())


def test_partial_keeps_its_parameters():
    half = functools.partial(rewards.answer_in_search_results, reward=0.25)
    assert half([tool("Paris")], "Paris") == 0.25
