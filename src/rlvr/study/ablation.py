"""One study against another that changed one thing (an ablation: a training option, the step budget, the training
goals), cell by cell: `rlvr analyze DIR --against OTHER`.

Two cells with the same algorithm and seed in the two studies started from the same weights and data order and
were evaluated on the same held-out examples with the same sampling seeds, so they pair example by example, as
two algorithms of one seed do in the study's own report (`rlvr.study.stats.paired_difference`); pooled over the
seeds both studies ran, per example averaged over the seeds (`seed_averaged`). The two studies must evaluate alike
(`records.base_definition`: model, environment, held-out set, evaluation sampling); what else differs is listed
at the top of the comparison, so the reader sees what the difference measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.analysis import markdown_table
from rlvr.io import atomic_write_text
from rlvr.study import records
from rlvr.study.report import StudyData, fmt_diff, load_study
from rlvr.study.settings import StudySettings
from rlvr.study.stats import PairedDifference, paired_by_group, paired_difference, seed_averaged
from rlvr.study.units import MAIN, CellRecord


@dataclass(frozen=True)
class AblationRow:
    """`algo` in this study minus in the other, on one metric: one seed's cells, or (seed None) pooled over
    `seeds`; `split`: the same within each value of the [report] split_by field."""

    algo: str
    seed: int | None
    seeds: tuple[int, ...]
    metric: str
    this: float
    other: float
    diff: PairedDifference
    split: dict[str, PairedDifference]


def settings_difference(this: StudyData, other: StudyData) -> list[str]:
    """Every setting of the two studies' unit definitions that differs (the other's value -> this one's), the
    algorithms' own options included, for the algorithms both ran; ValueError when they do not evaluate alike."""
    mine, theirs = StudySettings.from_dict(this.settings), StudySettings.from_dict(other.settings)
    base_mine = records.base_definition(records.definition(mine, None))
    base_theirs = records.base_definition(records.definition(theirs, None))
    if records.digest(base_mine) != records.digest(base_theirs):
        raise ValueError("the two studies do not evaluate alike, so their cells do not pair:\n  "
                         + "\n  ".join(records.changed(base_theirs, base_mine))
                         + "\ncompare studies of the same model, environment and held-out evaluation")
    found: list[str] = []
    for algo in [None, *shared_algos(this, other)]:
        for change in records.changed(records.definition(theirs, algo), records.definition(mine, algo)):
            # a cell's training options repeat the study's [training]: each difference is named once
            if change not in found and f"study.{change}" not in found:
                found.append(change)
    return found


def weights_difference(this: StudyData, other: StudyData) -> list[str]:
    """The paired cells whose starting weights differ (each record's provenance names the sha256 of the weights it
    trained from) or could not be compared: a study from another checkpoint is an ablation too, but never a silent
    one, so each such pair is named beside the settings that differ."""
    changed: dict[tuple[str, str], list[str]] = {}
    unknown = []
    for mine, their in paired_cells(this, other):
        name = f"{mine.algo}/seed-{mine.seed}"
        a, b = mine.provenance.get("model_sha256"), their.provenance.get("model_sha256")
        if a and b and a != b:
            changed.setdefault((b, a), []).append(name)
        elif not (a and b):
            unknown.append(name)
    found = [f"starting weights sha256 {b[:16]}... -> {a[:16]}... ({', '.join(cells)})"
             for (b, a), cells in changed.items()]
    if unknown:
        found.append(f"starting weights not checked ({', '.join(unknown)}): a record names no sha256 of its weights")
    return found


def paired_cells(this: StudyData, other: StudyData) -> list[tuple[CellRecord, CellRecord]]:
    """(this study's cell, the other's) for every algorithm and seed both finished, in this study's order."""
    theirs = {(c.algo, c.seed): c for c in other.cells}
    return [(mine, theirs[(mine.algo, mine.seed)]) for mine in this.cells if (mine.algo, mine.seed) in theirs]


def shared_algos(this: StudyData, other: StudyData) -> list[str]:
    return [a for a in this.algos if a in other.algos]


def compare(this: StudyData, other: StudyData, metrics: Sequence[str], evaluation: str = MAIN) -> list[AblationRow]:
    """Per metric and shared algorithm: one row per seed both studies finished with per-example means, then (with
    two seeds or more) the pooled row."""
    groups = this.example_groups(evaluation) | other.example_groups(evaluation)
    level = this.report.confidence
    pairs = paired_cells(this, other)
    rows = []
    for metric in dict.fromkeys(metrics):
        for algo in shared_algos(this, other):
            per_seed = {}
            for mine, their in (pair for pair in pairs if pair[0].algo == algo):
                a = mine.examples.get(evaluation, {}).get(metric, {})
                b = their.examples.get(evaluation, {}).get(metric, {})
                if a and b:
                    per_seed[mine.seed] = (a, b)
                    rows.append(AblationRow(algo, mine.seed, (mine.seed,), metric, mine.after[metric].mean,
                                            their.after[metric].mean, paired_difference(a, b, level),
                                            paired_by_group(a, b, groups, level)))
            if len(per_seed) > 1:
                a, b = seed_averaged(per_seed)
                rows.append(AblationRow(algo, None, tuple(per_seed), metric, _mean(a), _mean(b),
                                        paired_difference(a, b, level), paired_by_group(a, b, groups, level)))
    return rows


def _mean(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values) if values else float("nan")


def render_ablation(this_root: Path, other_root: Path, differences: Sequence[str], rows: Sequence[AblationRow],
                    split_by: str | None) -> str:
    lines = [f"# {this_root} against {other_root}", "",
             "The cells both studies ran (same algorithm and seed: the same data order and held-out examples, and the "
             "same starting weights unless listed below), this study's minus the other's, paired over the held-out "
             "examples (mean [95% interval] and examples higher / all); `pooled`: per example averaged over the seeds both ran.", "",
             "What differs (the other's -> this study's):", ""]
    lines += [f"- `{d}`" for d in differences] or ["- nothing in the unit definitions"]
    if not rows:
        return "\n".join([*lines, "", "No cell of the same algorithm and seed has per-example results in both.", ""])
    groups = sorted({g for r in rows for g in r.split})
    table = []
    for r in rows:
        name = f"{r.algo}/seed-{r.seed}" if r.seed is not None else f"{r.algo} pooled (seeds {', '.join(map(str, r.seeds))})"
        split = [fmt_diff(r.split[g]) if g in r.split else "-" for g in groups]
        table.append([name, r.metric, f"{r.this:.3f}", f"{r.other:.3f}", fmt_diff(r.diff), *split])
    head = ["cell", "metric", "this", "other", "this - other", *(f"{split_by} = {g}" for g in groups)]
    return "\n".join([*lines, "", markdown_table(head, table), ""])


def write_ablation(root: Path, other_root: Path) -> Path:
    """`rlvr analyze ROOT --against OTHER`: the comparison as markdown, ROOT/against_<OTHER's name>.md."""
    this, other = load_study(Path(root)), load_study(Path(other_root))
    differences = settings_difference(this, other) + weights_difference(this, other)
    metrics = [m for m in this.report.headline if m in this.metrics]
    text = render_ablation(Path(root), Path(other_root), differences, compare(this, other, metrics),
                           this.report.split_by)
    return atomic_write_text(Path(root) / f"against_{Path(other_root).resolve().name}.md", text)
