"""TurnRubric on hand-built verifiers states: construction errors, scoring alone, failures, anchors, extra rubrics."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

import pytest
import verifiers as vf

from rlvr.rubrics import TurnRubric, rewards

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
    with pytest.raises(ValueError, match="1 turn_weights for 2 turn_funcs"):
        TurnRubric(turn_funcs=[rewards.tool_execution_reward, rewards.answer_in_search_results], turn_weights=[1.0])
    with pytest.raises(ValueError, match="unknown estimator 'mtgrpo'"):
        TurnRubric(estimator="mtgrpo")
    with pytest.raises(TypeError, match="unknown parameter"):
        TurnRubric(estimator="mt_grpo", estimator_params={"turn_coef": 1.0})


def test_env_reply_per_turn_and_final_reply():
    seen = []

    def spy(turn, env_reply, turn_index):
        seen.append((turn_index, turn[0]["content"], env_reply))
        return 0.0

    reply = [{"role": "user", "content": "<result>r</result>"}]
    final = [{"role": "user", "content": "bye"}]
    score(TurnRubric(turn_funcs=[spy]), [make_state([("a", reply), ("b", [])], final_reply=final)])
    assert seen == [(0, "a", reply), (1, "b", final)]


def test_scored_alone_a_rollout_gets_rewards_and_zero_advantages():
    rubric = TurnRubric(turn_funcs=[rewards.answer_in_search_results], outcome_funcs=[rewards.exact_match],
                        parser=vf.XMLParser(["answer"]))
    state = make_state([("<tool>x</tool>", [{"role": "user", "content": "<result>Paris</result>"}]),
                        ("<answer>Paris</answer>", [])])
    asyncio.run(rubric.score_rollout(state, score_sem=contextlib.nullcontext()))
    assert [s["reward"] for s in state["trajectory"]] == [0.5, 0.0]
    assert [s["advantage"] for s in state["trajectory"]] == [0.0, 0.0]
    assert state["reward"] == 1.0 and state["advantage"] == 0.0
    assert state["metrics"]["first_result_turn"] == 0.0


def test_a_failing_turn_function_scores_zero_and_is_logged(caplog):
    def broken(turn, env_reply):
        raise KeyError("boom")

    state = make_state([("a", [])])
    with caplog.at_level(logging.ERROR):
        score(TurnRubric(turn_funcs=[broken, lambda turn: 1.0], turn_weights=[1.0, 2.0]), [state])
    assert state["trajectory"][0]["reward"] == 2.0
    assert "broken failed on turn 0" in caplog.text


def test_partial_turn_functions_are_named_after_the_wrapped_function():
    rubric = TurnRubric(turn_funcs=[functools.partial(rewards.tool_execution_reward, scale=1.0)],
                        outcome_funcs=[functools.partial(rewards.exact_match, weight=2.0)],
                        parser=vf.XMLParser(["answer"]))
    assert rubric._get_reward_func_names()[:3] == ["tool_execution_reward", "turn_reward", "exact_match"]
    state = make_state([("<answer>Paris</answer>", [])])
    score(rubric, [state])
    assert state["metrics"]["exact_match"] == 2.0 and state["reward"] == 2.0


def test_anchor_state_keys_from_step_extras_reach_turn_return():
    # two one-turn rollouts with outcomes 1 and 0, norm "none", omega 1: A^E = [0.5, -0.5]; both turns share the
    # anchor "s" with returns [1, 0] -> A^S = [0.5, -0.5]; A = [1, -1]. Without anchors: per index -> [0.5, -0.5].
    rubric = TurnRubric(outcome_funcs=[rewards.exact_match], parser=vf.XMLParser(["answer"]),
                        estimator="turn_return", estimator_params={"norm": "none"})
    states = [make_state([("<answer>Paris</answer>", [])], state_keys=["s"]),
              make_state([("<answer>Rome</answer>", [])], state_keys=["s"])]
    score(rubric, states)
    assert [s["trajectory"][0]["advantage"] for s in states] == [1.0, -1.0]
    plain = [make_state([("<answer>Paris</answer>", [])]), make_state([("<answer>Rome</answer>", [])])]
    score(rubric, plain)
    assert [s["trajectory"][0]["advantage"] for s in plain] == [0.5, -0.5]


def test_extra_rubrics_join_the_outcome():
    def judge(completion) -> float:
        return 3.0 if "Paris" in completion[-1]["content"] else 0.0

    rubric = TurnRubric(estimator="grpo", estimator_params={"norm": "none"}, rubrics=[vf.Rubric(funcs=[judge])])
    states = [make_state([("Paris", [])]), make_state([("Rome", [])])]
    score(rubric, states)
    assert [s["reward"] for s in states] == [3.0, 0.0]
    assert [s["advantage"] for s in states] == [1.5, -1.5]
    assert states[0]["metrics"]["judge"] == 3.0


def test_a_rewritten_history_is_refused_with_a_reason():
    state = make_state([("a", [{"role": "user", "content": "r"}]), ("b", [])])
    state["trajectory"][1]["prompt"] = [{"role": "user", "content": "summary of the history"}]
    with pytest.raises(ValueError, match="turn 1's prompt does not start with turn 0's prompt and completion"):
        score(TurnRubric(turn_funcs=[lambda turn: 0.0]), [state])


def test_state_keys_are_ignored_by_estimators_without_anchor_grouping():
    rubric = TurnRubric(outcome_funcs=[rewards.exact_match], parser=vf.XMLParser(["answer"]),
                        estimator="grpo", estimator_params={"norm": "none"})
    states = [make_state([("<answer>Paris</answer>", [])], state_keys=["s"]),
              make_state([("<answer>Rome</answer>", [])], state_keys=["s"])]
    score(rubric, states)
    assert [s["trajectory"][0]["advantage"] for s in states] == [0.5, -0.5]
