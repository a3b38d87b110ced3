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
from typing import Any

from transformers import TrainerCallback

from rlvr.io import append_jsonl, atomic_write_text
from rlvr.trainer.batching import RolloutSamples


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    mu = _mean(values)
    return math.sqrt(_mean([(v - mu) ** 2 for v in values])) if values else 0.0


def rollout_metrics(states: Sequence[dict[str, Any]], rollouts: Sequence[RolloutSamples]) -> dict[str, float]:
    """Reward, per-turn reward and advantage statistics, tool success, turns, packing (one generated batch)."""
    metrics: dict[str, float] = {}
    rewards = [float(s.get("reward") or 0.0) for s in states]
    metrics["reward"] = _mean(rewards)
    metrics["reward/std"] = _std(rewards)
    for name in sorted({k for s in states for k in (s.get("metrics") or {})}):
        metrics[f"reward/{name}"] = _mean([float((s.get("metrics") or {}).get(name, 0.0)) for s in states])

    turn_rewards: dict[int, list[float]] = {}
    turn_advantages: dict[int, list[float]] = {}
    for state in states:
        for k, step in enumerate(state["trajectory"]):
            if step.get("reward") is not None:
                turn_rewards.setdefault(k, []).append(float(step["reward"]))
            if step.get("advantage") is not None:
                turn_advantages.setdefault(k, []).append(float(step["advantage"]))
    for k, values in sorted(turn_rewards.items()):
        metrics[f"turn/{k}/reward"] = _mean(values)
    for k, values in sorted(turn_advantages.items()):
        metrics[f"turn/{k}/advantage_mean"] = _mean(values)
        metrics[f"turn/{k}/advantage_std"] = _std(values)
        metrics[f"turn/{k}/advantage_absmean"] = _mean([abs(v) for v in values])
    all_turn_rewards = [v for values in turn_rewards.values() for v in values]
    metrics["turn_reward"] = _mean(all_turn_rewards)  # mean over all assistant turns of the batch

    # Fraction of assistant turns that the environment answered with a tool result, as TurnRubric classifies
    # them (step["extras"]["tool_result"]); absent for rubrics that are not turn-aware.
    results = [float(step["extras"]["tool_result"]) for s in states for step in s["trajectory"]
               if "tool_result" in (step.get("extras") or {})]
    if results:
        metrics["tools/success_rate"] = _mean(results)
    metrics["turns_per_rollout"] = _mean([float(len(s["trajectory"])) for s in states])
    metrics["rollouts/errors"] = float(sum(s.get("error") is not None for s in states))

    forwarded = sum(len(sample) for r in rollouts for sample in r.samples)
    trajectory = sum(r.trajectory_tokens for r in rollouts)
    metrics["batch/packed_fraction"] = _mean([float(r.packed) for r in rollouts])
    metrics["batch/forwarded_over_trajectory_tokens"] = forwarded / trajectory if trajectory else 0.0
    metrics["batch/samples"] = float(sum(len(r.samples) for r in rollouts))
    metrics["tokens/generated"] = float(sum(
        len(step["tokens"]["completion_ids"]) for s in states for step in s["trajectory"] if step.get("tokens")
    ))
    return metrics


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop records logged after `max_step` (a resumed run recomputes them), atomically."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line a SIGKILL cut in half
        if int(record.get("step", 0)) <= max_step:
            kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))


class JsonlMetricsCallback(TrainerCallback):
    """Every `Trainer.log` call of the main process becomes one line of `metrics.jsonl` in the run dir."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            truncate_jsonl(self.path, state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_jsonl(self.path, {"step": state.global_step, "time": time.time(), **logs})


class RichProgressCallback(TrainerCallback):
    """A rich progress bar with the headline numbers of the last step (replaces transformers' tqdm bar)."""

    SHOWN = ("reward", "turn_reward", "loss", "batch/packed_fraction", "time/step_s")

    def __init__(self):
        self.progress = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]MT-GRPO"), BarColumn(), MofNCompleteColumn(),
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
