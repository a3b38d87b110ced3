"""TurnRubric on hand-built verifiers states: construction errors, scoring alone, failures, anchors, extra rubrics."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time

import pytest
import verifiers as vf

from rlvr.rubrics import TurnRubric, find_turn_rubrics, rewards

PROMPT = [{"role": "user", "content": "Q?"}]


def make_state(replies: list[tuple[str, list[dict]]], final_reply=None, state_keys=None) -> vf.State:
    """A finished rollout: assistant text + the environment's reply to it, per turn (linear history)."""
    state = vf.State(input={"prompt": PROMPT, "answer": "Paris", "task": "t", "example_id": 0})
    state["timing"] = {"total_ms": 0.0}
    history, trajectory = list(PROMPT), []
    for k, (text, env_reply) in enumerate(replies):
        completion = [{"role": "assistant", "content": text}]
        extras = {} if state_keys is None else {"state_key": state_keys[k]}
        trajectory.append({"prompt": list(history), "completion": completion, "response": None, "tokens": None,
                           "reward": None, "advantage": None, "is_truncated": False, "trajectory_id": "x",
                           "extras": extras})
        history += completion + env_reply
    state["trajectory"] = trajectory
    state["final_env_response"] = final_reply
    state["completion"] = history[len(PROMPT):]
    return state


def score(rubric, states):
    asyncio.run(rubric.score_group(states, score_sem=contextlib.nullcontext()))


def test_construction_errors_name_the_problem():
    with pytest.raises(TypeError, match=r"give \(function, weight\) pairs"):
        TurnRubric(turn_rewards=[rewards.tool_execution_reward])
    with pytest.raises(TypeError, match="weight 'x' of tool_execution_reward must be a finite number"):
        TurnRubric(turn_rewards=[(rewards.tool_execution_reward, "x")])
    with pytest.raises(ValueError, match="use a def, not a lambda"):
        TurnRubric(turn_rewards=[(lambda turn: 1.0, 1.0)])
    with pytest.raises(ValueError, match=r"two reward functions are named \['exact_match'\]"):
        TurnRubric(turn_rewards=[(exact_match, 1.0)], outcome_rewards=[(exact_match, 1.0)])
    with pytest.raises(TypeError, match="scores a whole group"):
        TurnRubric(outcome_rewards=[(group_reward, 1.0)])
    with pytest.raises(ValueError, match="timeout_s=0"):
        TurnRubric(timeout_s=0)


def exact_match(completion, answer, parser) -> float:
    return float(parser.parse_answer(completion) == answer)


def token_overlap(completion, answer, parser) -> float:
    return float(answer in (parser.parse_answer(completion) or ""))


def answer_in_result(env_reply, answer) -> float:
    return 0.5 * any(answer in r for r in rewards.tool_results(env_reply))


def scaled_exact_match(completion, answer, parser, weight: float = 1.0) -> float:
    return weight * exact_match(completion, answer, parser)


def group_reward(completions, **kwargs) -> list[float]:
    return [0.0] * len(completions)


def constant(turn) -> float:
    return 1.0


def test_env_reply_per_turn_and_final_reply():
    seen = []

    def spy(turn, env_reply, turn_index):
        seen.append((turn_index, turn[0]["content"], env_reply))
        return 0.0

    reply = [{"role": "user", "content": "<result>r</result>"}]
    final = [{"role": "user", "content": "bye"}]
    score(TurnRubric(turn_rewards=[(spy, 1.0)]), [make_state([("a", reply), ("b", [])], final_reply=final)])
    assert seen == [(0, "a", reply), (1, "b", final)]


