"""A hub-shaped v1 environment through the bridge, offline: environments_v1/v1_reverse_text exports a Taskset and
no Harness, so verifiers plays it with its own default harness, `bash`, whose chat program the subprocess runtime
installs with `uv sync --script` in every new process. scripts/setup_v1.sh locked that program and filled uv's
cache (rlvr.v1.worker.prepare_programs); here every process rlvr starts has its proxies pointed at a closed port
(loopback excepted, where the server and verifiers' interception live), so a sync that reached for the package
index would fail the episode, and the test with it. The server is the session's training server (its
--enable-scale-out token route)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr import models
from rlvr.v1 import V1Environment

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ENV = "v1:v1-reverse-text"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
BASH_HARNESS = "You are a coding agent."  # verifiers' bash harness puts this before the task's system prompt


@pytest.fixture(scope="module")
def no_index() -> dict[str, str]:
    """Proxy settings under which nothing but loopback is reachable: every proxy names a port nothing listens on
    (taken and released here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    return {**{n: dead for n in names}, **{n.lower(): dead for n in names},
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def rlvr(*args: str, env: dict[str, str], timeout: float) -> None:
    result = subprocess.run([sys.executable, "-m", "rlvr.cli", *args], cwd=REPO, env={**os.environ, **OFFLINE, **env},
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.timeout(1800)  # the session server's start, on a machine others may load
@pytest.mark.parametrize("harness", [None, "null"])
def test_the_episode_is_verifiers_harness(training_server, no_index, monkeypatch, harness):
    """The prompt the model saw is the one verifiers' harness built: bash's coding-agent preamble by default, the
    task's own system prompt alone with the null harness."""
    for name, value in no_index.items():
        monkeypatch.setenv(name, value)  # the bridge's worker inherits them
    config = {"taskset": {"num_tasks": 1}} | ({"agent": {"harness": {"id": harness}}} if harness else {})
    env = V1Environment(ENV, config)
    try:
        (task,) = env.tasks()
        (rollout,) = env.rollouts([{"example_id": 0, "prompt": task["prompt"]}], 1, url=training_server.url,
                                  model="tiny-random", model_path=models.resolve("tiny-random"),
                                  sampling_args={"max_tokens": 8}, max_concurrent=1, seed=0)
    finally:
        env.close()
    assert rollout.error is None, rollout.error
    (turn,) = rollout.turns
    from transformers import AutoTokenizer

    seen = AutoTokenizer.from_pretrained(models.resolve("tiny-random")).decode(turn.tokens.prompt_ids)
    assert task["prompt"][-1]["content"] in seen and "<reversed> tags" in seen
    assert (BASH_HARNESS in seen) == (harness is None), seen


@pytest.mark.timeout(1800)
def test_evaluate(training_server, no_index, tmp_path):
    out = tmp_path / "eval"
    rlvr("evaluate", "--env", ENV, "--endpoint", f"{training_server.url}/v1", "-n", "2", "-r", "2", "--max-tokens",
         "8", "-o", str(out), "-a", json.dumps({"taskset": {"num_tasks": 2}}), env=no_index, timeout=900)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["example_id"] for r in rows] == [0, 0, 1, 1]
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward"]["n"] == 4 and 0.0 <= summary["reward"]["mean"] <= 1.0
    assert "similarity" in summary and "exact" in summary


@pytest.mark.timeout(1800)
def test_train_two_steps(training_server, no_index, tmp_path):
    run_dir = tmp_path / "run"
    settings = dict(max_steps=2, batch_size=4, rollouts_per_example=2, micro_batch_size=4, max_tokens_per_turn=8,
                    max_seq_len=2048, report_to="none", logging_steps=1, progress="false")
    rlvr("train", "--env", ENV, "--model", "tiny-random", "--algo", "grpo", "--server", training_server.url,
         "-o", str(run_dir), "-a", json.dumps({"taskset": {"num_tasks": 4}}),
         *(arg for k, v in settings.items() for arg in ("-s", f"{k}={v}")), env=no_index, timeout=1200)
    steps = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1]
    trained = [json.loads(line) for line in (run_dir / "token_credit.jsonl").read_text().splitlines()]
    assert len(trained) == 8 and all(r["error"] is None for r in trained), [r["error"] for r in trained]
    assert all(0 < len(r["samples"][0]["token_ids"]) <= 8 for r in trained)
    assert (run_dir / "final").is_dir()
