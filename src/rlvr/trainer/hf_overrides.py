"""Every override of a private transformers `Trainer` method lives here, in one mixin, so that an upgrade of
transformers has one file to check. The recipes override only public hooks.

- `_get_output_dir` / `_save_checkpoint`: checkpoints are written into a staging directory and renamed into place
  (a run killed mid-save keeps the previous checkpoint; `get_last_checkpoint` never sees a half-written one), with
  rlvr's data position (`rlvr_state.json`) inside; a full disk stops the run with `CheckpointWriteError`.
- `log`: the recipe's buffered step metrics are averaged into transformers' log record (RLTrainer.log without its
  console dump), with seconds per step.
- `_load_from_checkpoint`: after transformers restores the model, the recipe's `load_extra_state` restores what
  it saved with `save_extra_state` (e.g. PPO's critic and its optimizer).
- `_get_grad_norm` (called once per optimizer step, after clipping and before `optimizer.step()`): the recipe's
  `skip_nonfinite_update` may drop the gradients of a step whose loss or gradient norm is not finite.
- `_inner_training_loop`: the recipe's `close()` runs however training ends.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from transformers import Trainer
from transformers.trainer_utils import rotate_checkpoints

from rlvr.trainer.checkpoint import RunState, disk_full_stops, publish, write_run_state


class TransformersOverrides:
    """Mixed into a transformers Trainer subclass that defines `run_state() -> RunState` and `close()`, and may
    define `save_extra_state(checkpoint_dir)` / `load_extra_state(checkpoint_dir)` for state beyond the policy."""

    _staging_dir: str | None = None
    _last_log_time: float = 0.0

    def run_state(self) -> RunState:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def save_extra_state(self, checkpoint_dir: Path) -> None:
        """Write recipe state that transformers does not save (called on every process, before publishing)."""

    def load_extra_state(self, checkpoint_dir: Path) -> None:
        """Read back what `save_extra_state` wrote (called on every process when a run resumes)."""

    def skip_nonfinite_update(self, model, grad_norm) -> None:
        """Inspect the step's gradients before the optimizer step (and drop them to skip it)."""

    def _get_grad_norm(self, model, grad_norm=None):
        grad_norm = super()._get_grad_norm(model, grad_norm)
        self.skip_nonfinite_update(model, grad_norm)
        return grad_norm

    def _get_output_dir(self, trial) -> str:
        return self._staging_dir or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(super()._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        staging = run_dir / f".staging-{name}"
        if self.accelerator.is_main_process and staging.exists():
            shutil.rmtree(staging)  # left by a run killed while saving
        self.accelerator.wait_for_everyone()
        self._staging_dir = str(staging)
        try:
            with disk_full_stops(run_dir, staging, name):
                super()._save_checkpoint(model, trial)
                self.save_extra_state(staging / name)
        finally:
            self._staging_dir = None
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            with disk_full_stops(run_dir, staging, name):
                write_run_state(staging / name, self.run_state())
                publish(staging / name, run_dir / name)
            shutil.rmtree(staging, ignore_errors=True)
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)
        self.accelerator.wait_for_everyone()

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.load_extra_state(Path(resume_from_checkpoint))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        metrics = {k: sum(v) / len(v) for k, v in self._metrics["train"].items()}
        self._metrics["train"].clear()
        now = time.perf_counter()
        if "loss" in logs:  # a training-step log (not the end-of-training summary)
            metrics["time/step_s"] = (now - self._last_log_time) / max(self.args.logging_steps, 1)
            self._last_log_time = now
        Trainer.log(self, {**logs, **metrics}, start_time)

    def _inner_training_loop(self, *args, **kwargs):
        try:
            return super()._inner_training_loop(*args, **kwargs)
        finally:
            self.close()
