"""Faults injected into the environments' own processes mid-rollout (real processes, real signals, no model server):
vf-alfworld's TextWorldExpress JVM, the sandbox server behind vf-gsm8k-code, and vf-gsm8k-code's math-verify worker.

Rollouts run as `Environment.generate` runs them (verifiers' `run_rollout` per rollout, concurrently, then the
rubric's `score_group`), with a scripted policy standing in for the model (rlvr.testing.ScriptedClient). Each test
asserts: no exception escapes, the rollouts the fault hit end as failed (reward 0, the error recorded, counted by
the trainer's `errors` / `reward_errors` statistics), the others are unaffected, the backend was restarted with
one log line, and it serves again afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal

import pytest
from verifiers.utils.async_utils import NullAsyncContext
from vf_alfworld import load_environment as load_alfworld
from vf_alfworld.records import GameRecord
from vf_gsm8k_code import answers
from vf_gsm8k_code import load_environment as load_gsm8k

from rlvr.restarts import RestartBudget
from rlvr.rollouts import from_state, rollout_statistics
from rlvr.sandbox import core as sandbox
from rlvr.testing import ScriptedClient


async def generate(env, rows, policies, during=None):
    """Rollouts of `rows`, one policy each, scored as one group; `during` (a coroutine) runs alongside."""
    rollouts = asyncio.gather(*(env.run_rollout(dict(row), ScriptedClient(policy), "scripted", {}, NullAsyncContext())
                                for row, policy in zip(rows, policies, strict=True)))  # fmt: skip
    states = (await asyncio.gather(rollouts, during))[0] if during else await rollouts
    await env.rubric.score_group(states, score_sem=NullAsyncContext())
    return states


def failed(states) -> float:
    """How many rollouts the trainer counts as failed (its `errors` statistic)."""
    return sum(rollout_statistics([from_state(s) for s in states])["errors"])


def restart_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rlvr.restarts"]


# --- vf-alfworld's TextWorldExpress JVM ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def twc():
    env = load_alfworld(backend="twc", num_train_examples=0, num_eval_examples=4, max_turns=12)
    env.engines.call_timeout_s = 3.0  # the hang test's watchdog (60 s by default)
    return env, env.get_eval_dataset().to_list()


def walkthrough(row, fault=None):
    """A policy that plays the game's gold path; `fault()` runs once, before its second action."""
    actions = [f"<action>{c}</action>" for c in GameRecord.from_info(json.loads(row["info"])).walkthrough]
    turns = []

    def policy(messages):
        turns.append(1)
        if len(turns) == 2 and fault is not None:
            fault()
        return actions[min(len(turns), len(actions)) - 1]

    return policy


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_jvm_killed_or_hung_mid_rollout_fails_one_rollout_and_is_restarted(twc, fault, caplog):
    env, rows = twc
    engines = env.engines
    engines.restarts = RestartBudget("vf-alfworld: the TextWorldExpress JVM")  # a fresh budget: 3 within 600 s
    jvm = engines.jvm

    def inject():
        if fault == "kill":
            os.kill(jvm.pid, signal.SIGKILL)
            jvm.wait()
        else:  # a stopped JVM answers nothing: only the watchdog can end the call
            os.kill(jvm.pid, signal.SIGSTOP)

    caplog.set_level(logging.WARNING, logger="rlvr.restarts")
    states = asyncio.run(generate(env, rows, [walkthrough(rows[0], inject)] + [walkthrough(r) for r in rows[1:]]))

    # the one call that met the dead JVM failed its rollout; the others replayed their games on the new JVM
    assert failed(states) == 1
    broken = next(s for s in states if s["error"] is not None)
    why = "died (exit code -9)" if fault == "kill" else "did not answer within 3 s and was killed"
    assert f"the TextWorldExpress JVM (pid {jvm.pid}) {why}" in repr(broken["error"])
    assert broken["reward"] == 0.0
    assert [s["reward"] for s in states if s is not broken] == [1.0, 1.0, 1.0]
    assert engines.restarts.restarts == 1
    assert restart_lines(caplog) == [f"vf-alfworld: the TextWorldExpress JVM (pid {jvm.pid}) {why}: restarting it "
                                     "(restart 1 of 3 within 600 s)"]
    assert jvm.poll() is not None and engines.jvm.poll() is None and engines.jvm.pid != jvm.pid
    # the backend serves again: every game is won
    again = asyncio.run(generate(env, rows, [walkthrough(r) for r in rows]))
    assert [s["reward"] for s in again] == [1.0] * 4 and failed(again) == 0


# --- the sandbox server and the math-verify worker (vf-gsm8k-code) -------------------------------------------------


@pytest.fixture(scope="module")
def gsm8k():
    env = load_gsm8k(num_train_examples=1, num_eval_examples=3, sandbox={"timeout": 2.0})
    return env, env.get_eval_dataset().to_list()


def run_then_answer(row, seconds: float = 0.0):
    """A program that prints the gold answer (after `seconds`), then that answer."""
    gold = row["answer"]
    return [f"<code>\nimport time\ntime.sleep({seconds})\nprint({gold!r})\n</code>", f"<answer>{gold}</answer>"]


