"""Scripted policies for the vf-credit-suite tests: they read only what the model reads (the observation line and
the turn number) and answer with one action word, and the same choice can be replayed through `rlvr.suite.tasks`."""

from __future__ import annotations

import asyncio
import json

from rlvr.suite.protocol import INVALID_PREFIX, RESULT_PREFIX
from rlvr.suite.tasks import Task, solve


def observed(messages) -> tuple[str, tuple[str, ...], int]:
    """(state text, allowed actions, turn) from the messages a policy is given."""
    line = messages[-1]["content"].rsplit("\n", 1)[-1].removeprefix(RESULT_PREFIX).removeprefix(INVALID_PREFIX)
    text, _, listed = line.partition(" Actions: ")
    turn = sum(m["role"] == "assistant" for m in messages)
    return text, tuple(listed.removesuffix(".").split(", ")), turn


def optimal_choice(task: Task):
    """choose(text, turn) -> an action optimal (for the outcome) in every state with that text at that turn (the
    lock tasks show door k and its dead end alike: any action is optimal in the dead end)."""
    solution = solve(task)

    def choose(text: str, turn: int) -> str:
        keys = [key for key, k in solution.policy if k == turn and task.state(key).text == text]
        assert keys, f"{task.name}: no reachable state is shown as {text!r} at turn {turn}"
        common = set.intersection(*(set(solution.policy[(key, turn)]) for key in keys))
        assert common, f"{task.name}: no action is optimal in every state shown as {text!r} at turn {turn}"
        return next(a for a in task.state(keys[0]).actions if a in common)

    return choose


def text_policy(choose):
    """A ScriptedClient policy from choose(text, turn)."""

    def policy(messages) -> str:
        text, _, turn = observed(messages)
        return f"I say {choose(text, turn)}."

    return policy


def key_policy(task: Task, choose):
    """The same choice for rlvr.suite.tasks.rollout: choose(state key, turn) through the state's text."""
    return lambda key, turn: choose(task.state(key).text, turn)


def evaluate(env, policy, n: int, rollouts: int = 1) -> list[dict]:
    from rlvr.testing import ScriptedClient

    out = asyncio.run(env.evaluate(ScriptedClient(policy), "scripted", num_examples=n, rollouts_per_example=rollouts))
    return out["state"]


def row_seed(state) -> int:
    info = state["info"]
    return int((json.loads(info) if isinstance(info, str) else info)["seed"])
