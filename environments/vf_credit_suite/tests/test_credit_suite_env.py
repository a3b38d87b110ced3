"""vf-credit-suite against rlvr.suite.tasks: every task loads; scripted policies through real verifiers rollouts
score what the task's own episode function scores (turn rewards, anchor keys, tool results, outcome); the optimal
policy gets the optimal return and a bad one less; invalid replies, parsing, prompt and filler lengths."""

from __future__ import annotations

import math
import re
from functools import cache

import pytest
from credit_suite_policies import evaluate, key_policy, observed, optimal_choice, row_seed, text_policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer
from vf_credit_suite import CREDIT_DEFAULTS, load_environment, parse_action

from rlvr import models
from rlvr.rollouts import from_state
from rlvr.rubrics import find_turn_rubrics
from rlvr.suite.protocol import INVALID_PREFIX, filler, observation
from rlvr.suite.tasks import BUILDERS, TASKS, play, rollout, solve

TASK_NAMES = sorted(BUILDERS)
N = 16  # rows per check


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(models.prepare("tiny-random"))  # the SmolLM2 tokenizer of both models


@pytest.mark.parametrize("name", TASK_NAMES)
def test_load_environment_for_every_task(name):
    env = load_environment(task=name, num_examples=5, num_eval_examples=3)
    task = TASKS[name]
    assert env.task == task and env.max_turns == task.turns
    assert len(env.dataset) == 5 and len(env.eval_dataset) == 3
    assert env.system_prompt == task.prompt + " Reply with one action word."
    row = env.eval_dataset[0]
    assert row["prompt"][-1]["content"] == observation(task, task.start) == (
        f"{task.state(task.start).text} Actions: {', '.join(task.state(task.start).actions)}.")
    assert sorted(env.eval_dataset["example_id"]) == [0, 1, 2]
    (rubric,) = find_turn_rubrics(env.rubric)
    assert rubric.credit == dict(CREDIT_DEFAULTS.get(name, {}))


def test_credit_defaults_and_override():
    rubric = find_turn_rubrics(load_environment(task="early_stop", num_examples=1, num_eval_examples=1).rubric)[0]
    assert rubric.credit == {"unreached": "zero"}
    override = load_environment(task="early_stop", num_examples=1, num_eval_examples=1, credit={}).rubric
    assert find_turn_rubrics(override)[0].credit == {}


def test_rows_are_seeded():
    def seeds(env):
        return [r["info"] for r in env.dataset], [r["info"] for r in env.eval_dataset]

    a = seeds(load_environment(task="repeated_states", num_examples=8, num_eval_examples=8, seed=0))
    assert a == seeds(load_environment(task="repeated_states", num_examples=8, num_eval_examples=8, seed=0))
    assert a != seeds(load_environment(task="repeated_states", num_examples=8, num_eval_examples=8, seed=1))
    assert len(set(a[0])) == 8 and set(a[0]).isdisjoint(a[1])