def test_rewards_metrics_and_tool_results_are_written_on_the_state():
    rubric = TurnRubric(turn_rewards=[(answer_in_result, 1.0)],
                        outcome_rewards=[(exact_match, 1.0), (token_overlap, 0.0)],
                        parser=vf.XMLParser(["answer"]))
    state = make_state([("<tool>x</tool>", [{"role": "user", "content": "<result>Paris</result>"}]),
                        ("<answer>Paris</answer>", [])])
    asyncio.run(rubric.score_rollout(state, score_sem=contextlib.nullcontext()))  # a group of one
    assert [s["reward"] for s in state["trajectory"]] == [0.5, 0.0]
    assert [s["extras"]["tool_result"] for s in state["trajectory"]] == [True, False]
    assert state["trajectory"][0]["extras"]["turn_rewards"] == {"answer_in_result": 0.5}
    assert state["reward"] == 1.0  # the outcome: exact match 1.0, token overlap weighted 0 (a metric)
    assert state["metrics"] == {"answer_in_result": 0.5, "exact_match": 1.0, "token_overlap": 1.0,
                                "turn_reward": 0.5, "reward_errors": 0.0}


def test_a_failing_or_hanging_or_nan_reward_function_scores_zero_and_is_counted(caplog):
    def broken(turn, env_reply):
        raise KeyError("boom")

    def hangs(turn):
        time.sleep(3)
        return 5.0

    def not_a_number(completion):
        return float("nan")

    rubric = TurnRubric(turn_rewards=[(broken, 1.0), (constant, 2.0), (hangs, 1.0)],
                        outcome_rewards=[(not_a_number, 1.0)], timeout_s=0.2)
    state = make_state([("a", [])])
    start = time.perf_counter()
    with caplog.at_level(logging.ERROR):
        score(rubric, [state])
    assert time.perf_counter() - start < 2.0  # the hanging call was abandoned at its time limit
    assert state["trajectory"][0]["reward"] == 2.0 and state["reward"] == 0.0
    assert state["metrics"]["reward_errors"] == 3.0
    assert "broken on turn 0 (example 0) failed" in caplog.text
    assert "hangs on turn 0 (example 0) took longer than 0.2 s" in caplog.text
    assert "not_a_number (example 0) returned nan" in caplog.text


def test_async_reward_functions_are_awaited_and_bounded():
    async def slow_judge(completion):
        await asyncio.sleep(3)
        return 1.0

    async def judge(completion):
        return 2.0

    state = make_state([("a", [])])
    score(TurnRubric(outcome_rewards=[(judge, 1.0), (slow_judge, 1.0)], timeout_s=0.2), [state])
    assert state["reward"] == 2.0 and state["metrics"]["reward_errors"] == 1.0


def test_partial_reward_functions_are_named_after_the_wrapped_function():
    rubric = TurnRubric(turn_rewards=[(functools.partial(rewards.tool_execution_reward, scale=1.0), 1.0)],
                        outcome_rewards=[(functools.partial(scaled_exact_match, weight=2.0), 1.0)],
                        parser=vf.XMLParser(["answer"]))
    assert rubric._get_reward_func_names()[:3] == ["tool_execution_reward", "scaled_exact_match", "turn_reward"]
    state = make_state([("<answer>Paris</answer>", [])])
    score(rubric, [state])
    assert state["metrics"]["scaled_exact_match"] == 2.0 and state["reward"] == 2.0


def test_extra_rubrics_join_the_outcome():
    def judge(completion) -> float:
        return 3.0 if "Paris" in completion[-1]["content"] else 0.0

    rubric = TurnRubric(rubrics=[vf.Rubric(funcs=[judge])])
    states = [make_state([("Paris", [])]), make_state([("Rome", [])])]
    score(rubric, states)
    assert [s["reward"] for s in states] == [3.0, 0.0]
    assert states[0]["metrics"]["judge"] == 3.0


def test_a_rewritten_history_is_refused_with_a_reason():
    state = make_state([("a", [{"role": "user", "content": "r"}]), ("b", [])])
    state["trajectory"][1]["prompt"] = [{"role": "user", "content": "summary of the history"}]
    with pytest.raises(ValueError, match="turn 1's prompt does not start with turn 0's prompt and completion"):
        score(TurnRubric(turn_rewards=[(constant, 1.0)]), [state])


def test_credit_defaults_are_kept_and_found_inside_groups():
    rubric = TurnRubric(credit={"unreached": "zero"})
    assert rubric.credit == {"unreached": "zero"}
    assert find_turn_rubrics(vf.RubricGroup([vf.Rubric(), rubric])) == [rubric]
