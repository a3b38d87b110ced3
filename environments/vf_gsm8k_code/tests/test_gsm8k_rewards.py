"""verl-tool's gsm8k_code rewards: hand-computed cases and properties of the turn formula."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vf_gsm8k_code.rewards import (
    code_execution_reward,
    correct_answer_reward,
    execution_failed,
    extract_answer,
)

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
    # three successes: 0.3 * 3/3 + 0.05 * 3
    assert code_execution_reward(CODE_TURN, tool_replies("1", "2", "3")) == pytest.approx(0.45)
    # a turn that ran nothing (the answer turn, after which the environment says nothing)
    assert code_execution_reward([{"role": "assistant", "content": "<answer>42</answer>"}], []) == 0.0


@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_turn_reward_formula_properties(outcomes):
    observations = ["ok" if success else "Traceback" for success in outcomes]
    reward = code_execution_reward(CODE_TURN, tool_replies(*observations))
    successes, valid = sum(outcomes), len(outcomes)
    assert reward == pytest.approx(0.3 * successes / valid + 0.05 * successes)
    assert 0.0 <= reward <= 0.3 + 0.05 * valid
    # one more success never lowers the reward
    if not all(outcomes):
        better = list(outcomes)
        better[better.index(False)] = True
        assert (
            code_execution_reward(CODE_TURN, tool_replies(*["ok" if s else "Traceback" for s in better]))
            > reward
        )


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