def test_task_params_build_a_fresh_instance():
    env = load_environment(task="long_horizon", task_params={"turns": 8}, num_examples=1, num_eval_examples=1)
    assert env.task.turns == env.max_turns == 8 and env.task != TASKS["long_horizon"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(task="bandit"), "unknown task 'bandit'; choose one of"),
    (dict(num_examples=0), "must both be >= 1"),
    (dict(task="misleading_reward", task_params={"lure": 0.5}), "must exceed the outcome reward"),
])
def test_bad_arguments_say_what_to_do(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_environment(**kwargs)


def test_parse_action():
    actions = ("left", "right")
    assert parse_action("I go RIGHT, then left", actions) == "right"
    assert parse_action("leftward or rightmost", actions) is None  # whole words only
    assert parse_action("", actions) is None and parse_action(None, actions) is None
    assert parse_action("a b", ("A", "B")) == "A"  # case-insensitive: the article says A
    assert parse_action("A1 B.", ("A", "B")) == "B"
    assert parse_action("x" * 200_000 + " B", ("A", "B")) == "B"


WORDS = st.sampled_from(["A", "b", "left", "RIGHT", "search", "x", "a1", "_", "é"])
SEPARATORS = st.sampled_from([" ", ".", "\n", ", ", "", "-"])


@given(st.lists(st.tuples(WORDS, SEPARATORS), max_size=12))
def test_parse_action_is_the_first_allowed_word(pieces):
    text = "".join(w + s for w, s in pieces)
    actions = ("A", "B", "left", "right")
    words = [w for w in re.split(r"\W+", text) if w]  # maximal runs of word characters
    expected = next((a for w in words for a in actions if w.lower() == a.lower()), None)
    assert parse_action(text, actions) == expected


@pytest.mark.parametrize("name", TASK_NAMES)
def test_optimal_policy_scores_the_optimal_return_and_matches_the_task(name):
    env = load_environment(task=name, num_examples=1, num_eval_examples=N)
    task, value = env.task, solve(env.task).value
    choose = optimal_choice(task)
    states = evaluate(env, text_policy(choose), N)
    for state in states:
        episode = rollout(task, key_policy(task, choose), seed=row_seed(state))
        record = from_state(state)
        assert record.outcome == episode.outcome and state["metrics"]["outcome"] == episode.outcome
        assert record.turn_rewards == list(episode.turn_rewards)
        assert record.state_keys == list(episode.states)
        assert record.first_result_turn == episode.first_result_turn
        assert state["metrics"]["valid_action"] == len(episode.actions)
    mean = sum(s["reward"] for s in states) / N
    if name == "repeated_states":  # slips: the mean over N seeded rows is near the optimal value 0.983
        assert abs(mean - value) <= 4 * math.sqrt(value * (1 - value) / N)
    else:  # deterministic tasks: every rollout
        assert value == 1.0 and [s["reward"] for s in states] == [1.0] * N


@pytest.mark.parametrize("name", TASK_NAMES)
def test_a_bad_policy_scores_less(name):
    """Always the first allowed action: the wrong search, the lure, code A, left, search again."""
    env = load_environment(task=name, num_examples=1, num_eval_examples=N)
    states = evaluate(env, lambda messages: observed(messages)[1][0], N)
    assert sum(s["reward"] for s in states) / N < solve(env.task).value


def test_the_lure_pays_more_turn_reward_and_no_outcome():
    """misleading_reward: taking the lure maximises turn rewards + outcome (what GRPO-MR sums) at outcome 0."""
    env = load_environment(task="misleading_reward", num_examples=1, num_eval_examples=2)
    (lure,) = {s["metrics"]["turn_reward"] + s["reward"] for s in evaluate(env, lambda m: "A", 2)}
    (best,) = {s["metrics"]["turn_reward"] + s["reward"] for s in evaluate(env, text_policy(optimal_choice(env.task)), 2)}
    assert (lure, best) == (1.5, 1.0) and solve(env.task, "total").value == 1.5


@cache
def small_environment(name: str):
    return load_environment(task=name, num_examples=1, num_eval_examples=2)


@pytest.mark.parametrize("name", TASK_NAMES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choices=st.lists(st.integers(0, 25), min_size=8, max_size=8))
def test_rollouts_match_the_tasks_episode_function(name, choices):
    """Any sequence of allowed actions: turn rewards, anchor keys, tool results and outcome equal
    rlvr.suite.tasks.play's for the same actions and the row's seed."""
    env = small_environment(name)

    def policy(messages):
        _, actions, turn = observed(messages)
        return actions[choices[turn] % len(actions)].lower()

    for state in evaluate(env, policy, 2, rollouts=2):
        actions = [s["extras"]["credit_suite"]["action"] for s in state["trajectory"]]
        episode = play(env.task, actions, seed=row_seed(state))
        record = from_state(state)
        assert record.turn_rewards == list(episode.turn_rewards)
        assert record.state_keys == list(episode.states)
        assert record.first_result_turn == episode.first_result_turn
        assert record.outcome == episode.outcome
        assert state["stop_condition"] in ("has_final_env_response", "max_turns_reached")


@pytest.mark.parametrize("name", TASK_NAMES)
def test_invalid_replies_spend_the_turn_in_place(name):
    env = load_environment(task=name, num_examples=1, num_eval_examples=2)
    task = env.task
    for state in evaluate(env, lambda messages: "I am not sure.", 2):
        steps = state["trajectory"]
        assert len(steps) == task.turns and state["reward"] == 0.0
        assert [s["extras"]["state_key"] for s in steps] == [task.start] * task.turns
        assert [s["reward"] for s in steps] == [0.0] * task.turns
        assert state["metrics"]["valid_action"] == 0.0 and from_state(state).first_result_turn is None
        replies = [m["content"] for m in state["completion"] if m["role"] == "user"]
        assert all(r.rsplit("\n", 1)[-1].startswith(INVALID_PREFIX) for r in replies)


def test_long_replies_carry_the_tasks_filler(tokenizer):
    env = load_environment(task="long_replies", num_examples=1, num_eval_examples=1)
    task = env.task
    assert len(tokenizer(filler(32), add_special_tokens=False).input_ids) == 32
    (state,) = evaluate(env, text_policy(optimal_choice(task)), 1)
    replies = [m["content"] for m in state["completion"] if m["role"] == "user"]
    assert len(replies) == task.turns  # a reply after every turn, the last one final
    for k, reply in enumerate(replies[:-1]):
        head, _, line = reply.rpartition("\n")
        assert head == filler(task.reply_tokens[k]) and task.reply_tokens[k] == 32
        assert line == observation(task, f"door{k + 1}")
    assert replies[-1] == observation(task, "open")
    others = evaluate(load_environment(task="long_horizon", num_examples=1, num_eval_examples=1), lambda m: "A", 1)
    assert not any("\n" in m["content"] for m in others[0]["completion"] if m["role"] == "user")


@pytest.mark.parametrize("name", TASK_NAMES)
def test_prompts_are_short(tokenizer, name):
    """Tiny models: the chat-templated first prompt stays under 80 tokens, every action is one word."""
    env = load_environment(task=name, num_examples=1, num_eval_examples=1)
    ids = tokenizer.apply_chat_template(env.eval_dataset[0]["prompt"], tokenize=True, add_generation_prompt=True)
    assert len(ids if isinstance(ids, list) else ids["input_ids"]) < 80
    assert all(re.fullmatch(r"\w+", a) for s in env.task.states for a in s.actions)
