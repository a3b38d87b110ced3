"""What the offline recipes (SFT / rejection sampling, OREO) share: their options, the token dataset they train on,
checkpoints that resume exactly (rlvr.trainer.hf_overrides, rlvr.trainer.checkpoint), metrics and final weights.

Offline recipes are transformers Trainers over a fixed token dataset: transformers shuffles it with `seed`, skips
the batches already trained when a run resumes (its RNG states are in the checkpoint), and rlvr's `RunState`
refuses a resume whose data would differ (seed, batch size, the trajectories' fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rlvr.trainer.checkpoint import RunState, publish
from rlvr.trainer.config import ConfigError
from rlvr.trainer.hf_overrides import TransformersOverrides
from rlvr.trainer.metrics import JsonlMetricsCallback, RichProgressCallback
from rlvr.trajectories import Trajectory


@dataclass
class OfflineOptions:
    """Options of every offline recipe (mixed into its transformers / TRL configuration class)."""

    offline: ClassVar[bool] = True  # trains from a trajectory dataset (`rlvr train --dataset DIR`), no server
    batch_size: int = field(default=128, metadata={"help": "Trajectories per optimizer step (released scripts: "
                                                            "--train_batch_size 128)."})
    micro_batch_size: int = field(default=4, metadata={"help": "Trajectories per forward pass; batch_size must be "
                                                                "a multiple of it."})
    max_length: int = field(default=2048, metadata={"help": "Longer trajectories (tokens) are left out and counted."})
    segmentation: str | None = field(
        default=None, metadata={"help": "How to segment records that carry no 'steps': 'turn' or 'line'."})
    progress: bool = field(default=True, metadata={"help": "Show a rich progress display."})

    def offline_setup(self) -> None:
        """Checks with clear errors, then the transformers fields the options decide."""
        if self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size:
            raise ConfigError(f"batch_size={self.batch_size} must be a positive multiple of micro_batch_size="
                              f"{self.micro_batch_size}")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("offline recipes train in one process (the value model is not distributed); "
                              "run without --num-processes")
        if self.segmentation not in (None, "turn", "line"):
            raise ConfigError(f"segmentation={self.segmentation!r}: use 'turn' or 'line'")
        self.per_device_train_batch_size = self.micro_batch_size
        self.gradient_accumulation_steps = self.batch_size // self.micro_batch_size
        self.remove_unused_columns = False  # the collators read our columns


def fingerprint(trajectories: list[Trajectory]) -> str:
    digest = hashlib.sha256()
    for t in trajectories:
        digest.update(json.dumps(t.to_record(), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


class OfflineRecipe(TransformersOverrides):
    """Mixed into a transformers Trainer: run state for checkpoints, metrics sinks, atomic final weights."""

    label = "offline"

    def setup_offline(self, args, trajectories: list[Trajectory], dataset_size: int) -> None:
        run_dir = Path(args.output_dir)
        self.run_dir = run_dir
        self.dataset_size = dataset_size
        self.dataset_fingerprint = fingerprint(trajectories)
        self._last_log_time = time.perf_counter()
        self.add_callback(JsonlMetricsCallback(run_dir / "metrics.jsonl"))
        if args.progress:
            from transformers.trainer_callback import ProgressCallback

            self.remove_callback(ProgressCallback)
            self.add_callback(RichProgressCallback(self.label))

    def run_state(self) -> RunState:
        args = self.args
        return RunState(
            global_step=self.state.global_step, next_batch_index=self.state.global_step, next_example_ids=[],
            seed=args.seed, batch_size=args.batch_size, rollouts_per_example=1, num_iterations=1,
            dataset_size=self.dataset_size, dataset_fingerprint=self.dataset_fingerprint, config=args.to_dict(),
        )

    def close(self) -> None:
        """Nothing to release: no rollout server."""

    def save_final(self, model, path: Path) -> None:
        """`model` (and the tokenizer) saved to `path` through a staging directory and an atomic rename."""
        path = Path(path)
        staging = path.with_name(f".staging-{path.name}")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        self.processing_class.save_pretrained(staging)
        publish(staging, path)
