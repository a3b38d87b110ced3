"""`rlvr analyze DIR`: tables and plots from what rlvr wrote (training runs, evaluations, benchmark grids).

It recognises, anywhere under DIR:
- training runs: ``metrics.jsonl`` (one record per step) -> reward curves;
- evaluations: ``results.jsonl`` + ``metadata.json`` (vf-eval's layout, ours or vf-eval's own) -> a table and
  per-turn reward bars;
- benchmarks: ``grid.jsonl`` -> the model x retriever (or environment) grid as a table and a heatmap.
Evaluations of the same weights before and after training (sibling folders named ``...before...`` and
``...after...``, as `rlvr demo` writes them) are compared: a fall of the held-out outcome leads the report.
A study directory (``study.json``, written by `rlvr study`) gets the study's own report instead: `rlvr analyze`
hands it to rlvr.study.report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers
import matplotlib.pyplot as plt  # noqa: E402

from rlvr.evaluation import TURN_REWARDS, Stat, mean_stderr  # noqa: E402
from rlvr.io import atomic_write_text  # noqa: E402
from rlvr.rollouts import is_rollout_statistic  # noqa: E402


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not valid JSON ({err}); was the file cut off mid-write?") from err
    return rows


@dataclass
class Report:
    sections: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # lead the report
    plots: list[Path] = field(default_factory=list)


def _fmt(mean: float, stderr: float) -> str:
    return "n/a" if math.isnan(mean) else f"{mean:.3f} ± {stderr:.3f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# The task's outcome (exact match, where the environment scores it) and the rollout's outcome reward. A run can raise
# its turn reward while lowering these, e.g. by learning to search where it must answer (issue 44): any fall is
# reported first, whatever else rose.
OUTCOME_METRICS = {"exact_match": "exact match (the task's outcome)", "reward": "outcome reward"}


def outcome_fell(before: Mapping[str, Stat], after: Mapping[str, Stat], what: str = "") -> list[str]:
    """One plain warning per outcome metric whose held-out mean is lower after training than before (any fall: a
    small one is said with its size in standard errors of the difference, not hidden)."""
    warnings = []
    for name, label in OUTCOME_METRICS.items():
        if name not in before or name not in after or not after[name].mean < before[name].mean:
            continue
        b, a = before[name], after[name]
        diff, se = a.mean - b.mean, math.hypot(b.stderr, a.stderr)
        size = f"{abs(diff) / se:.1f} standard errors of the difference" if se > 0 else "no sampling error"
        warnings.append(f"**Warning: training lowered the held-out {label}{what}** from {b.mean:.3f} to {a.mean:.3f} "
                        f"({diff:+.3f}, {size}).")
    return warnings


def before_after_pairs(evaluations: list[Path]) -> list[tuple[Path, Path]]:
    """(before, after) evaluation folders: siblings whose names differ only by "before" -> "after"."""
    found = set(evaluations)
    return [(d, twin) for d in evaluations if "before" in d.name
            and (twin := d.with_name(d.name.replace("before", "after"))) in found]


# Counts on another scale than rewards: tabled, not drawn on the reward curve.
NOT_ON_THE_CURVE = frozenset({"turns", "errors", "reward_errors"})


def reward_curve_keys(records: list[dict]) -> list[str]:
    """The rollout statistics of a training log (rlvr.rollouts' naming: reward, each reward function, turn/<k>/reward,
    ...), from step records only (a run summary line has none)."""
    return sorted({k for r in records if "loss" in r for k, v in r.items()
                   if is_rollout_statistic(k) and isinstance(v, int | float) and not isinstance(v, bool)})


def plot_training_run(metrics_path: Path, out_png: Path) -> list[str]:
    records = read_jsonl(metrics_path)
    keys = reward_curve_keys(records)
    if not records or not keys:
        return []
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in (k for k in keys if k not in NOT_ON_THE_CURVE):
        points = [(r.get("step", i), r[key]) for i, r in enumerate(records) if isinstance(r.get(key), int | float)]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=key)
    ax.set_xlabel("training step")
    ax.set_ylabel("reward")
    ax.set_title(f"{metrics_path.parent.name}: rewards over training")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return keys


def evaluation_row(results_dir: Path) -> tuple[dict, list[list[float]]]:
    metadata = json.loads((results_dir / "metadata.json").read_text())
    rows = read_jsonl(results_dir / "results.jsonl")
    reward = mean_stderr([r["reward"] for r in rows])
    turns = [r.get(TURN_REWARDS) or [] for r in rows]
    return {
        "dir": str(results_dir),
        "env": metadata.get("env_id", "?"),
        "model": metadata.get("model", "?"),
        "rollouts": len(rows),
        "reward": _fmt(reward.mean, reward.stderr),
    }, turns


def plot_turn_rewards(per_dir: dict[str, list[list[float]]], out_png: Path) -> bool:
    per_dir = {k: v for k, v in per_dir.items() if any(v)}
    if not per_dir:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(per_dir)
    for j, (label, turns) in enumerate(per_dir.items()):
        max_turns = max(len(t) for t in turns)
        stats = [mean_stderr([t[k] for t in turns if len(t) > k]) for k in range(max_turns)]
        xs = [k + 1 + (j - (len(per_dir) - 1) / 2) * width for k in range(max_turns)]
        ax.bar(xs, [s.mean for s in stats], width, yerr=[s.stderr for s in stats], label=label, capsize=3)
    ax.set_xlabel("assistant turn")
    ax.set_ylabel("mean turn reward")
    ax.set_title("per-turn rewards")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return True


def plot_grid(cells: list[dict], out_png: Path) -> None:
    rows = sorted({c["model"] for c in cells})
    cols = sorted({c["env"] + (f" / {c['retriever']}" if c.get("retriever") else "") for c in cells})
    grid = [[math.nan] * len(cols) for _ in rows]
    for c in cells:
        col = c["env"] + (f" / {c['retriever']}" if c.get("retriever") else "")
        grid[rows.index(c["model"])][cols.index(col)] = c["reward"]
    fig, ax = plt.subplots(figsize=(1.8 * len(cols) + 2, 0.8 * len(rows) + 2))
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, "n/a" if math.isnan(value) else f"{value:.2f}", ha="center", va="center", color="w")
    fig.colorbar(image, ax=ax, label="mean reward")
    ax.set_title("benchmark grid")
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)


def analyze(directory: Path) -> Path:
    """Write ``analysis.md`` and PNG plots into ``directory``; return the markdown path."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory: give a run, evaluation or benchmark directory")
    report = Report()

    runs = sorted(directory.rglob("metrics.jsonl"))
    for metrics in runs:
        png = metrics.parent / "reward_curve.png"
        keys = plot_training_run(metrics, png)
        if keys:
            # step records only: the trainer ends metrics.jsonl with a run summary (train_loss, runtime)
            records = [r for r in read_jsonl(metrics) if any(k in r for k in keys)]
            first, last = records[0], records[-1]
            table = markdown_table(
                ["metric", "first step", "last step"],
                [[k, f"{first.get(k, math.nan):.3f}", f"{last.get(k, math.nan):.3f}"] for k in keys],
            )
            report.sections.append(f"## Training run `{metrics.parent}`\n\n{len(records)} steps.\n\n{table}")
            report.plots.append(png)

    evals = sorted(p.parent for p in directory.rglob("results.jsonl") if (p.parent / "metadata.json").exists())
    if evals:
        rows, turns = [], {}
        for results_dir in evals:
            row, turn_rewards = evaluation_row(results_dir)
            rows.append(row)
            turns[str(results_dir.relative_to(directory)) or "."] = turn_rewards
        header = ["env", "model", "rollouts", "reward (mean ± se)", "dir"]
        table = markdown_table(header, [[r["env"], r["model"], r["rollouts"], r["reward"], r["dir"]] for r in rows])
        report.sections.append(f"## Evaluations\n\n{table}")
        from rlvr.evaluation import read_summary

        for before, after in before_after_pairs(evals):  # our evaluations carry summary.json; vf-eval's do not
            if not ((before / "summary.json").is_file() and (after / "summary.json").is_file()):
                continue
            where = f" ({after.relative_to(directory)} against {before.relative_to(directory)})"
            report.warnings += outcome_fell(read_summary(before), read_summary(after), where)
        png = directory / "turn_rewards.png"
        if plot_turn_rewards(turns, png):
            report.plots.append(png)

    for grid_file in sorted(directory.rglob("grid.jsonl")):
        cells = read_jsonl(grid_file)
        if not cells:
            continue
        png = grid_file.parent / "grid.png"
        plot_grid(cells, png)
        table = markdown_table(
            ["model", "env", "retriever", "reward (mean ± se)", "n"],
            [[c["model"], c["env"], c.get("retriever") or "-", _fmt(c["reward"], c["stderr"]), c["n"]] for c in cells],
        )
        report.sections.append(f"## Benchmark `{grid_file.parent}`\n\n{table}")
        report.plots.append(png)

    if not report.sections:
        raise FileNotFoundError(
            f"nothing to analyze under {directory}: expected metrics.jsonl (training), results.jsonl + metadata.json "
            "(evaluation) or grid.jsonl (benchmark)"
        )
    images = "\n".join(f"![{p.stem}]({p.relative_to(directory)})" for p in report.plots)
    warnings = "".join(f"{w}\n\n" for w in report.warnings)
    markdown = "# rlvr analysis\n\n" + warnings + "\n\n".join(report.sections) + "\n\n## Plots\n\n" + images + "\n"
    return atomic_write_text(directory / "analysis.md", markdown)
