"""What the report and the committed records need of each finished unit of a study (a cell or a base evaluation),
read from its directory: held-out summaries, per-example means, training curves, wall times and provenance.

Below both `report` (which aggregates these) and `records` (which commits them), so neither imports the other's
readers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.analysis import read_jsonl
from rlvr.evaluation import Stat, read_summary
from rlvr.rollouts import is_rollout_statistic
from rlvr.study.layout import StudyLayout
from rlvr.study.stats import example_groups, example_means

# What a unit's record says of where it came from (written into done.json by the runner, kept in its record).
PROVENANCE = ("commit", "code_modified", "machine", "command", "model_sha256", "peak_rss_mb", "finished")

# The per-example means of one evaluation: headline metric -> held-out example id -> mean over its rollouts.
ExampleMeans = dict[str, dict[str, float]]
# Of one evaluation: held-out example id -> its value of the [report] split_by field (stats.example_groups).
ExampleGroups = dict[str, str]
MAIN = ""  # the key of a unit's main evaluation (eval/) beside its [evaluation.sets] names


@dataclass(frozen=True)
class CellRecord:
    """What the report needs of one finished cell."""

    algo: str
    seed: int
    after: dict[str, Stat]  # held-out evaluation of the final weights
    curves: dict[str, dict[int, float]]  # rollout statistic -> step -> mean over the step's training batch
    steps: int  # optimizer steps logged
    reward_std: dict[int, float]  # step -> std of the outcome reward within the step's batch (on-policy recipes)
    tokens_generated: float  # completion tokens generated in training
    wall_s: dict[str, float]
    resumed_from: str | None
    replicate: int = 0  # 0: the cell; K >= 1: its K-th same-seed re-run
    sets: dict[str, dict[str, Stat]] = field(default_factory=dict)  # [evaluation.sets] name -> its evaluation
    examples: dict[str, ExampleMeans] = field(default_factory=dict)  # evaluation (MAIN or a set) -> per example
    provenance: dict[str, Any] = field(default_factory=dict)  # commit, machine, peak memory, ... (units.PROVENANCE)
    # [evaluation] at_steps: step -> held-out evaluation (main set) of the weights after that step
    heldout_curve: dict[int, dict[str, Stat]] = field(default_factory=dict)
    groups: dict[str, ExampleGroups] = field(default_factory=dict)  # evaluation -> [report] split_by per example
    # how each step's training batch was made and what it cost: the trainer's batch/* and timing/* scalars (e.g.
    # batch/generation_rounds, batch/dropped_groups, batch/skipped_zero_advantage_fraction, timing/training_s)
    batch_curves: dict[str, dict[int, float]] = field(default_factory=dict)


def is_batch_statistic(name: str) -> bool:
    return name.startswith(("batch/", "timing/"))


@dataclass(frozen=True)
class BaseRecord:
    """What the report needs of one base evaluation (the starting model, once per seed)."""

    seed: int
    after: dict[str, Stat]
    sets: dict[str, dict[str, Stat]]
    examples: dict[str, ExampleMeans]
    wall_s: dict[str, float]
    provenance: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, ExampleGroups] = field(default_factory=dict)  # evaluation -> [report] split_by per example


def provenance_of(done: dict[str, Any]) -> dict[str, Any]:
    return {k: done[k] for k in PROVENANCE if k in done}


def read_sets(layout: StudyLayout, unit: Path, names) -> dict[str, dict[str, Stat]]:
    """The unit's evaluations on the [evaluation.sets] held-out sets that it has."""
    return {n: read_summary(layout.eval_set(unit, n)) for n in names if layout.eval_set(unit, n).is_dir()}


def read_examples(layout: StudyLayout, unit: Path, sets, metrics,
                  split_by: str | None = None) -> tuple[dict[str, ExampleMeans], dict[str, ExampleGroups]]:
    """The unit's evaluations (MAIN and the sets it has) as per-example means of `metrics`, and each example's
    value of the field `split_by` (where its rows have it), from their results.jsonl (an evaluation without its
    rollouts, e.g. an exported study, has none)."""
    dirs = {MAIN: layout.eval(unit), **{n: layout.eval_set(unit, n) for n in sets}}
    found, groups = {}, {}
    for name, directory in dirs.items():
        if (directory / "results.jsonl").is_file():
            rows = read_jsonl(directory / "results.jsonl")
            found[name] = {m: means for m in metrics if (means := example_means(rows, m))}
            if split_by and (values := example_groups(rows, split_by)):
                groups[name] = values
    return found, groups


def read_heldout_curve(layout: StudyLayout, unit: Path) -> dict[int, dict[str, Stat]]:
    """The unit's evaluated held-out curve points (curve/step-N/eval), by step."""
    points = (p for p in layout.curve(unit).glob("step-*") if layout.eval(p).is_dir())
    return {int(p.name.removeprefix("step-")): read_summary(layout.eval(p))
            for p in sorted(points, key=lambda p: int(p.name.removeprefix("step-")))}


def read_cell(layout: StudyLayout, algo: str, seed: int, replicate: int = 0, sets=(), metrics=(),
              split_by: str | None = None) -> CellRecord:
    unit = layout.cell(algo, seed, replicate)
    examples, groups = read_examples(layout, unit, sets, metrics, split_by)
    done = json.loads(layout.done(unit).read_text())
    steps = [r for r in read_jsonl(layout.train(unit) / "metrics.jsonl") if "loss" in r]
    curves: dict[str, dict[int, float]] = {}
    batch_curves: dict[str, dict[int, float]] = {}
    for record in steps:
        for key, value in record.items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if is_rollout_statistic(key):
                curves.setdefault(key, {})[int(record["step"])] = float(value)
            elif is_batch_statistic(key):
                batch_curves.setdefault(key, {})[int(record["step"])] = float(value)
    return CellRecord(
        algo=algo, seed=seed, after=read_summary(layout.eval(unit)), curves=curves, steps=len(steps),
        reward_std={int(r["step"]): float(r["reward/std"]) for r in steps if "reward/std" in r},
        tokens_generated=sum(float(r.get("tokens/generated", 0.0)) for r in steps),
        wall_s=done["wall_s"], resumed_from=done.get("resumed_from"), replicate=replicate,
        sets=read_sets(layout, unit, sets), examples=examples, provenance=provenance_of(done),
        heldout_curve=read_heldout_curve(layout, unit), groups=groups, batch_curves=batch_curves,
    )


def read_base(layout: StudyLayout, seed: int, sets=(), metrics=(), split_by: str | None = None) -> BaseRecord:
    unit = layout.base(seed)
    done = json.loads(layout.done(unit).read_text())
    examples, groups = read_examples(layout, unit, sets, metrics, split_by)
    return BaseRecord(seed=seed, after=read_summary(layout.eval(unit)), sets=read_sets(layout, unit, sets),
                      examples=examples, wall_s=done["wall_s"], provenance=provenance_of(done), groups=groups)
