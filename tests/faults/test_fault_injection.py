"""Faults injected into real training runs (tiny-random, the choice environment, real `rlvr serve`, real signals):
one process: a kill -9 of the server that the run started, a kill of it mid-weight-sync, then a SIGTERM while a
step trains, then --resume; `rlvr train --num-processes 2` (torchrun, DDP over gloo): a kill -9 of the launcher's
server, then a SIGTERM that reaches one rank only."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.serve.launch import OWNER_ENV, descendants, servers_started_by

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from choice_env import load_environment  # noqa: E402
from train_script import config  # noqa: E402

from rlvr.trainer import run_training  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "fault_script.py"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json", "rlvr_state.json")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Training:
    """A training subprocess whose stderr goes to a file (two ranks and torchrun write more than a pipe holds)."""

    def __init__(self, command: list[str], cwd: Path, stderr: Path, **env: str):
        cwd.mkdir(parents=True, exist_ok=True)
        environment = {**os.environ, **OFFLINE, **env}
        environment.pop("WANDB_DIR", None)
        self.stderr = stderr
        with stderr.open("w") as err:
            self.proc = subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.DEVNULL, stderr=err)

    def err(self) -> str:
        return self.stderr.read_text()

    def wait_for_batch(self, run: Path, index: int, timeout: float = 600) -> None:
        deadline = time.time() + timeout
        while not any(r["batch_index"] == index for r in read_jsonl(run / "rollouts.jsonl")):
            assert self.proc.poll() is None, f"training exited with {self.proc.returncode}: {self.err()[-3000:]}"
            assert time.time() < deadline, f"no batch {index} within {timeout} s"
            time.sleep(0.2)

    def finish(self, timeout: float = 600) -> str:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return self.err()


def launched_ranks(launcher: int) -> dict[int, int]:
    """rank -> pid of the training processes that torchrun (process `launcher`) started: its descendants with RANK, less the servers (which inherit it from the main rank)."""
    ranks = {}
    for pid, environ in descendants(launcher).items():
        rank = [value for value in environ if value.startswith(b"RANK=")]
        if rank and not any(value.startswith(f"{OWNER_ENV}=".encode()) for value in environ):
            ranks[int(rank[0].removeprefix(b"RANK="))] = pid
    return ranks


def kill_server(owner: int) -> None:
    """SIGKILL the process group (API server and engine core) of the server that process `owner` started, as the
    OOM killer would."""
    pids = servers_started_by(owner)
    assert pids, "the run's server is not running"
    os.killpg(os.getpgid(pids[0]), signal.SIGKILL)


def died(restart: int) -> str:
    return f"died (exit code -9, killed by SIGKILL): restarting it (restart {restart} of 2; its log: "


def check_stopped_run(run: Path, err: str, processes: int = 1) -> int:
    """One complete checkpoint (the preemption's: save_steps is 1000; one RNG state per process), no partial one,
    every batch generated and trained once; returns its step."""
    checkpoints = sorted(run.glob("checkpoint-*"))
    assert len(checkpoints) == 1, checkpoints
    stopped = int(checkpoints[0].name.split("-")[1])
    rng_states = ["rng_state.pth"] if processes == 1 else [f"rng_state_{rank}.pth" for rank in range(processes)]
    for name in (*CHECKPOINT_FILES, *rng_states):
        assert (checkpoints[0] / name).is_file(), name
    assert not list(run.glob(".staging-*"))
    assert "--resume" in err and not (run / "final").exists()
    # a batch whose generation or sync the kill interrupted was generated again after the restart, and only then
    assert [b["batch_index"] for b in read_jsonl(run / "rollouts.jsonl")] == list(range(stopped))
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r] == list(range(1, stopped + 1))
    return stopped


def test_a_server_killed_mid_generation_then_mid_sync_is_restarted_then_sigterm_checkpoints_and_resume_goes_on(
        training_server, tmp_path):
    """One run, three faults (one run costs less than three): kill -9 of the server the run started after batch 1,
    a kill of the restarted one while the weights of step 5 are pushed (both restarts of the run's budget), then
    SIGTERM."""
    run, cwd = tmp_path / "run", tmp_path / "cwd"
    training = Training([sys.executable, str(SCRIPT), "--run-dir", str(run), "--report-to", "wandb",
                         "--kill-server-in-sync-at-step", "5"], cwd, tmp_path / "stderr.txt")  # no --server
    proc = training.proc
    training.wait_for_batch(run, 1)  # step 2 trains, then batch 2 is generated
    kill_server(proc.pid)
    training.wait_for_batch(run, 6)  # batch 5 came from the server restarted after the sync's kill
    proc.send_signal(signal.SIGTERM)  # while step 7 trains
    err = training.finish()
    assert proc.returncode == 143, err[-3000:]
    assert died(1) in err, err[-3000:]
    assert "fault_script: the weight sync at step 5 failed" in err, err[-3000:]
    assert died(2) in err, err[-3000:]
    assert err.count("the rollout server is back at http://127.0.0.1:") == 2

    stopped = check_stopped_run(run, err)
    assert stopped >= 7  # the step in progress finished (later ones too if the signal came after it ended)
    assert f"stopped on SIGTERM at step {stopped}, checkpoint-{stopped} written. Continue with:" in err
    assert not servers_started_by(proc.pid)  # the restarted server was stopped with the run
    # files in their place: wandb wrote under the run directory, nothing in the working directory
    assert list((run / "wandb").glob("offline-run-*")), list(run.iterdir())
    assert list(cwd.iterdir()) == []

    saved = json.loads((run / f"checkpoint-{stopped}" / "rlvr_state.json").read_text())
    assert saved["global_step"] == stopped and saved["next_batch_index"] == stopped
    # the session's shared training server (make test starts it anyway): the resumed run pushes its weights first
    run_training(load_environment(), "tiny-random", config(str(run), stopped + 1, micro_batch_size=4),
                 server_url=training_server.url, resume=True)
    batches = read_jsonl(run / "rollouts.jsonl")
    resumed = batches[-1]
    assert resumed["batch_index"] == stopped and resumed["step"] == stopped
    assert sorted(set(resumed["example_ids"])) == sorted(set(saved["next_example_ids"]))
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    assert steps == list(range(1, stopped + 2))
    assert (run / "final" / "model.safetensors").is_file()


LAUNCHED_CONFIG = """\
env = "vf-triviaqa-search"
model = "tiny-random"
algo = "grpo_mr"

[env_args]
protocol = "search"
num_train_examples = 8
num_eval_examples = 2
max_turns = 2

[training]
max_steps = 20
save_steps = 1000
batch_size = 8
rollouts_per_example = 4
micro_batch_size = 4
max_tokens_per_turn = 4
max_seq_len = 512
use_lora = false
logging_steps = 1
report_to = "none"
progress = false
"""


def test_rlvr_train_num_processes_restarts_its_killed_server_and_both_ranks_stop_together_on_one_sigterm(tmp_path):
    """`rlvr train --num-processes 2` starts the server in its launcher, outside the ranks (torchrun, DDP over gloo):
    to them it is a `--server`, waited for. A kill -9 of it: the launcher restarts it on its port (LauncherServer),
    the main rank finds it back, pushes the weights alone while rank 1 waits in the batch's broadcast, and generates
    the batch again. Then SIGTERM to rank 1 only: the ranks agree on the step, both stop there with one checkpoint
    holding both ranks' RNG states and exit 143, and the launcher stops its server.

    One run for what were two (a server restarted under two ranks, a SIGTERM to one rank): the restart of a server
    that the training process started itself is test 1's, and a resume after such a two-rank stop is the chained
    two-machine test's (tests/multinode/test_two_machines.py)."""
    (tmp_path / "tiny.toml").write_text(LAUNCHED_CONFIG)
    run = tmp_path / "run"
    training = Training([sys.executable, "-m", "rlvr.cli", "train", "--config", str(tmp_path / "tiny.toml"),
                         "--num-processes", "2", "--run-dir", str(run)], tmp_path / "cwd", tmp_path / "stderr.txt",
                        OMP_NUM_THREADS="1")  # two ranks on two cores
    training.wait_for_batch(run, 1)
    ranks = launched_ranks(training.proc.pid)
    assert sorted(ranks) == [0, 1], ranks
    kill_server(training.proc.pid)
    training.wait_for_batch(run, 3)  # generated by the restarted server
    os.kill(ranks[1], signal.SIGTERM)  # the non-main rank only
    err = training.finish(timeout=900)
    assert training.proc.returncode != 0, err[-3000:]  # the launcher reports torchrun's status
    assert died(1) in err and err.count("the rollout server is back at http://127.0.0.1:") == 1, err[-3000:]
    assert "answers again: the current weights are pushed" in err, err[-3000:]  # the main rank waited for it
    assert err.count("rlvr: SIGTERM received") == 1, err[-3000:]

    stopped = check_stopped_run(run, err, processes=2)
    assert stopped >= 4
    # both ranks stopped at the same step, each with status 143 (torchrun's summary names the first to exit)
    assert err.count(f"stopped on SIGTERM at step {stopped}, checkpoint-{stopped} written. Continue with:") == 2
    assert re.search(r"exitcode\s*:\s*143", err), err[-3000:]
    assert not servers_started_by(training.proc.pid)  # the restarted server stopped with the launcher
