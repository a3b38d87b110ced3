"""Checkpoints that survive a crash and resume exactly: the data position saved beside transformers' own state,
checked on resume, and published by an atomic rename.

transformers writes the model (or adapter), optimizer, scheduler, RNG states and trainer state; rlvr adds
`rlvr_state.json`: which batch comes next and which settings shape the data stream. A resume with a different seed,
batch shape, `num_iterations` or dataset would silently train on other data, so it is refused.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from rlvr.io import atomic_write_json

RLVR_STATE = "rlvr_state.json"
# What must match between a checkpoint and the run that resumes it: they decide which rows form batch b.
DATA_STREAM = ("seed", "batch_size", "rollouts_per_example", "num_iterations", "dataset_size", "dataset_fingerprint")


class ResumeError(ValueError):
    """A checkpoint that cannot be resumed by this run, with what differs."""


@dataclass(frozen=True)
class RunState:
    global_step: int
    next_batch_index: int
    next_example_ids: list[int]
    seed: int
    batch_size: int
    rollouts_per_example: int
    num_iterations: int
    dataset_size: int
    dataset_fingerprint: str
    config: dict[str, Any]


def write_run_state(checkpoint_dir: Path, state: RunState) -> None:
    atomic_write_json(Path(checkpoint_dir) / RLVR_STATE, asdict(state))


def read_run_state(checkpoint_dir: Path) -> RunState:
    path = Path(checkpoint_dir) / RLVR_STATE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise ResumeError(f"{checkpoint_dir} has no {RLVR_STATE}: it was not written by rlvr's trainer") from e
    except json.JSONDecodeError as e:
        raise ResumeError(f"{path} is not valid JSON ({e}); resume from an earlier checkpoint") from e
    missing = [f.name for f in fields(RunState) if f.name not in data]
    if missing:
        raise ResumeError(f"{path} lacks {missing}: it was written by an older rlvr; start a new run directory")
    return RunState(**{f.name: data[f.name] for f in fields(RunState)})


def check_resume(saved: RunState, current: RunState) -> None:
    """Refuse a resume whose data stream would differ from the checkpoint's."""
    diffs = [f"{k}: checkpoint {getattr(saved, k)!r}, this run {getattr(current, k)!r}"
             for k in DATA_STREAM if getattr(saved, k) != getattr(current, k)]
    if diffs:
        raise ResumeError(
            "cannot resume: the checkpoint was made with a different data stream (" + "; ".join(diffs) + "). "
            "Resume with the checkpoint's settings, or start a new run directory."
        )


def publish(staged: Path, final: Path) -> None:
    """Move a fully written directory into place and make the rename durable; an older `final` is replaced."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(staged, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
