"""Faults while a checkpoint is written, on real processes with real signals and a real full disk (no model server):
rlvr's checkpoint writing (`TransformersOverrides`) and `Preemption` in a transformers Trainer on tiny-random
(checkpoint_script.py), the run directory on a tmpfs whose size the test sets (mounting needs root, as the sandbox
does). One run, continued once:

1. the disk is shrunk while checkpoint-2 is written: checkpoint-3 fills it; the run stops with one line naming
   checkpoint-2 as intact and what to do; the partial copy is removed. (A full disk surfaces from torch.save as a
   RuntimeError, from other writes as ENOSPC: both are recognised.)
2. --resume with room again: training continues from checkpoint-2 (step 3 trains the batch the first run trained at
   step 3). SIGTERM while checkpoint-4 is written: the write finishes, the next step trains, and its checkpoint is
   written for the stop; a second SIGTERM during that write kills the process at once: half of checkpoint-5 is left
   in its staging directory, never a checkpoint: the newest one, what --resume takes, is checkpoint-4. (The clean
   stop after one SIGTERM, exit 143 and the resume command, is tested on the real trainer in
   test_fault_injection.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers.trainer_utils import get_last_checkpoint

from rlvr.trainer.checkpoint import CheckpointWriteError, disk_full_stops, newest_checkpoint, publish

SCRIPT = Path(__file__).resolve().parent / "checkpoint_script.py"
COMPLETE = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json",
            "rlvr_state.json")  # fmt: skip
MB = 1024 * 1024


def start(run: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, str(SCRIPT), "--run-dir", str(run), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exited with {proc.returncode}: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        time.sleep(0.05)


def finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    try:
        return proc.communicate(timeout=timeout)[1]
    finally:
        if proc.poll() is None:
            proc.kill()


def steps(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]


def checkpoints(run: Path) -> list[str]:
    return sorted((p.name for p in run.glob("checkpoint-*")), key=lambda n: int(n.split("-")[1]))


def assert_complete(checkpoint: Path) -> None:
    for name in COMPLETE:
        assert (checkpoint / name).is_file(), f"{checkpoint.name} lacks {name}"


def resize(mount: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


@pytest.fixture
def disk(tmp_path):
    """A tmpfs of its own for the run directory, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    assert os.geteuid() == 0, "this test mounts a tmpfs (a disk it can fill): run it as root"
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow  # three short training processes
def test_signals_and_a_full_disk_mid_checkpoint_never_leave_a_half_written_checkpoint(disk):
    run = disk / "run"

    # 1. the disk shrinks to 40 MB more than it holds while checkpoint-2 is being written (it fits: its files are
    # written already); writing checkpoint-3 (~90 MB) fills it: one line naming checkpoint-2, the partial copy removed
    proc = start(run, "--steps", "8", "--stall-at", "2:go")
    wait_for(run / "writing-2", proc)
    assert checkpoints(run) == ["checkpoint-1"]  # checkpoint-2 is in its staging directory, not visible yet
    resize(disk, shutil.disk_usage(disk).used + 40 * MB)
    (run / "go-2").touch()
    err = finish(proc)
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"rlvr: the disk is full: checkpoint-3 could not be written in {run} (No space left on "
                           "device: "), last
    assert last.endswith("; checkpoint-2, the newest complete checkpoint, is intact. Free space there, then continue "
                         "the run with --resume"), last
    assert "Traceback" not in err
    assert checkpoints(run) == ["checkpoint-1", "checkpoint-2"] and not list(run.glob(".staging-*"))
    assert_complete(run / "checkpoint-2")

    # 2. room again: --resume continues from checkpoint-2 (step 3 trains the batch the full-disk run trained). A
    # SIGTERM while checkpoint-4 is written: the write finishes, step 5 trains, its checkpoint is written; a second
    # SIGTERM during that write kills the process at once: half of checkpoint-5 is left in its staging directory,
    # which is never a checkpoint: the newest one, what --resume takes, is checkpoint-4
    resize(disk, shutil.disk_usage(disk).used + 500 * MB)
    proc = start(run, "--steps", "8", "--resume", "--stall-at", "4:signal", "--stall-at", "5:killed")
    wait_for(run / "writing-4", proc)
    proc.send_signal(signal.SIGTERM)
    wait_for(run / "writing-5", proc)
    assert checkpoints(run)[-1] == "checkpoint-4"
    proc.send_signal(signal.SIGTERM)
    err = finish(proc)
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    assert "SIGTERM received: stopping after this step with a checkpoint" in err
    assert list(run.glob(".staging-checkpoint-5/checkpoint-5/model.safetensors"))  # half of it, in staging
    assert checkpoints(run)[-1] == "checkpoint-4"
    assert newest_checkpoint(run) == run / "checkpoint-4" == Path(get_last_checkpoint(str(run)))
    for name in checkpoints(run):
        assert_complete(run / name)

    logged = steps(run)
    assert [s["step"] for s in logged] == [1, 2, 3, 3, 4, 5]  # run 1 (disk full writing 3); run 2 (from 2)
    assert logged[2]["first_rows"] == logged[3]["first_rows"]  # step 3 trained the same rows again
    firsts = [s["first_rows"][0] for s in logged if s is not logged[3]]
    assert len(set(firsts)) == 5  # five different batches of the first epoch: nothing trained twice or skipped back


# --- the pieces, on real directories ----------------------------------------------------------------------------


def test_newest_checkpoint_is_the_highest_published_step(tmp_path):
    assert newest_checkpoint(tmp_path) is None
    for name in ("checkpoint-9", "checkpoint-10", ".staging-checkpoint-11", "checkpoint-x", "checkpoint-12.txt"):
        (tmp_path / name).mkdir()
    assert newest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # 10 > 9 as numbers; staging is not one


def test_publish_over_an_existing_checkpoint_replaces_it_whole(tmp_path):
    final, staged = tmp_path / "checkpoint-3", tmp_path / ".staging-checkpoint-3"
    final.mkdir()
    (final / "old.bin").write_text("old")
    staged.mkdir()
    (staged / "new.bin").write_text("new")
    publish(staged, final)
    assert [p.name for p in final.iterdir()] == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3"]  # the old one, set aside, is gone


def test_a_full_disk_removes_the_partial_copy_and_names_the_intact_checkpoint(tmp_path):
    (tmp_path / "checkpoint-2").mkdir()
    staging = tmp_path / ".staging-checkpoint-3"
    (staging / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(CheckpointWriteError) as raised, disk_full_stops(tmp_path, staging, "checkpoint-3"):
        raise OSError(28, "No space left on device", str(staging / "checkpoint-3" / "optimizer.pt"))
    assert str(raised.value) == (
        f"the disk is full: checkpoint-3 could not be written in {tmp_path} (No space left on device: "
        f"{staging}/checkpoint-3/optimizer.pt); checkpoint-2, the newest complete checkpoint, is intact. Free space "
        "there, then continue the run with --resume")
    assert not staging.exists()


def test_other_write_errors_pass_through_untouched(tmp_path):
    staging = tmp_path / ".staging-checkpoint-1"
    staging.mkdir()
    with pytest.raises(PermissionError), disk_full_stops(tmp_path, staging, "checkpoint-1"):
        raise PermissionError(13, "Permission denied")
    with pytest.raises(RuntimeError, match="unexpected pos"), disk_full_stops(tmp_path, staging, "checkpoint-1"):
        raise RuntimeError("unexpected pos 5120 vs 5012")  # torch.save's short write, but the disk has room
    assert staging.exists()  # left for the next save of this step to clear
