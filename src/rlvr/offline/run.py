"""`train_offline`: the one call behind `rlvr train --algo sft|oreo --dataset DIR`: read the trajectories, train,
write the run directory.

Run directory:
    config.json      the resolved configuration, model and dataset
    metrics.jsonl    one line per optimizer step
    checkpoint-N/    policy, optimizer, scheduler, RNG, trainer state, rlvr_state.json (+ OREO's value model and
                     its optimizer); written atomically, `--resume` continues from the newest
    final/           the trained policy (servable by `rlvr serve`); under use_lora its adapter (served merged)
    value/           OREO: the value model, for `rlvr evaluate --search beam --value-model DIR/value`
    wandb/           with `report_to = "wandb"`

SIGTERM / SIGINT stop at the next optimizer step with a checkpoint and raise `Preempted` (status 143 / 130), as
on-policy training does (rlvr.trainer.faults).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from rlvr.io import atomic_write_json
from rlvr.trainer.checkpoint import check_resume, read_run_state
from rlvr.trainer.faults import resume_command, train_preemptibly
from rlvr.trainer.recipes import trainer_class
from rlvr.trajectories import load_trajectories


def train_offline(model: str, config, dataset: str | Path, *, resume: bool | str = False,
                  callbacks: Sequence[TrainerCallback] = ()):
    """Train `model` on the trajectories at `dataset` with the offline recipe of `config`; returns the trainer.
    callbacks: transformers callbacks added to the trainer (e.g. a study's extra checkpoints, rlvr.study.curve)."""
    run_dir = Path(config.output_dir)
    trajectories = load_trajectories(dataset, config.segmentation)
    if resume is True:  # the newest checkpoint, if the run directory has one yet
        checkpoint = get_last_checkpoint(str(run_dir)) if run_dir.is_dir() else None
    else:
        checkpoint = resume or None
    trainer = trainer_class(config)(model, trajectories, config)
    for callback in callbacks:
        trainer.add_callback(callback)
    atomic_write_json(run_dir / "config.json", {
        "model": model, "dataset": str(dataset), "trajectories": len(trajectories),
        "trained_sequences": trainer.dataset_size, "left_out_too_long": trainer.too_long,
        "resumed_from": checkpoint, "training": config.to_dict(),
    })
    if checkpoint:
        check_resume(read_run_state(Path(checkpoint)), trainer.run_state())
    # every optimizer step is a resumable boundary
    _, preemption = train_preemptibly(trainer, run_dir, checkpoint, num_iterations=1)
    if preemption.stopped_at is not None:
        raise preemption.preempted(resume_command(run_dir))
    trainer.save_outputs(run_dir)
    return trainer
