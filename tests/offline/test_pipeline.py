"""The offline pipeline end to end on tiny-random, all through the `rlvr` CLI: collect (real vLLM server) -> SFT ->
OREO -> evaluate with value-guided beam search; and OREO runs killed with SIGKILL or stopped with SIGTERM that
resume exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import verifiers  # noqa: F401  (imported before the runner swaps stderr: its log handler keeps the real one)
from safetensors.torch import load_file
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.trajectories import load_trajectories

pytestmark = pytest.mark.slow

ENV_ARGS = json.dumps({"num_train_examples": 4, "num_eval_examples": 2})
SMALL = ["--set", "batch_size=2", "--set", "micro_batch_size=2", "--set", "progress=false", "--set", "max_length=512"]


def ok(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"{result.output[-3000:]}\n{result.exception!r}"
    return result


@pytest.fixture(scope="module")
def expert(tmp_path_factory):
    from vf_arithmetic import load_environment
    from vf_arithmetic.expert import export_expert_dataset

    return export_expert_dataset(load_environment(**json.loads(ENV_ARGS)), tmp_path_factory.mktemp("expert"))


def test_collect_sft_oreo_evaluate(tmp_path, tiny_server, expert):
    collect = tmp_path / "collect"
    args = ["collect", "--env", "vf-arithmetic", "--env-args", ENV_ARGS, "--model", "tiny-random",
            "--endpoint", tiny_server.url, "-r", "2", "--max-tokens", "12", "--prompts-per-request", "2", "-o", collect]
    out = ok(*args)
    assert "success rate" in out.output
    trajectories = load_trajectories(collect)
    assert len(trajectories) == 8 and {t.sample_index for t in trajectories} == {0, 1}
    assert all(t.segmentation == "line" and t.steps[0] == (0, 0) and t.policy == "tiny-random" for t in trajectories)
    assert json.loads((collect / "collect.json").read_text())["rollouts_per_example"] == 2
    lines = (collect / "predictions.jsonl").read_text()
    ok(*args)  # resumed: every group is complete, nothing is generated again
    assert (collect / "predictions.jsonl").read_text() == lines
    changed = [a if a != "12" else "13" for a in args]
    result = CliRunner().invoke(app, [str(a) for a in changed])
    assert result.exit_code == 2 and "other settings" in result.output

    ok("train", "--algo", "sft", "--dataset", expert, "--model", "tiny-random", "-o", tmp_path / "sft", *SMALL,
       "--set", "num_train_epochs=1")
    assert (tmp_path / "sft" / "final" / "model.safetensors").is_file()

    ok("train", "--algo", "oreo", "--dataset", collect, "--model", tmp_path / "sft" / "final", "-o", tmp_path / "oreo",
       *SMALL, "--set", "max_steps=2", "--set", "value_learning_rate=1e-3",
       # tiny-random never succeeds: rewards {0, 1} -> {-1, 1} (train_pcl.py's default --rew_mul 2 --rew_add -1)
       # gives the value model a target other than its zero start
       "--set", "reward_scale=2", "--set", "reward_shift=-1")
    oreo = tmp_path / "oreo"
    steps = [json.loads(x) for x in (oreo / "metrics.jsonl").read_text().splitlines() if '"loss/value"' in x]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["value/mean"] == 0.0 and steps[1]["value/mean"] != 0.0  # zero head first, then it learns
    assert (oreo / "final" / "model.safetensors").is_file() and (oreo / "value" / "model.safetensors").is_file()
    config = json.loads((oreo / "config.json").read_text())
    assert config["training"]["beta"] == 0.03 and config["training"]["kl_coef"] == 0.01  # the paper's defaults

    evaluation = tmp_path / "eval"
    ok("evaluate", "--env", "vf-arithmetic", "--env-args", ENV_ARGS, "--endpoint", tiny_server.url, "-n", "2",
       "--max-tokens", "12", "--search", "beam", "--value-model", oreo / "value", "--beam-width", "2",
       "-o", evaluation)
    metadata = json.loads((evaluation / "metadata.json").read_text())
    assert metadata["search"] == {"mode": "beam", "value_model": str(oreo / "value"), "width": 2}
    assert len((evaluation / "results.jsonl").read_text().splitlines()) == 2


def _oreo(run_dir: Path, data: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "rlvr.cli", "train", "--algo", "oreo", "--dataset", str(data), "--model",
               "tiny-random", "-o", str(run_dir), *SMALL, "--set", "max_steps=3", "--set", "value_learning_rate=1e-3",
               *extra]
    return subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, contains: str = "") -> None:
    deadline = time.time() + 1200
    while not (path.exists() and contains in path.read_text()) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert path.exists() and contains in path.read_text(), f"the run ended or timed out first: {proc.poll()}"


@pytest.fixture(scope="module")
def straight(tmp_path_factory, expert) -> Path:
    """The reference: the same OREO run, never interrupted."""
    run_dir = tmp_path_factory.mktemp("straight")
    proc = _oreo(run_dir, expert)
    assert proc.wait(timeout=1200) == 0, proc.stderr.read()[-3000:]
    return run_dir


def assert_same_run(straight: Path, resumed: Path) -> None:
    for part in ("final", "value"):
        want = load_file(str(straight / part / "model.safetensors"))
        got = load_file(str(resumed / part / "model.safetensors"))
        for name, tensor in want.items():
            torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-6, msg=f"{part}: {name}")
    logged = [json.loads(x)["step"] for x in (resumed / "metrics.jsonl").read_text().splitlines()
              if '"loss/value"' in x]
    assert logged == [1, 2, 3]  # every step once: the lines after the checkpoint were dropped and logged again


def test_oreo_resumes_exactly_after_sigkill(tmp_path, expert, straight):
    killed = _oreo(tmp_path, expert, "--set", "save_steps=1")
    wait_for(tmp_path / "checkpoint-1" / "rlvr_state.json", killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert _oreo(tmp_path, expert, "--set", "save_steps=1", "--resume").wait(timeout=1200) == 0

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["resumed_from"].endswith("checkpoint-1") or config["resumed_from"].endswith("checkpoint-2")
    assert_same_run(straight, tmp_path)


def test_oreo_stopped_by_sigterm_checkpoints_and_resumes_exactly(tmp_path, expert, straight):
    """Preemption of an offline recipe: the step under way finishes, its checkpoint is the only one (save_steps is
    1000), the exit status is 143 and the resume command is printed; --resume then ends where the reference did."""
    stopped = _oreo(tmp_path, expert)
    wait_for(tmp_path / "metrics.jsonl", stopped, contains='"loss/value"')  # step 1 done: 2 and 3 are left
    stopped.send_signal(signal.SIGTERM)
    err = stopped.communicate(timeout=600)[1]
    assert stopped.returncode == 143, err[-3000:]
    checkpoints = sorted(tmp_path.glob("checkpoint-*"))
    assert len(checkpoints) == 1 and not (tmp_path / "final").exists(), checkpoints
    step = int(checkpoints[0].name.split("-")[1])
    assert step in (1, 2)
    assert f"stopped on SIGTERM at step {step}, checkpoint-{step} written. Continue with: rlvr train --algo oreo" in err
    assert "--resume" in err and not list(tmp_path.glob(".staging-*"))
    for name in ("model.safetensors", "value/model.safetensors", "rlvr_state.json", "trainer_state.json"):
        assert (checkpoints[0] / name).is_file(), name

    resumed = _oreo(tmp_path, expert, "--resume")
    assert resumed.wait(timeout=1200) == 0, resumed.stderr.read()[-3000:]
    assert json.loads((tmp_path / "config.json").read_text())["resumed_from"].endswith(f"checkpoint-{step}")
    assert_same_run(straight, tmp_path)
