"""The bridge for real: verifiers 0.4 in .venv-v1 runs v1 episodes against a tiny-random `rlvr serve`, and rlvr
trains on them; broken v1 environments end in one clear error, never a hang. The server is the session's training
server: verifiers v1 samples through vLLM's /inference/v1/generate, which needs --enable-scale-out
(rlvr.v1.bridge.SERVE_FLAGS), and the training server is started with it (conftest.py); the tiny_server, without it,
shows the error a server without that route gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlvr import models
from rlvr.cli import app
from rlvr.v1 import V1Environment, V1Error
from rlvr.v1.bridge import check_generate
from rlvr.view.export import export_html
from rlvr.view.records import to_rollout as view_rollout

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BROKEN = Path(__file__).parent / "envs"  # v1_broken, put on the worker's path
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
SAMPLING = {"temperature": 1.0, "max_tokens": 8}


def rollouts(env: V1Environment, server, mode: str | None = None, **kwargs):
    """Two episodes of each task (of v1-broken's `mode` only, when given)."""
    rows = [{"example_id": t["idx"], "prompt": t["prompt"]} for t in env.tasks()
            if mode is None or t["data"]["mode"] == mode]
    return env.rollouts(rows, 2, url=server.url, model="tiny-random", model_path=models.resolve("tiny-random"),
                        sampling_args=SAMPLING, max_concurrent=4, seed=0, **kwargs)


@pytest.mark.timeout(3600)  # the session server's start and a training run on a machine others may load
def test_train_three_steps_through_the_bridge(training_server, tmp_path):
    """`rlvr train` on v1-calculator (multi-turn, a tool, turn rewards) with a turn-level estimator."""
    run_dir = tmp_path / "run"
    settings = dict(max_steps=3, batch_size=8, rollouts_per_example=4, micro_batch_size=8, max_tokens_per_turn=8,
                    max_seq_len=512, report_to="none", logging_steps=1, progress="false")
    command = [sys.executable, "-m", "rlvr.cli", "train", "--env", "v1:v1-calculator", "--model", "tiny-random",
               "--algo", "mt_grpo", "--server", training_server.url, "-o", str(run_dir),
               "-a", json.dumps({"taskset": {"num_tasks": 8}})]
    command += [arg for k, v in settings.items() for arg in ("-s", f"{k}={v}")]
    result = subprocess.run(command, cwd=REPO, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2]
    logged = [r for s in steps for r in s["rollouts"]]
    assert logged and all(len(r["turn_rewards"]) == len(r["turn_advantages"]) >= 1 for r in logged)
    assert all(r["error"] == "" for r in logged)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("turn/1/reward" in m for m in metrics)
    credit = [json.loads(line) for line in (run_dir / "token_credit.jsonl").read_text().splitlines()]
    assert credit, "rlvr view reads the advantages per token from token_credit.jsonl"
    for record in credit:  # as rlvr view reads it: every turn's trained tokens with their advantage
        shown = view_rollout(record)
        trained = [t for sample in shown.samples for t in sample.tokens if t.trained]
        assert {t.turn for t in trained} == set(range(len(shown.turn_advantages)))
        assert all(t.advantage is not None for t in trained)
    assert export_html(run_dir, tmp_path / "view.html")[1:] == (len(credit), len(credit))
    assert (run_dir / "final").is_dir()


def test_evaluate(training_server, tmp_path):
    """`rlvr evaluate` on a v1 environment: the metrics table and results in vf-eval's layout, turn rewards too."""
    out = tmp_path / "eval"
    result = subprocess.run([sys.executable, "-m", "rlvr.cli", "evaluate", "--env", "v1:v1-calculator", "--endpoint",
                             f"{training_server.url}/v1", "-n", "2", "-r", "2", "--max-tokens", "8", "-o", str(out),
                             "-a", json.dumps({"taskset": {"num_tasks": 4}})],
                            cwd=REPO, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["example_id"] for r in rows] == [0, 0, 1, 1]
    assert all(len(r["turn_rewards"]) >= 1 and r["error"] is None for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward"]["n"] == 4 and "turn/1/reward" in summary


def test_episodes_carry_the_servers_tokens(training_server):
    env = V1Environment("v1:v1-calculator", {"taskset": {"num_tasks": 2}})
    try:
        got = rollouts(env, training_server)
    finally:
        env.close()
    assert [r.example_id for r in got] == [0, 0, 1, 1]
    for rollout in got:
        assert rollout.error is None and rollout.turn_level
        for turn in rollout.turns:
            assert 0 < len(turn.tokens.completion_ids) <= SAMPLING["max_tokens"]
            assert all(lp <= 0.0 for lp in turn.tokens.completion_logprobs)


@pytest.mark.parametrize(("modes", "timeout", "messages"), [
    (["raise_reward"], 300,
     [r"every episode of batch 0 of v1:v1-broken failed: .*ZeroDivisionError: the reward divided by zero "
      r"\(raised in reward, v1_broken/__init__.py:\d+\)"]),
    # one worker start for both: the hanging episodes are cancelled and the worker goes on to the blocking ones,
    # which die with it at the batch's deadline (5 s + a 15 s margin: the default 30 s would only make it wait)
    (["hang", "block"], 5, [r"every episode .* failed: the episode outlived its 5 s limit and was cancelled",
                            r"every episode .* failed: killed with the v1 worker at the batch's 20 s deadline .*"
                            r"make its blocking calls awaitable"]),
], ids=["raise_reward", "hang_then_block"])
def test_broken_environments_fail_in_one_line(training_server, monkeypatch, modes, timeout, messages):
    monkeypatch.setenv("PYTHONPATH", str(BROKEN))
    env = V1Environment("v1:v1-broken", {"taskset": {"mode": ",".join(modes)},
                                         "rlvr": {"episode_timeout": timeout, "deadline_margin": 15}})
    try:
        for batch, (mode, message) in enumerate(zip(modes, messages, strict=True)):
            start = time.monotonic()
            with pytest.raises(V1Error, match=message) as caught:
                rollouts(env, training_server, mode, batch=batch)
            assert "\n" not in str(caught.value)
            assert time.monotonic() - start < timeout + 180  # the worker's start-up included
    finally:
        env.close()


def test_a_trace_without_token_ids_is_named(training_server):
    """An agent pinned to verifiers' eval client gets answers without token ids: nothing to train on."""
    client = {"type": "eval", "base_url": f"{training_server.url}/v1", "api_key_var": "RLVR_V1_API_KEY"}
    env = V1Environment("v1:v1-calculator", {"taskset": {"num_tasks": 1}, "agent": {"client": client}})
    try:
        with pytest.raises(V1Error, match="carries no token ids .* TrainClientConfig"):
            rollouts(env, training_server)
    finally:
        env.close()


def test_a_harness_that_asks_for_a_container_is_named(training_server):
    """verifiers' Harness defaults to NEEDS_CONTAINER = True (every built-in one but null and bash keeps it), which
    verifiers refuses in the subprocess runtime with a line that names docker or prime: rlvr's line names its fix."""
    env = V1Environment("v1:v1-reverse-text", {"taskset": {"num_tasks": 1},
                                               "agent": {"harness": {"id": "mini_swe_agent"}}})
    try:
        with pytest.raises(V1Error, match=r"every episode .* failed: the harness asks for a container .* set "
                                          r"NEEDS_CONTAINER = False .* use the null or bash harness") as caught:
            rollouts(env, training_server)
        assert "\n" not in str(caught.value)
    finally:
        env.close()


@pytest.mark.timeout(3600)  # the shared server's start when this module is the first to ask for it
def test_what_cannot_run_here_is_named(tiny_server):
    with pytest.raises(V1Error, match="does not serve /inference/v1/generate .* --enable-scale-out"):
        check_generate(tiny_server.url, "tiny-random")
    hosted = V1Environment("v1:v1-calculator", {"agent": {"runtime": {"type": "prime"}}})
    with pytest.raises(V1Error, match="'prime' runtime, which rlvr's bridge cannot run here.*subprocess"):
        hosted.tasks()
    missing = V1Environment("v1:no-such-taskset")
    with pytest.raises(V1Error, match="not found.*Install it into the bridge's interpreter"):
        missing.tasks()
    # the CLI says each in one line too, not a traceback: on load and from the rollouts
    for env, says in (("v1:", "`v1:` names no environment"), ("v1:v1-calculator", "does not serve /inference")):
        result = CliRunner().invoke(app, ["evaluate", "--env", env, "--endpoint", f"{tiny_server.url}/v1", "-n", "1",
                                          "-r", "1", "--max-tokens", "4"])
        assert result.exit_code == 2, result.output[-2000:]
        assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
            result.output.splitlines()[-1]] and says in result.output.splitlines()[-1], result.output[-2000:]
