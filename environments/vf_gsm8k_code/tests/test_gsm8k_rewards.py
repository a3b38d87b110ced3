"""verl-tool's gsm8k_code rewards: hand-computed cases, properties of the turn formula, bounded answer comparison."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vf_gsm8k_code import answers
from vf_gsm8k_code.answers import (
    ComparisonFailed,
    MathVerifyWorker,
    extract_answer,
    numerically_equal,
    without_code,
)
from vf_gsm8k_code.rewards import code_execution_reward, correct_answer_reward, execution_failed

CODE_TURN = [{"role": "assistant", "content": "<code>print(6 * 7)</code>"}]


def xml_reply(observation: str) -> list[dict]:
    return [{"role": "user", "content": f"<output>\n{observation}\n</output>"}]


def tool_replies(*observations: str) -> list[dict]:
    return [{"role": "tool", "content": o, "tool_call_id": f"call_{i}"} for i, o in enumerate(observations)]


@pytest.mark.parametrize(
    ("observation", "failed"),
    [
        ("42", False),
        ("", True),
        ("   \n", True),
        ("Traceback (most recent call last):\n  ...", True),
        ("NameError: x\nError: exit code 1", True),
        ("Error: execution timed out after 5 seconds", True),
        ("the request TIMED OUT", True),  # verl-tool lower-cases for these two markers
        ("caught an Exception", True),
        ("error: lower-case prefix is not a marker", False),  # "Error:" is case-sensitive there
    ],
)
def test_failure_markers(observation, failed):
    assert execution_failed(observation) is failed


def test_turn_reward_hand_computed():
    # one successful execution: 0.3 * 1/1 + 0.05 * 1
    assert code_execution_reward(CODE_TURN, xml_reply("42")) == pytest.approx(0.35)
    assert code_execution_reward(CODE_TURN, xml_reply("Traceback ...")) == 0.0
    # native: two calls in one turn, one fails: 0.3 * 1/2 + 0.05 * 1
    assert code_execution_reward(CODE_TURN, tool_replies("42", "Error: x")) == pytest.approx(0.2)
    # three successes: 0.3 * 3/3 + 0.05 x one rewarded success (verl-tool would pay 0.05 x 3: farmable)
    assert code_execution_reward(CODE_TURN, tool_replies("1", "2", "3")) == pytest.approx(0.35)
    # a turn that ran nothing (the answer turn, after which the environment says nothing)
    assert code_execution_reward([{"role": "assistant", "content": "<answer>42</answer>"}], []) == 0.0


def rollout_turn_rewards(observations_per_turn: list[list[str]]) -> list[float]:
    """Each turn's reward in a rollout whose turns got these tool results, as TurnRubric calls the function."""
    prompt = [{"role": "user", "content": "How many?"}]
    history, values = list(prompt), []
    for observations in observations_per_turn:
        reply = tool_replies(*observations)
        values.append(code_execution_reward(CODE_TURN, reply, step={"prompt": list(history)}, prompt=prompt))
        history += [*CODE_TURN, *reply]
    return values


def test_running_code_again_earns_nothing_more():
    # success, success, success: 0.35 then nothing (ratio stays 1, the bonus is paid once)
    assert rollout_turn_rewards([["1"], ["2"], ["3"]]) == pytest.approx([0.35, 0.0, 0.0])
    # failure then success: 0 then 0.3 x 1/2 + 0.05
    assert rollout_turn_rewards([["Traceback"], ["2"]]) == pytest.approx([0.0, 0.2])
    # success then failure: the ratio drops from 1 to 1/2
    assert rollout_turn_rewards([["1"], ["Traceback"]]) == pytest.approx([0.35, -0.15])