def the_sandbox_server():
    return sandbox._servers[sandbox.default_python()]


@pytest.fixture
def sandbox_restarts(monkeypatch):
    """A fresh budget, as the sandbox has at start: 5 restarts within 60 s."""
    budget = RestartBudget("rlvr.sandbox: the sandbox server", limit=5, window_s=60.0)
    monkeypatch.setattr(sandbox, "RESTARTS", budget)
    return budget


def test_a_sandbox_server_killed_mid_rollout_loses_no_call_and_is_restarted(gsm8k, sandbox_restarts, caplog):
    env, rows = gsm8k
    asyncio.run(generate(env, rows[:1], [run_then_answer(rows[0])]))  # the server is up
    server = the_sandbox_server()

    async def kill_mid_call():
        await asyncio.sleep(0.6)  # the programs sleep 1.5 s: each is running in its own process tree
        os.kill(server.process.pid, signal.SIGKILL)

    caplog.set_level(logging.WARNING, logger="rlvr.restarts")
    states = asyncio.run(generate(env, rows, [run_then_answer(r, 1.5) for r in rows], kill_mid_call()))
    # a call the server has handed on finishes without it: nothing failed
    assert server.process.poll() == -signal.SIGKILL
    assert failed(states) == 0 and [s["reward"] for s in states] == [1.0] * 3  # every answer correct
    # the next call starts a new server, with one line
    again = asyncio.run(generate(env, rows, [run_then_answer(r) for r in rows]))
    assert failed(again) == 0 and [s["reward"] for s in again] == [1.0] * 3
    assert sandbox_restarts.restarts == 1 and the_sandbox_server() is not server
    assert restart_lines(caplog) == [f"rlvr.sandbox: the sandbox server (pid {server.process.pid}) died (exit code -9)"
                                     ": restarting it (restart 1 of 5 within 60 s)"]


def test_a_hung_sandbox_server_fails_the_rollouts_it_held_and_is_replaced(gsm8k, sandbox_restarts, caplog,
                                                                          monkeypatch):
    env, rows = gsm8k
    monkeypatch.setattr(sandbox, "GRACE_SECONDS", 1.0)
    asyncio.run(generate(env, rows[:1], [run_then_answer(rows[0])]))  # the server is up
    server = the_sandbox_server()
    os.kill(server.process.pid, signal.SIGSTOP)  # takes no call any more

    caplog.set_level(logging.WARNING, logger="rlvr.restarts")
    states = asyncio.run(generate(env, rows[:2], [run_then_answer(r) for r in rows[:2]]))
    assert failed(states) == 2 and [s["reward"] for s in states] == [0.0, 0.0]
    for state in states:
        assert (f"the sandbox server (pid {server.process.pid}) did not take a call for 3 s and was killed"
                in repr(state["error"]))
    assert server.process.poll() == -signal.SIGKILL
    again = asyncio.run(generate(env, rows, [run_then_answer(r) for r in rows]))
    assert failed(again) == 0 and [s["reward"] for s in again] == [1.0] * 3
    assert sandbox_restarts.restarts == 1
    assert restart_lines(caplog) == [f"rlvr.sandbox: the sandbox server (pid {server.process.pid}) did not take a "
                                     "call for 3 s and was killed: restarting it (restart 1 of 5 within 60 s)"]


def test_a_math_verify_worker_killed_mid_comparison_fails_that_score_and_is_restarted(gsm8k, caplog):
    env, rows = gsm8k
    rows = rows[:2]
    # \frac{gold}{1} is not a plain number: compared by the worker
    policies = [[f"<answer>\\frac{{{r['answer']}}}{{1}}</answer>"] for r in rows]
    worker = answers.WORKER
    worker.restarts = RestartBudget("vf-gsm8k-code: the math-verify worker")  # a fresh budget: 3 within 600 s
    process = worker._started()
    os.kill(process.pid, signal.SIGSTOP)  # the first comparison waits in it ...

    async def kill_mid_comparison():
        await asyncio.sleep(0.5)
        os.kill(process.pid, signal.SIGKILL)  # ... until it is killed, as the OOM killer would

    async def scored():
        states = await asyncio.gather(*(env.run_rollout(dict(r), ScriptedClient(p), "scripted", {}, NullAsyncContext())
                                        for r, p in zip(rows, policies, strict=True)))  # fmt: skip
        await asyncio.gather(env.rubric.score_group(states, score_sem=NullAsyncContext()), kill_mid_comparison())
        return states

    caplog.set_level(logging.WARNING, logger="rlvr.restarts")
    states = asyncio.run(scored())
    errors = [s["metrics"]["reward_errors"] for s in states]
    assert sorted(errors) == [0.0, 1.0]  # the trainer's reward_errors statistic counts it
    assert sorted(s["reward"] for s in states) == [0.0, 1.0]  # the other comparison ran on a new worker
    assert worker.restarts.restarts == 1
    assert restart_lines(caplog) == [f"vf-gsm8k-code: the math-verify worker (pid {process.pid}) died (exit code -9)"
                                     ": restarting it (restart 1 of 3 within 600 s)"]
    assert worker._process is not None and worker._process.pid != process.pid
    assert worker.equal("72", "\\frac{144}{2}")  # it serves again
