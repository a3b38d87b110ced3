"""Step metrics: rollout statistics (pure) and the sinks that record them (metrics.jsonl, rich progress).

wandb is fed by transformers' own WandbCallback (report_to="wandb"; offline when no key is set), from the same
`Trainer.log` call that reaches the callbacks here.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback

from rlvr.io import append_jsonl, atomic_write_text
from rlvr.rollouts import Rollout, rollout_statistics, turn_name
from rlvr.trainer.batching import RolloutSamples, Sample


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    mu = _mean(values)
    return math.sqrt(_mean([(v - mu) ** 2 for v in values])) if values else 0.0


def batch_metrics(rollouts: Sequence[Rollout], samples: Sequence[RolloutSamples]) -> dict[str, float]:
    """One generated batch: the rollout statistics (rlvr.rollouts' naming, as evaluations use), per-turn advantage
    statistics, packing and token counts."""
    metrics = {name: _mean(values) for name, values in rollout_statistics(rollouts).items()}
    metrics["reward/std"] = _std([r.outcome for r in rollouts])
    scored = [r for r in rollouts if r.advantages is not None]
    for k in range(max((len(r.turns) for r in scored), default=0)):
        values = [r.advantages[k] for r in scored if len(r.advantages) > k]
        metrics[turn_name(k, "advantage_mean")] = _mean(values)
        metrics[turn_name(k, "advantage_std")] = _std(values)
        metrics[turn_name(k, "advantage_absmean")] = _mean([abs(v) for v in values])
    forwarded = sum(len(sample) for r in samples for sample in r.samples)
    trajectory = sum(r.trajectory_tokens for r in samples)
    metrics["batch/packed_fraction"] = _mean([float(r.packed) for r in samples])
    metrics["batch/forwarded_over_trajectory_tokens"] = forwarded / trajectory if trajectory else 0.0
    metrics["batch/samples"] = float(sum(len(r.samples) for r in samples))
    metrics["tokens/generated"] = float(sum(
        len(t.tokens.completion_ids) for r in rollouts for t in r.turns if t.tokens is not None
    ))
    return metrics


class StalenessError(RuntimeError):
    """A batch holds tokens sampled more policy versions ago than async_steps allows (a scheduling bug)."""


def staleness_metrics(rollouts: Sequence[Rollout], samples: Sequence[Sample], *, version: int,
                      bound: int) -> dict[str, float]:
    """How far behind the training policy (version `version`) the weights that sampled the batch are, in policy
    versions (weight syncs), over the trained tokens of `samples`: mean and max, and the fraction of tokens from an
    older version. Per rollout: the fraction whose turns come from more than one version (they span a weight update
    and keep each turn's sampler logprobs), and the fraction of turns the server could only bound (an update started
    while the turn was generated: counted at the older version). Raises StalenessError beyond `bound`."""
    behind = [version - v for s in samples for m, v in zip(s.loss_mask, s.versions or [], strict=False)
              if m and v >= 0]
    if behind and max(behind) > bound:
        raise StalenessError(f"a token sampled {max(behind)} policy versions before version {version} reached the "
                             f"trainer, more than async_steps={bound}")
    turns = [t for r in rollouts for t in r.turns]
    tagged = [t.weight_versions for t in turns if t.weight_versions is not None]
    mixed = [len({t.weight_versions[0] for t in r.turns if t.weight_versions is not None}) > 1 for r in rollouts]
    return {
        "async/staleness_mean": _mean([float(b) for b in behind]),
        "async/staleness_max": float(max(behind, default=0)),
        "async/stale_token_fraction": _mean([float(b > 0) for b in behind]),
        "async/mixed_version_rollout_fraction": _mean([float(m) for m in mixed]),
        "async/bounded_turn_fraction": _mean([float(first != last) for first, last in tagged]),
        "async/untagged_turn_fraction": 1.0 - len(tagged) / len(turns) if turns else 0.0,
    }


def truncate_jsonl(path: Path, max_step: int, inclusive: bool = True) -> None:
    """Drop records logged after `max_step` (or at it, with inclusive=False): a resumed run logs them again."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line a SIGKILL cut in half
        step = int(record.get("step", 0))
        if step < max_step or (inclusive and step == max_step):
            kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))


class JsonlMetricsCallback(TrainerCallback):
    """Every `Trainer.log` call of the main process becomes one line of `metrics.jsonl` in the run dir. At the start
    (a resume included) it drops the lines of `metrics.jsonl` and of the per-batch logs (`rollouts.jsonl`,
    `token_credit.jsonl`) logged after the step training starts from, which the resumed run logs again."""

    def __init__(self, path: Path, batch_logs: Sequence[Path] = ()):
        self.path = Path(path)
        self.batch_logs = [Path(p) for p in batch_logs]

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            truncate_jsonl(self.path, state.global_step)
            for path in self.batch_logs:  # stamped with the step their batch was generated at
                truncate_jsonl(path, state.global_step, inclusive=False)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_jsonl(self.path, {"step": state.global_step, "time": time.time(), **logs})


class RichProgressCallback(TrainerCallback):
    """A rich progress bar with the headline numbers of the last step (replaces transformers' tqdm bar)."""

    SHOWN = ("reward", "turn_reward", "loss", "batch/packed_fraction", "time/step_s")

    def __init__(self, label: str = "train"):
        self.label = label
        self.progress = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn(), TextColumn("{task.fields[info]}"))
        self.progress.start()
        self.task = self.progress.add_task("train", total=state.max_steps, completed=state.global_step, info="")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return
        info = "  ".join(f"{k}={logs[k]:.3f}" for k in self.SHOWN if isinstance(logs.get(k), (int, float)))
        self.progress.update(self.task, completed=state.global_step, info=info)

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