@given(st.lists(st.lists(st.booleans(), min_size=0, max_size=3), min_size=1, max_size=6))
def test_turn_rewards_sum_to_the_capped_trajectory_formula(turns):
    values = rollout_turn_rewards([["ok" if s else "Traceback" for s in turn] for turn in turns])
    outcomes = [s for turn in turns for s in turn]
    successes, valid = sum(outcomes), len(outcomes)
    expected = 0.3 * successes / valid + 0.05 * min(successes, 1) if valid else 0.0
    assert sum(values) == pytest.approx(expected)
    assert 0.0 <= sum(values) <= 0.35 + 1e-12
    assert all(-0.3 - 1e-12 <= v <= 0.35 + 1e-12 for v in values)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so <answer> 72 </answer>", "72"),
        ("\\boxed{3} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("<answer>5</answer> and \\boxed{6}", "5"),  # the answer tag wins, as in verl-tool
        ("no answer here", None),
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def assistant(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    ("completion", "gold", "reward"),
    [
        (assistant("<answer>72</answer>"), "72", 1.0),
        (assistant("<answer>72.0</answer>"), "72", 1.0),
        (assistant("<answer>$1,000</answer>"), "1000", 1.0),
        (assistant("The total is \\boxed{28080}."), "28080", 1.0),
        (assistant("<answer>0.5</answer>"), "1/2", 1.0),
        (assistant("<answer>73</answer>"), "72", 0.1),
        (assistant("<answer>" + "9" * 200 + "</answer>"), "72", 0.1),  # too long to parse: wrong, not a hang
        (assistant("it is 72"), "72", 0.0),
        # an answer printed by the program (in the environment's reply) is not the model's answer
        (
            [
                {"role": "assistant", "content": "<code>print('<answer>72</answer>')</code>"},
                {"role": "user", "content": "<output>\n<answer>72</answer>\n</output>"},
            ],
            "72",
            0.0,
        ),
    ],
)
def test_outcome_reward(completion, gold, reward):
    assert correct_answer_reward(completion, gold) == reward


@pytest.mark.parametrize(
    ("prediction", "gold", "equal"),
    [
        ("10^10^10", "72", False),  # issue 21: hung for more than 30 s
        ("\\boxed{10^{10^{10}}}", "72", False),
        ("2**2**2**40", "72", False),
        ("(10^9)!", "72", False),
        ("10^{100000}", "72", False),
        ("\\binom{1000000000}{100000000}", "72", False),
        ("\\prod_{i=1}^{100000000} i", "72", False),
        ("9" * 200, "72", False),
        ("72!", "72", False),
    ],
)
def test_runaway_answers_are_compared_as_text(prediction, gold, equal, caplog):
    with caplog.at_level(logging.INFO, logger="vf_gsm8k_code.answers"):
        assert numerically_equal(prediction, gold) is equal
    assert "compared as text, not evaluated" in caplog.text


def test_non_literal_answers_go_to_the_worker():
    assert numerically_equal("\\frac{144}{2}", "72") and numerically_equal("72 dollars", "72")
    assert numerically_equal("50%", "0.5") and not numerically_equal("2^3", "72")


def test_a_comparison_that_runs_out_of_time_kills_the_worker_and_falls_back(monkeypatch, caplog):
    worker = MathVerifyWorker(timeout_s=0.0)  # no comparison finishes in no time
    worker._started()  # the start-up has its own, longer limit
    with pytest.raises(ComparisonFailed, match="took longer than 0 s"):
        worker.equal("72", "\\frac{144}{2}")
    assert worker._process is None
    monkeypatch.setattr(answers, "WORKER", worker)
    with caplog.at_level(logging.WARNING, logger="vf_gsm8k_code.answers"):
        assert numerically_equal("$72", "72")  # plain numbers never reach the worker
        assert not numerically_equal("\\frac{144}{2}", "72")  # the worker is out of time: text comparison
        assert numerically_equal("72 ", "72")
    assert "compared as text" in caplog.text
    worker.timeout_s = 30.0
    assert worker.equal("72", "\\frac{144}{2}")  # a fresh worker took over
    worker.close()


def test_text_outside_code_blocks_matches_the_regex():
    for text in ["a<code>b</code>c<code>d</code>e", "<code>" * 50 + "x", "<code>a</code></code>b<code>", "plain"]:
        assert without_code(text) == re.sub(r"<code>.*?</code>", "", text, flags=re.DOTALL)
