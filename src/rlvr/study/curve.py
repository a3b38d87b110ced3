"""The held-out learning curve's weights: a cell's training saves a checkpoint at each of `[evaluation] at_steps`
and keeps that step's model weights beside the cell (curve/step-N/weights/), out of reach of checkpoint rotation
(`save_total_limit`); the study evaluates them after training, on the served weights of each step in turn.

The weights are a hard link to the checkpoint's model.safetensors (no copy: checkpoints are written once and
published by a rename, so the file never changes; rotation removes the checkpoint's name, not the data), published
atomically. A cell killed between a checkpoint's publication and the link resumes from that checkpoint, so the
link is made then (`keep_left_weights`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from transformers import TrainerCallback

from rlvr.io import atomic_directory
from rlvr.study.layout import StudyLayout

WEIGHTS = "model.safetensors"  # what rlvr.serve.load_saved_weights serves


def keep_weights(checkpoint: Path, weights: Path) -> None:
    """`checkpoint`'s model weights as directory `weights` (written atomically): a hard link where the file system
    allows one, else a copy."""
    with atomic_directory(weights) as tmp:
        try:
            os.link(Path(checkpoint) / WEIGHTS, tmp / WEIGHTS)
        except OSError:  # e.g. a file system without hard links
            shutil.copyfile(Path(checkpoint) / WEIGHTS, tmp / WEIGHTS)


def missing(unit: Path, steps: Iterable[int]) -> list[int]:
    """The curve points of `unit` with neither their weights nor their evaluation."""
    points = {step: StudyLayout.curve_point(unit, step) for step in steps}
    return [step for step, point in points.items()
            if not StudyLayout.eval(point).is_dir() and not StudyLayout.curve_weights(point).is_dir()]


def keep_left_weights(unit: Path, steps: Iterable[int]) -> None:
    """Before a cell's training resumes: the points whose checkpoint was published but whose weights were not yet
    kept (a kill in between) take them from the checkpoint, which the resumed training will not write again."""
    for step in missing(unit, steps):
        checkpoint = StudyLayout.train(unit) / f"checkpoint-{step}"
        if (checkpoint / WEIGHTS).is_file():
            keep_weights(checkpoint, StudyLayout.curve_weights(StudyLayout.curve_point(unit, step)))


class KeepCurveWeights(TrainerCallback):
    """Save a checkpoint at each curve step (besides `save_steps`) and keep its weights for the curve's evaluation.

    transformers calls `on_step_end` before deciding to save (a callback may set `control.should_save`), and
    `on_save` after the checkpoint is written; rlvr's trainer publishes it and rotates older ones in between
    (rlvr.trainer.hf_overrides), so the new checkpoint is there when `on_save` runs."""

    def __init__(self, unit: Path, steps: Iterable[int]):
        self.unit = Path(unit)
        self.steps = set(steps)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        if step in self.steps and state.is_world_process_zero:
            keep_weights(Path(args.output_dir) / f"checkpoint-{step}",
                         StudyLayout.curve_weights(StudyLayout.curve_point(self.unit, step)))
        return control
