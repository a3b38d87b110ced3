"""A study directory -> report.md, summary.json and plots/*.png (all written atomically).

Read-only over the cells: `rlvr analyze DIR` and the end of `rlvr study` both call `write_report`, and a study
cut short reports the cells it finished (the rest are listed as missing).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rlvr.analysis import markdown_table, outcome_fell  # noqa: E402
from rlvr.evaluation import Stat  # noqa: E402
from rlvr.io import atomic_write_json, atomic_write_text  # noqa: E402
from rlvr.study.layout import StudyLayout  # noqa: E402
from rlvr.study.power import resolved_by  # noqa: E402
from rlvr.study.settings import ReportSettings  # noqa: E402
from rlvr.study.stats import (  # noqa: E402
    Collapse,
    PairedDifference,
    RerunSpread,
    across_seeds,
    detect_collapse,
    first_step_reaching,
    is_constant,
    mean_band,
    paired_by_group,
    paired_difference,
    pooled_replicate_sd,
    rerun_spread,
    seed_averaged,
    t_quantile,
)
from rlvr.study.units import MAIN, BaseRecord, CellRecord, ExampleMeans, read_base, read_cell  # noqa: E402


@dataclass
class StudyData:
    settings: dict[str, Any]  # as stored in study.json (the grid of every invocation)
    report: ReportSettings
    sampling: dict[str, Any]  # of the held-out evaluations
    commands: list[str]
    dataset_commands: dict[str, str]  # offline algo -> the `rlvr collect` that made its dataset
    bases: dict[int, dict[str, Stat]]  # seed -> base model's evaluation
    base_wall_s: dict[int, float]
    cells: list[CellRecord]  # the cells (replicate 0): every table but the re-run spread reads these
    replicates: list[CellRecord]  # their same-seed re-runs (replicate >= 1)
    base_sets: dict[str, dict[int, dict[str, Stat]]] = field(default_factory=dict)  # set -> seed -> base evaluation
    base_examples: dict[int, dict[str, ExampleMeans]] = field(default_factory=dict)  # seed -> evaluation -> ...
    failures: list[dict[str, Any]] = field(default_factory=list)  # failed.json of the cells whose last attempt failed
    base_records: list[BaseRecord] = field(default_factory=list)  # the base evaluations (provenance table)

    @property
    def algos(self) -> list[str]:
        """The grid's algorithms with at least one finished cell, in the grid's order (baseline first)."""
        present = {c.algo for c in self.cells}
        ordered = [self.report.baseline] + [a for a in self.settings["algos"] if a != self.report.baseline]
        return [a for a in ordered if a in present] + sorted(present - set(ordered))

    @property
    def metrics(self) -> list[str]:
        """Every statistic the evaluations have, in the evaluations' order (reward, reward functions, turns...)."""
        names: list[str] = []
        for summary in [*self.bases.values(), *(c.after for c in self.cells)]:
            names += [k for k in summary if k not in names]
        return names

    def values(self, algo: str, metric: str, held_out: str | None = None) -> dict[int, float]:
        """seed -> the cell's evaluation mean of `metric` (on [evaluation.sets] set `held_out`, if given)."""
        summaries = {c.seed: c.after if held_out is None else c.sets.get(held_out, {})
                     for c in self.cells if c.algo == algo}
        return {seed: summary[metric].mean for seed, summary in summaries.items() if metric in summary}

    def base_values(self, metric: str, held_out: str | None = None) -> dict[int, float]:
        bases = self.bases if held_out is None else self.base_sets.get(held_out, {})
        return {s: summary[metric].mean for s, summary in bases.items() if metric in summary}

    @property
    def headline(self) -> list[str]:
        """The [report] headline metrics the evaluations have (reward when none has one)."""
        return [m for m in self.report.headline if m in self.metrics] or ["reward"]

    @property
    def curve_steps(self) -> list[int]:
        """The held-out learning curve's steps: 0 (the base model), each evaluated [evaluation] at_steps step and
        the final step (max_steps); none when no cell has an intermediate point."""
        inner = sorted({step for c in self.cells for step in c.heldout_curve})
        return [0, *inner, self.settings["training"]["max_steps"]] if inner else []

    def curve_values(self, algo: str, metric: str, step: int) -> dict[int, float]:
        """seed -> the held-out mean of `metric` after training step `step` in `algo`'s cells: at step 0 the base
        model's evaluation of the cell's seed, at max_steps the cell's final evaluation."""
        if step == self.settings["training"]["max_steps"]:
            return self.values(algo, metric)
        cells = [c for c in self.cells if c.algo == algo]
        if step == 0:
            base = self.base_values(metric)
            return {c.seed: base[c.seed] for c in cells if c.seed in base}
        return {c.seed: c.heldout_curve[step][metric].mean for c in cells
                if metric in c.heldout_curve.get(step, {})}

    def paired_curve(self, algo: str, metric: str, step: int) -> PairedDifference:
        """`algo` minus the baseline, seed by seed, after training step `step` (`curve_values`)."""
        return paired_difference(self.curve_values(algo, metric, step),
                                 self.curve_values(self.report.baseline, metric, step), self.report.confidence)

    def collapse(self, cell: CellRecord) -> Collapse:
        steps = sorted(cell.reward_std)
        return detect_collapse(steps, [cell.reward_std[s] for s in steps], self.report.collapse_window,
                               self.report.collapse_tol)

    def steps_to_target(self, cell: CellRecord) -> dict[str, int | None]:
        """[report] target metric -> the first training step whose batch reached the value (None: never)."""
        return {m: first_step_reaching(cell.curves.get(m, {}), v) for m, v in self.report.target.items()}

    def runs(self, cell: CellRecord) -> list[CellRecord]:
        """The cell and its finished same-seed re-runs."""
        return [cell, *sorted((r for r in self.replicates if (r.algo, r.seed) == (cell.algo, cell.seed)),
                              key=lambda r: r.replicate)]

    def spread(self, cell: CellRecord, metric: str) -> RerunSpread:
        return rerun_spread([r.after[metric] for r in self.runs(cell) if metric in r.after])

    def paired(self, algo: str, metric: str, held_out: str | None = None) -> PairedDifference:
        return paired_difference(self.values(algo, metric, held_out),
                                 self.values(self.report.baseline, metric, held_out), self.report.confidence)

    def paired_with_base(self, algo: str, metric: str, held_out: str | None = None) -> PairedDifference:
        """The cell minus the starting model's evaluation of the same seed (the same sampling seeds)."""
        return paired_difference(self.values(algo, metric, held_out), self.base_values(metric, held_out),
                                 self.report.confidence)

    def example_pair(self, cell: CellRecord, metric: str, evaluation: str,
                     against: str | None) -> tuple[dict[str, float], dict[str, float]]:
        """The cell's per-example means of `metric` and those of the base model (`against` None) or of algorithm
        `against`'s cell of the same seed."""
        if against is None:
            other = self.base_examples.get(cell.seed, {})
        else:
            other = next((c.examples for c in self.cells if (c.algo, c.seed) == (against, cell.seed)), {})
        return cell.examples.get(evaluation, {}).get(metric, {}), other.get(evaluation, {}).get(metric, {})

    def paired_over_examples(self, cell: CellRecord, metric: str, evaluation: str = MAIN,
                             against: str | None = None) -> PairedDifference:
        """Within the cell's seed: its per-example means minus those of the base model (`against` None) or of
        algorithm `against`'s cell of the same seed, over the held-out examples both evaluated."""
        return paired_difference(*self.example_pair(cell, metric, evaluation, against), self.report.confidence)

    def seed_pairs(self, algo: str, metric: str, evaluation: str = MAIN,
                   against: str | None = None) -> dict[int, tuple[dict[str, float], dict[str, float]]]:
        """seed -> `example_pair` of `algo`'s cell of that seed, for the seeds where both sides have per-example
        means."""
        pairs = {c.seed: self.example_pair(c, metric, evaluation, against) for c in self.cells if c.algo == algo}
        return {seed: pair for seed, pair in sorted(pairs.items()) if all(pair)}

    def pooled_over_examples(self, algo: str, metric: str, evaluation: str = MAIN,
                             against: str | None = None) -> PairedDifference:
        """`algo` minus the base model (`against` None) or algorithm `against`, per held-out example averaged over
        the seeds both have (`seed_averaged`), paired over the examples."""
        return paired_difference(*seed_averaged(self.seed_pairs(algo, metric, evaluation, against)),
                                 self.report.confidence)

    def pooled_over_examples_split(self, algo: str, metric: str, evaluation: str = MAIN,
                                   against: str | None = None) -> dict[str, PairedDifference]:
        """`pooled_over_examples` within each value of the [report] split_by field."""
        return paired_by_group(*seed_averaged(self.seed_pairs(algo, metric, evaluation, against)),
                               self.example_groups(evaluation), self.report.confidence)

    def example_groups(self, evaluation: str = MAIN) -> dict[str, str]:
        """Held-out example id -> its [report] split_by value on `evaluation`, from every unit that read one (the
        units evaluate the same examples; a record written without split_by has none)."""
        found: dict[str, str] = {}
        for unit in [*self.base_records, *self.cells]:
            found |= unit.groups.get(evaluation, {})
        return found

    def paired_over_examples_split(self, cell: CellRecord, metric: str, evaluation: str = MAIN,
                                   against: str | None = None) -> dict[str, PairedDifference]:
        """`paired_over_examples` within each value of the [report] split_by field (value -> pairing)."""
        return paired_by_group(*self.example_pair(cell, metric, evaluation, against),
                               self.example_groups(evaluation), self.report.confidence)


def load_study(root: Path) -> StudyData:
    """A study directory, with the records of its results directory (`results`), or a results directory alone: the
    units of the study directory, then every recorded unit it lacks (finished elsewhere, e.g. on another machine)."""
    from rlvr.study import records

    layout = StudyLayout(Path(root))
    if records.is_results(layout.root) and not layout.manifest.is_file():
        manifest = {**json.loads((layout.root / records.RESULTS_MANIFEST).read_text()), "invocations": []}
        results: Path | None = layout.root
    else:
        manifest = json.loads(layout.manifest.read_text())
        results = Path(manifest["settings"]["results"]) if manifest["settings"].get("results") else None
    settings = manifest["settings"]
    sets = list(settings["evaluation"].get("sets", {}))
    report = ReportSettings(**settings["report"])
    bases = {seed: read_base(layout, seed, sets, report.headline, report.split_by) for seed in layout.finished_bases()}
    cells = [read_cell(layout, a, s, sets=sets, metrics=report.headline, split_by=report.split_by)
             for a, s in layout.finished_cells()]
    replicates = [read_cell(layout, a, s, k) for a, s, k in layout.finished_replicates()]
    commands = [i["command"] for i in manifest["invocations"] if i.get("command")]
    if results is not None and results.is_dir():
        recorded_bases, recorded_cells, recorded_replicates = records.read_records(results)
        bases = {**recorded_bases, **bases}
        here = {(c.algo, c.seed, c.replicate) for c in [*cells, *replicates]}
        cells += [c for c in recorded_cells if (c.algo, c.seed, 0) not in here]
        replicates += [r for r in recorded_replicates if (r.algo, r.seed, r.replicate) not in here]
        commands = list(dict.fromkeys([*records.record_commands(results), *commands]))
    base_sets: dict[str, dict[int, dict[str, Stat]]] = {}
    for seed, base in bases.items():
        for name, summary in base.sets.items():
            base_sets.setdefault(name, {})[seed] = summary
    return StudyData(
        settings=settings, report=report, sampling=manifest.get("evaluation_sampling", {}), commands=commands,
        dataset_commands=manifest.get("offline_sources", {}),
        bases={s: b.after for s, b in sorted(bases.items())},
        base_wall_s={s: sum(b.wall_s.values()) for s, b in sorted(bases.items())},
        cells=sorted(cells, key=lambda c: (c.algo, c.seed)),
        replicates=sorted(replicates, key=lambda c: (c.algo, c.seed, c.replicate)),
        base_sets=base_sets, base_examples={s: b.examples for s, b in bases.items()},
        failures=[json.loads(layout.failed(unit).read_text()) for unit in layout.failed_units()],
        base_records=[bases[s] for s in sorted(bases)],
    )


# ---------------------------------------------------------------- text

def fmt_stat(stat: Stat) -> str:
    if stat.n == 0 or math.isnan(stat.mean):
        return "n/a"
    return f"{stat.mean:.3f} ± {stat.stderr:.3f}" if stat.n > 1 else f"{stat.mean:.3f}"


def fmt_diff(diff: PairedDifference) -> str:
    if diff.n == 0:
        return "n/a"
    if diff.n == 1:
        return f"{diff.mean:+.3f} (1 seed: no interval)"
    return f"{diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] {diff.wins}/{diff.n}"


def fmt_collapse(collapse: Collapse, steps: int) -> str:
    if steps == 0:
        return "n/a (no rollouts in training)"
    if collapse.collapsed is None:
        return f"n/a ({steps} < {collapse.window} steps)"
    if collapse.collapsed:
        return f"**yes**, from step {collapse.since_step}"
    return f"no (last {collapse.constant_steps} constant)" if collapse.constant_steps else "no"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def render_markdown(data: StudyData, plots: Sequence[Path], root: Path) -> str:
    s, rep = data.settings, data.report
    algos, metrics = data.algos, data.metrics
    grid = [(a, seed) for seed in s["seeds"] for a in s["algos"]]
    finished = {(c.algo, c.seed) for c in data.cells}
    missing = [f"{a}/seed-{seed}" for a, seed in grid if (a, seed) not in finished]
    budget = s["training"]
    ev = s["evaluation"]
    level = f"{rep.confidence:.0%}"

    lines = [f"# Credit-assignment study: {', '.join(s['algos'])} on {s['env']} with {s['model']}", ""]
    lines.append(f"{len(data.cells)} of {len(grid)} cells finished ({len(algos)} algorithms x seeds "
                 f"{', '.join(map(str, s['seeds']))})." + (f" Missing: {', '.join(missing)}." if missing else ""))
    # before everything else: a cell whose held-out outcome fell below its seed's base model (issue 44)
    for cell in sorted(data.cells, key=lambda c: (algos.index(c.algo), c.seed)):
        if cell.seed in data.bases:
            lines += ["", *outcome_fell(data.bases[cell.seed], cell.after, f" in {cell.algo}/seed-{cell.seed}")]
    if data.failures:
        lines += ["", f"**{len(data.failures)} cell(s) failed** in their last attempt (the study went on; the same "
                  "command retries them; the traceback is in each cell's failed.json):", ""]
        lines += [f"- {f['cell']} ({f['failed']}): {f['error']}" for f in data.failures]
    sampling = ", ".join(f"{k} {v}" for k, v in data.sampling.items())
    lines += ["", "Every cell: " + ", ".join(f"{k} = {v}" for k, v in budget.items()) + "; environment "
              f"`{json.dumps(s['env_args'])}`" + (f", trained with `{json.dumps(s['train_env_args'])}` changed"
                                                     if s.get("train_env_args") else "") +
              ". Held-out evaluation before training (once per seed, the base model) "
              f"and after (every cell): the same {ev['examples']} examples x {ev['rollouts']} sampled rollouts "
              f"({sampling})."]
    for algo, directory in s.get("offline_datasets", {}).items():
        if algo in s["algos"]:
            lines.append(f"{algo} trains offline on the trajectories in `{directory}` (no rollouts of its own): its "
                         "budget is that dataset and the shared max_steps x batch_size.")
    variants = s.get("variants", {})
    for algo, options in s["algo_options"].items():
        if algo in s["algos"]:
            name = f"{algo} ({variants[algo]})" if algo in variants else algo
            lines.append(f"Options of {name} only: " + ", ".join(f"{k} = {v}" for k, v in options.items()) + ".")
    if data.commands:
        collects = [c for algo, c in data.dataset_commands.items() if algo in s["algos"]]
        lines += ["", "Command(s):", "", "```bash", *collects, *data.commands, "```"]

    header = ["metric", "base model", *algos]
    rows = [[m, fmt_stat(across_seeds(data.base_values(m))),
             *(fmt_stat(across_seeds(data.values(a, m))) for a in algos)] for m in metrics]
    lines += ["", "## Held-out evaluation after training", "",
              "Mean ± standard error across seeds (each seed's value is its cell's mean over the held-out "
              "rollouts); the base model column is the study's model before any training here (the weights every "
              "cell starts from: the untrained model, or e.g. an SFT checkpoint), evaluated once per seed.", "",
              markdown_table(header, rows)]

    others = [a for a in algos if a != rep.baseline]
    if others:
        pairs = max(data.paired(a, m).n for a in others for m in metrics)
        width = (f"With {pairs} seeds that is {pairs - 1} degrees of freedom (t = "
                 f"{t_quantile((1 + rep.confidence) / 2, pairs - 1):.2f} for {level}): " if pairs > 1 else
                 "With one seed there is no interval yet; with few, ")
        rows = [[m, *(fmt_diff(data.paired(a, m)) for a in others)] for m in metrics]
        lines += ["", f"## Paired differences against {rep.baseline}", "",
                  f"Per seed, the algorithm's value minus {rep.baseline}'s on the same seed (same data order and "
                  f"starting weights); mean [{level} interval] and the number of seeds where the algorithm was "
                  f"higher. Interval: Student's t with n-1 degrees of freedom on the per-seed differences. {width}"
                  "intervals are wide, and one that excludes 0 is a strong result; a bootstrap over a handful of "
                  "seeds has few distinct resamples and an interval narrower than the data justify, so none is "
                  "used.", "", markdown_table(["metric", *(f"{a} - {rep.baseline}" for a in others)], rows)]
        first = next((m for m in rep.headline if m in metrics), "reward")
        lines += ["", f"In plain words, on {first}:", ""]
        for algo in others:
            diff = data.paired(algo, first)
            verdict = ("no pair of seeds yet" if diff.n == 0 else "one seed: no interval" if diff.n == 1 else
                       f"separated at {level}" if diff.excludes_zero else f"not separated at {level}")
            lines.append(f"- {algo} - {rep.baseline}: {fmt_diff(diff)} ({verdict}; higher in {diff.wins}, lower in "
                         f"{diff.losses} of {diff.n} seeds)")

    if algos and data.bases:
        rows = [[m, *(fmt_diff(data.paired_with_base(a, m)) for a in algos)] for m in metrics]
        lines += ["", "## Paired differences against the base model", "",
                  f"Per seed, the cell's value minus the base model's evaluation of the same seed ({s['model']}, "
                  "the weights every cell starts from, sampled with the same seeds); mean [{level} interval, "
                  "Student's t] and the number of seeds where the cell was higher.".replace("{level}", level), "",
                  markdown_table(["metric", *(f"{a} - base" for a in algos)], rows)]

    lines += render_heldout_curve(data)
    for name, changes in s["evaluation"].get("sets", {}).items():
        lines += ["", *render_held_out_set(data, name, changes)]

    lines += render_targets(data)
    headline = [m for m in rep.headline if m in metrics]
    lines += ["", *render_paired_over_examples(data, headline)]
    lines += ["", *render_pooled_over_examples(data, headline)]
    rows = []
    for cell in sorted(data.cells, key=lambda c: (algos.index(c.algo), c.seed)):
        rows.append([
            cell.algo, cell.seed, *(fmt_stat(cell.after[m]) if m in cell.after else "n/a" for m in headline),
            fmt_collapse(data.collapse(cell), len(cell.reward_std)),
            "yes" if "reward" in cell.after and is_constant(cell.after["reward"]) else "no",
            cell.steps, f"{cell.tokens_generated:.0f}", _minutes(cell.wall_s.get("training", math.nan)),
            _minutes(cell.wall_s.get("evaluation", math.nan)), _minutes(cell.wall_s.get("total", math.nan)),
            "-" if not cell.resumed_from else Path(cell.resumed_from).name,
        ])
    lines += ["", "## Cells", "",
              "Headline metrics after training (mean ± s.e. over the cell's held-out rollouts: the evaluation's "
              "sampling error only; a re-run's spread is in the next section), collapse, budget used and wall time "
              "(minutes). A resumed cell's times cover the last attempt only.", "",
              markdown_table(["algo", "seed", *headline, "training collapsed", "eval reward constant", "steps",
                              "tokens generated", "training min", "eval min", "total min", "resumed from"], rows)]
    total = sum(c.wall_s.get("total", 0.0) for c in data.cells) + sum(data.base_wall_s.values())
    lines += ["", f"Base evaluations: {', '.join(f'seed {k}: {_minutes(v)} min' for k, v in data.base_wall_s.items())}"
              f". Sum over finished units: {_minutes(total)} min (server start-up not included)."]
    lines += render_batches(data, algos)
    lines += ["", *render_provenance(data)]
    lines += ["", *render_rerun_spread(data, headline)]
    lines += ["", "**Collapse.** A cell's training collapsed when, in each of its last "
              f"{rep.collapse_window} steps, every rollout of the step's batch got the same outcome reward "
              f"(within-batch std of the reward <= {rep.collapse_tol:g}, the trainer's `reward/std`): outcome-only "
              "credit then has zero advantage everywhere and cannot leave that state. 'eval reward "
              "constant': every held-out rollout after training got the same reward."]
    lines += ["", "## Plots", "", *(f"![{p.stem}]({p.relative_to(root)})" for p in plots), ""]
    return "\n".join(lines)


# The trainer's batch statistics the report shows per step (CellRecord.batch_curves), with their column titles.
BATCH_COLUMNS = {"batch/skipped_zero_advantage_fraction": "zero-advantage fraction",
                 "batch/generation_rounds": "generation rounds", "batch/dropped_groups": "dropped groups"}


def render_batches(data: StudyData, algos: Sequence[str]) -> list[str]:
    """Per cell and step, how its training batch was made: the share of samples with zero advantage (no backward
    pass), and with dynamic sampling the generation rounds and the groups without reward spread dropped; then the
    minutes generating and training. Cells recorded before batch statistics were kept are left out."""
    cells = sorted((c for c in data.cells if c.batch_curves), key=lambda c: (algos.index(c.algo), c.seed))
    shown = [k for k in BATCH_COLUMNS if any(k in c.batch_curves for c in cells)]
    if not cells or not shown:
        return []

    def per_step(values: dict[int, float] | None) -> str:
        return " ".join(f"{values[k]:.2g}" for k in sorted(values)) if values else "n/a"

    rows = [[c.algo, c.seed, *(per_step(c.batch_curves.get(k)) for k in shown),
             _minutes(sum(c.batch_curves.get("timing/generation_s", {}).values())),
             _minutes(sum(c.batch_curves.get("timing/training_s", {}).values()))] for c in cells]
    missing = len(data.cells) - len(cells)
    note = ["", f"Not listed: {missing} cell(s) whose records were made before batch statistics were kept."]
    return ["", "## Training batches", "",
            "How each step's training batch was made (one value per step): the fraction of its samples with zero "
            "advantage (they cost no backward pass; all of them: the step learns nothing), and with dynamic sampling "
            "(`filter_groups`) the generation rounds it took and the groups without reward spread it dropped; then "
            "the minutes spent generating and training over all steps.", "",
            markdown_table(["algo", "seed", *(BATCH_COLUMNS[k] for k in shown), "generation min", "training min"],
                           rows), *(note if missing else [])]


def fmt_machine(machine: dict[str, Any] | None) -> str:
    return f"{machine['cpu']}, {machine['cores']} cores" if machine else "n/a"


def remaining(data: StudyData) -> tuple[list[str], float]:
    """The grid's units without a result (base evaluations, cells, same-seed re-runs) and their estimated wall time
    in seconds: per cell its algorithm's mean measured total (the mean over every measured cell where the algorithm
    has none), per base evaluation the mean measured one."""
    s = data.settings
    runs = [*data.cells, *data.replicates]
    done = {(c.algo, c.seed, c.replicate) for c in runs}
    todo = [(a, seed, r) for r in range(s.get("replicates", 1)) for seed in s["seeds"] for a in s["algos"]
            if (a, seed, r) not in done]
    walls = [c.wall_s["total"] for c in runs if "total" in c.wall_s]
    overall = statistics.mean(walls) if walls else math.nan
    per_algo = {a: statistics.mean(w) for a in s["algos"]
                if (w := [c.wall_s["total"] for c in runs if c.algo == a and "total" in c.wall_s])}
    bases = [seed for seed in s["seeds"] if seed not in data.bases]
    base_mean = statistics.mean(data.base_wall_s.values()) if data.base_wall_s else math.nan
    estimate = sum(per_algo.get(a, overall) for a, _, _ in todo) + len(bases) * base_mean
    names = [f"base/seed-{seed}" for seed in bases] + [f"{a}/seed-{seed}" + (f"/replicate-{r}" if r else "")
                                                       for a, seed, r in todo]
    return names, estimate


def render_provenance(data: StudyData) -> list[str]:
    """Which commit and machine made each unit, in how long and with how much memory; what is left, and its cost
    estimated from the measured units."""
    rows = []
    units = [(f"base/seed-{b.seed}", b.provenance, sum(b.wall_s.values())) for b in data.base_records]
    units += [(f"{c.algo}/seed-{c.seed}" + (f"/replicate-{c.replicate}" if c.replicate else ""), c.provenance,
               c.wall_s.get("total", math.nan)) for c in [*data.cells, *data.replicates]]
    for key, made, wall in units:
        commit = (made.get("commit") or "n/a")[:10] + (" (modified)" if made.get("code_modified") else "")
        peak = made.get("peak_rss_mb")
        rows.append([key, commit, fmt_machine(made.get("machine")), _minutes(wall),
                     "n/a" if peak is None else f"{peak / 1024:.1f}", made.get("finished", "n/a"),
                     (made.get("model_sha256") or "n/a")[:12]])
    lines = ["## Provenance and cost", "",
             "Each unit with the git commit (and whether the study code had uncommitted changes), the machine, the "
             "wall time (minutes; a resumed cell's covers its last attempt), the study process's peak resident "
             "memory in GB (the trainer; the rollout server is a process of its own) and the sha256 of the starting "
             "weights (recorded with a results directory). Units finished elsewhere come from their committed "
             "records.", "",
             markdown_table(["unit", "commit", "machine", "wall min", "peak GB", "finished", "starting weights"],
                            rows)]
    starts = {made["model_sha256"] for _, made, _ in units if made.get("model_sha256")}
    if len(starts) > 1:
        shown = ", ".join(sorted(h[:12] for h in starts))
        lines += ["", f"**The units started from {len(starts)} different weights** ({shown}): their differences "
                  "include that."]
    machines = {json.dumps(made["machine"], sort_keys=True) for _, made, _ in units if made.get("machine")}
    if len(machines) > 1:
        lines += ["", f"The units ran on {len(machines)} machines: wall times compare within a machine only."]
    names, estimate = remaining(data)
    if names:
        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        cost = "n/a (nothing measured yet)" if math.isnan(estimate) else f"about {estimate / 3600:.1f} h"
        lines += ["", f"**Left: {len(names)} unit(s)** ({shown}); {cost} at the measured means above (a cell: its "
                  "algorithm's mean total, or the mean over all cells; server start-ups not included)."]
    else:
        lines += ["", "Nothing is left: every unit of the grid has a result."]
    return lines


def render_targets(data: StudyData) -> list[str]:
    """Per [report] target: for each algorithm, the first training step whose batch mean reached it, seed by seed."""
    lines = []
    for metric, value in data.report.target.items():
        rows = []
        for algo in data.algos:
            cells = sorted((c for c in data.cells if c.algo == algo), key=lambda c: c.seed)
            reached = [data.steps_to_target(c)[metric] for c in cells]
            steps = sorted(math.inf if r is None else r for r in reached)
            median = statistics.median(steps) if steps else math.nan
            rows.append([algo, ", ".join(f"{c.seed}: {'-' if r is None else r}" for c, r in zip(cells, reached,
                                                                                               strict=True)),
                         f"{sum(r is not None for r in reached)} of {len(cells)}",
                         "never" if median == math.inf else f"{median:g}"])
        lines += ["", f"## Training steps to {metric} >= {value:g}", "",
                  f"The first training step whose batch mean of `{metric}` (over the step's rollouts, the trainer's "
                  f"log) reached {value:g}; '-': not within the cell's steps. The median counts those as never.", "",
                  markdown_table(["algo", "step per seed", "reached", "median step"], rows)]
    return lines


def render_heldout_curve(data: StudyData) -> list[str]:
    """The held-out learning curve ([evaluation] at_steps): per headline metric and algorithm, the mean ± s.e.
    across seeds at step 0 (the base model), at each curve step and at the final step, then each algorithm minus the
    baseline per seed at those steps. Nothing without curve points."""
    steps, rep = data.curve_steps, data.report
    if not steps:
        return []
    final, metrics = steps[-1], data.headline
    names = [f"step {s}" + (" (base)" if s == 0 else " (final)" if s == final else "") for s in steps]
    rows = [[m, a, *(fmt_stat(across_seeds(data.curve_values(a, m, step))) for step in steps)]
            for m in metrics for a in data.algos]
    lines = ["", "## Held-out learning curve", "",
             "The held-out evaluation (same examples, rollouts, sampling and per-request seeds as above) of the "
             "weights after each step of [evaluation] at_steps, between the base model (step 0) and the final "
             "weights: mean ± s.e. across seeds. A curve still rising at the final step suggests that more steps "
             "would help; one flat since an early step, that they would not (within these errors).", "",
             markdown_table(["metric", "algo", *names], rows)]
    others = [a for a in data.algos if a != rep.baseline]
    if others:
        rows = [[m, f"{a} - {rep.baseline}", *(fmt_diff(data.paired_curve(a, m, step)) for step in steps[1:])]
                for m in metrics for a in others]
        lines += ["", f"Paired against {rep.baseline} at each step (per seed; mean [{rep.confidence:.0%} interval, "
                  "Student's t] and seeds higher; at step 0 every cell is the base model):", "",
                  markdown_table(["metric", "difference", *names[1:]], rows)]
    return lines


def render_held_out_set(data: StudyData, name: str, changes: dict[str, Any]) -> list[str]:
    """An [evaluation.sets] set: the headline metrics of the base model and every algorithm (mean ± s.e. across
    seeds), and their paired differences against the baseline and the base model."""
    rep, algos = data.report, data.algos
    metrics = [m for m in rep.headline if m in data.metrics] or ["reward"]
    rows = [[m, fmt_stat(across_seeds(data.base_values(m, name))),
             *(fmt_stat(across_seeds(data.values(a, m, name))) for a in algos)] for m in metrics]
    others = [a for a in algos if a != rep.baseline]
    paired = [[m, *(fmt_diff(data.paired(a, m, name)) for a in others),
               *(fmt_diff(data.paired_with_base(a, m, name)) for a in algos)] for m in metrics]
    return [f"## Held-out set {name}", "",
            f"The same weights on `{json.dumps(changes)}` (changed from the environment arguments above); same "
            "examples, rollouts and sampling. Mean ± s.e. across seeds, then paired differences per seed "
            f"(mean [{rep.confidence:.0%} interval] and seeds higher) against {rep.baseline} and the base model.", "",
            markdown_table(["metric", "base model", *algos], rows), "",
            markdown_table(["metric", *(f"{a} - {rep.baseline}" for a in others), *(f"{a} - base" for a in algos)],
                           paired)]


def comparisons(data: StudyData) -> list[str | None]:
    """What the per-example pairings subtract: the base model (None), and the baseline when others are compared."""
    baseline = data.report.baseline
    return [None, *([baseline] if baseline in data.algos and len(data.algos) > 1 else [])]


def render_paired_over_examples(data: StudyData, headline: Sequence[str]) -> list[str]:
    """Every cell against the base model (and the baseline's cell) of its own seed, example by example on each
    held-out set: the interval a single-seed study has (it covers the evaluation, not a re-run)."""
    rep = data.report
    evaluations = [MAIN, *data.settings["evaluation"].get("sets", {})]
    cells = sorted((c for c in data.cells if c.examples), key=lambda c: (data.algos.index(c.algo), c.seed))
    headline = [m for m in headline if any(m in e for c in cells for e in c.examples.values())]
    if not cells or not headline:
        return []
    compare = comparisons(data)
    also = f" (and for {rep.baseline}'s cell of that seed)" if len(compare) > 1 else ""
    lines = ["## Paired over the held-out examples (within a seed)", "",
             "Per cell: on each held-out example, the mean over its rollouts minus the same example's mean for the "
             f"base model of the same seed{also}, sampled with the same per-request seeds; mean "
             f"[{rep.confidence:.0%} interval, Student's t over the examples] and the examples where the cell was "
             "higher out of those paired. This interval covers the evaluation's sampling and the choice of examples "
             "for one training run, not what another training seed would do (the tables over seeds above): it is "
             "the uncertainty a one-seed cell has."]
    header = ["cell", *(f"{m}: - {other or 'base'}" for other in compare for m in headline)]
    for evaluation in evaluations:
        rows = [[f"{c.algo}/seed-{c.seed}",
                 *("-" if other == c.algo else fmt_diff(data.paired_over_examples(c, m, evaluation, other))
                   for other in compare for m in headline)] for c in cells]
        lines += ["", f"**{evaluation or 'the held-out set of the environment arguments'}**", "",
                  markdown_table(header, rows), "", resolution(data, cells, headline, evaluation)]
        if rep.split_by:
            lines += render_split(data, cells, headline, evaluation, compare)
    return lines


def render_pooled_over_examples(data: StudyData, headline: Sequence[str]) -> list[str]:
    """Each algorithm against the base model and the baseline over its seeds at once: per held-out example the
    difference averaged over the seeds, paired over the examples; only where some algorithm has 2 or more seeds."""
    rep = data.report
    headline = [m for m in headline if any(m in e for c in data.cells for e in c.examples.values())]
    if not headline:
        return []
    compare = comparisons(data)
    rows, groups_rows, stderrs = [], [], {m: [] for m in headline}
    for evaluation in [MAIN, *data.settings["evaluation"].get("sets", {})]:
        groups = data.example_groups(evaluation) if rep.split_by else {}
        for algo in data.algos:
            seeds = {other: list(data.seed_pairs(algo, headline[0], evaluation, other)) for other in compare}
            if len(seeds[None]) < 2:
                continue
            label = f"{algo} ({evaluation})" if evaluation else algo
            pooled = {(o, m): data.pooled_over_examples(algo, m, evaluation, o) for o in compare for m in headline}
            for m in headline:
                if pooled[None, m].n > 1:
                    stderrs[m].append(pooled[None, m].stderr)
            # a pairing with the baseline over fewer seeds than the row's says which
            fewer = {o: "" if seeds[o] == seeds[None] else f" (seeds {', '.join(map(str, seeds[o]))})"
                     for o in compare}
            rows.append([label, ", ".join(map(str, seeds[None])),
                         *("-" if o == algo else fmt_diff(pooled[o, m]) + fewer[o] for o in compare for m in headline)])
            split = {(o, m): data.pooled_over_examples_split(algo, m, evaluation, o)
                     for o in compare if o != algo for m in headline}
            groups_rows += [[label, value, sum(v == value for v in groups.values()),
                             *("-" if o == algo else fmt_diff(split[o, m][value]) for o in compare for m in headline)]
                            for value in sorted(set(groups.values()))]
    if not rows:
        return []
    against = f" (and {rep.baseline}'s cell's)" if len(compare) > 1 else ""
    intro = (f"Per algorithm: the per-example pairings above (the cell minus the base model's{against} of its seed), "
             f"averaged per example over the seeds that have both; mean [{rep.confidence:.0%} interval, Student's t "
             "over the examples], examples higher. For these training runs: a shift one run gives every example alike "
             "is not in the interval (the tables over seeds carry it, for another training seed).")
    lines = ["## Pooled over seeds, paired over the held-out examples", "", intro, "",
             markdown_table(["algorithm", "seeds", *(f"{m}: - {o or 'base'}" for o in compare for m in headline)],
                            rows)]
    found = [f"{m} {min(v) * resolved_by(1.0, level=rep.confidence):.3f}"
             + (f"-{max(v) * resolved_by(1.0, level=rep.confidence):.3f}" if max(v) > min(v) else "")
             for m, v in stderrs.items() if v]
    if found:
        lines += ["", f"Differences from the base these pooled pairings resolve with 80% power (two-sided, "
                  f"{rep.confidence:.0%}, over the algorithms): {', '.join(found)}."]
    if groups_rows:
        lines += ["", f"Split by `{rep.split_by}`: the same pooled pairings within each group.", "",
                  markdown_table(["algorithm", rep.split_by, "examples",
                                  *(f"{m}: - {o or 'base'}" for o in compare for m in headline)], groups_rows)]
    return lines


def render_split(data: StudyData, cells: Sequence[CellRecord], headline: Sequence[str], evaluation: str,
                 compare: Sequence[str | None]) -> list[str]:
    """The per-example pairings of one evaluation again, within each value of the [report] split_by field."""
    name, groups = data.report.split_by, data.example_groups(evaluation)
    if not groups:
        return ["", f"**[report] split_by = {name!r}: no held-out row of this evaluation has that field** (neither "
                "a key of its results.jsonl rows nor of their `info`; a committed record keeps it only if split_by "
                "was set when the record was written), so these pairings are not split. Fix: name a field the "
                "environment writes into its rows (e.g. vf-webshop's target_in_training), then `rlvr analyze`."]
    values = sorted(set(groups.values()))
    rows = []
    for cell in cells:
        split = {(other, m): data.paired_over_examples_split(cell, m, evaluation, other)
                 for other in compare if other != cell.algo for m in headline}
        rows += [[f"{cell.algo}/seed-{cell.seed}", value, sum(v == value for v in groups.values()),
                  *("-" if other == cell.algo else fmt_diff(split[other, m][value])
                    for other in compare for m in headline)] for value in values]
    header = ["cell", name, "examples", *(f"{m}: - {other or 'base'}" for other in compare for m in headline)]
    return ["", f"Split by `{name}` (each example's value in its results.jsonl rows or their `info`; examples: how "
            "many of the held-out examples have the value): the same pairings within each group.", "",
            markdown_table(header, rows)]


def resolution(data: StudyData, cells: Sequence[CellRecord], headline: Sequence[str], evaluation: str) -> str:
    """What the pairings against the base could resolve: the smallest difference a two-sided test at the report's
    level detects with probability 0.8, from each pairing's standard error (rlvr.study.power.resolved_by), as the
    range over the cells."""
    parts = []
    for metric in headline:
        found = [resolved_by(d.stderr, level=data.report.confidence) for c in cells
                 if (d := data.paired_over_examples(c, metric, evaluation, None)).n > 1]
        if found:
            parts.append(f"{metric} {min(found):.3f}" + (f"-{max(found):.3f}" if max(found) > min(found) else ""))
    if not parts:
        return ""
    return (f"Differences from the base these pairings resolve with 80% power (two-sided, {data.report.confidence:.0%}; "
            f"{resolved_by(1.0, level=data.report.confidence):.2f} x the paired s.e., over the cells): "
            f"{', '.join(parts)}. Before a study, "
            "`rlvr.study.power.rollouts_for` gives the rollouts per example a target difference needs.")


def fmt_number(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def render_rerun_spread(data: StudyData, headline: Sequence[str]) -> list[str]:
    """The section that says how far a re-run of a cell's command can land: the same-seed replicates' spread."""
    lines = ["## Re-run spread (same-seed replicates)", ""]
    replicated = [c for c in data.cells if len(data.runs(c)) > 1]
    if not replicated:
        return lines + [
            "No cell was run more than once, so the ± of a cell above is its evaluation's sampling error only. "
            "Rollouts and evaluations are sampled with per-request seeds derived from the cell's seed: on one CPU "
            "machine a re-run of the same command repeats the cell token for token, but on GPUs, with another "
            "thread count or library version (batch-dependent numerics, reduction order: src/rlvr/study/README.md) "
            "its value can move by more than that; `replicates = 2` (or more) in the study TOML runs every cell "
            "again with its seed and measures by how much."]
    lines += [
        f"{len(replicated)} of {len(data.cells)} cells were run more than once with their own seed (the same command "
        "again, in cells/ALGO/seed-S/replicate-K/). Per cell and headline metric: each run's value (the cell's "
        "first), one run's evaluation-sampling s.e. (root mean square over the runs), the s.d. of the runs' values, "
        "and the uncertainty of one run's value that covers a re-run, √(s.e.² + s.d.²) (conservative: the runs' "
        "s.d. already holds part of the evaluation's sampling error). The tables above use each cell's first run; "
        "the across-seed statistics already include this spread, since every seed is a run of its own.", ""]
    header = ["algo", "seed", "runs"]
    for metric in headline:
        header += [f"{metric}: values", "eval s.e.", "re-run s.d.", "± one run"]
    rows = []
    for cell in replicated:
        row = [cell.algo, cell.seed, len(data.runs(cell))]
        for metric in headline:
            spread = data.spread(cell, metric)
            values = ", ".join(f"{r.after[metric].mean:.3f}" for r in data.runs(cell) if metric in r.after)
            row += [values or "n/a", fmt_number(spread.eval_stderr), fmt_number(spread.replicate_sd),
                    fmt_number(spread.combined)]
        rows.append(row)
    lines.append(markdown_table(header, rows))
    for metric in headline:
        pooled = pooled_replicate_sd([[r.after[metric].mean for r in data.runs(c) if metric in r.after]
                                      for c in replicated])
        if pooled.dof:
            lines += ["", f"Pooled over those cells, the re-run s.d. of {metric} is {pooled.sd:.3f} ({pooled.dof} "
                      f"degrees of freedom from {pooled.cells} cells): s_p² = Σ over cells of the runs' squared "
                      "deviations from their cell's mean / Σ (runs - 1)."]
    return lines


def summary_record(data: StudyData) -> dict[str, Any]:
    """The numbers of the report, machine-readable (to compare a re-run with)."""
    def stats(summary: dict[str, Stat]) -> dict[str, dict]:
        return {k: asdict(v) for k, v in summary.items()}

    return {
        "settings": data.settings,
        "base": {f"seed-{s}": stats(v) for s, v in data.bases.items()},
        "cells": [{"algo": c.algo, "seed": c.seed, "after": stats(c.after), "collapse": asdict(data.collapse(c)),
                   "steps": c.steps, "tokens_generated": c.tokens_generated, "wall_s": c.wall_s,
                   "resumed_from": c.resumed_from, "steps_to_target": data.steps_to_target(c),
                   "rerun_spread": {m: asdict(data.spread(c, m)) for m in c.after}} for c in data.cells],
        "replicates": [{"algo": r.algo, "seed": r.seed, "replicate": r.replicate, "after": stats(r.after),
                        "steps": r.steps, "wall_s": r.wall_s} for r in data.replicates],
        "algorithms": {a: {m: asdict(across_seeds(data.values(a, m))) for m in data.metrics} for a in data.algos},
        "paired": {a: {m: asdict(data.paired(a, m)) for m in data.metrics}
                   for a in data.algos if a != data.report.baseline},
        "paired_with_base": {a: {m: asdict(data.paired_with_base(a, m)) for m in data.metrics} for a in data.algos},
        "sets": {name: {
            "base": {f"seed-{s}": stats(v) for s, v in data.base_sets.get(name, {}).items()},
            "algorithms": {a: {m: asdict(across_seeds(data.values(a, m, name))) for m in data.metrics}
                           for a in data.algos},
            "paired": {a: {m: asdict(data.paired(a, m, name)) for m in data.metrics}
                       for a in data.algos if a != data.report.baseline},
            "paired_with_base": {a: {m: asdict(data.paired_with_base(a, m, name)) for m in data.metrics}
                                 for a in data.algos},
        } for name in data.settings["evaluation"].get("sets", {})},
        "paired_over_examples": per_example_record(
            data, lambda c, m, evaluation, other: asdict(data.paired_over_examples(c, m, evaluation, other))),
        **({"paired_over_examples_split": {"split_by": data.report.split_by, "cells": per_example_record(
            data, lambda c, m, evaluation, other: {
                value: asdict(d) for value, d in data.paired_over_examples_split(c, m, evaluation, other).items()})}}
           if data.report.split_by else {}),
        "pooled_over_examples": {  # algorithm -> evaluation -> base or baseline -> metric -> pairing
            a: {evaluation or "main": {other or "base": {
                m: {**asdict(data.pooled_over_examples(a, m, evaluation, other)),
                    "seeds": list(data.seed_pairs(a, m, evaluation, other))} for m in data.headline}
                for other in (None, data.report.baseline) if other != a}
                for evaluation in [MAIN, *data.settings["evaluation"].get("sets", {})]}
            for a in data.algos if len(data.seed_pairs(a, data.headline[0])) > 1},
        "heldout_curve": {
            "steps": data.curve_steps,
            "algorithms": {a: {m: {step: asdict(across_seeds(data.curve_values(a, m, step)))
                                   for step in data.curve_steps} for m in data.headline} for a in data.algos},
            "paired": {a: {m: {step: asdict(data.paired_curve(a, m, step)) for step in data.curve_steps[1:]}
                           for m in data.headline} for a in data.algos if a != data.report.baseline},
        },
        "failed": data.failures,
        "baseline": data.report.baseline,
        "provenance": {**{f"base/seed-{b.seed}": b.provenance for b in data.base_records},
                       **{f"{c.algo}/seed-{c.seed}" + (f"/replicate-{c.replicate}" if c.replicate else ""): c.provenance
                          for c in [*data.cells, *data.replicates]}},
        "left": dict(zip(("units", "estimated_s"), remaining(data), strict=True)),
    }


def per_example_record(data: StudyData, pairing: Callable[[CellRecord, str, str, str | None], Any]) -> dict:
    """summary.json's per-example pairings: cell -> evaluation -> base or baseline -> metric -> pairing(cell, metric,
    evaluation, other), for paired_over_examples and its split by the [report] split_by field."""
    return {f"{c.algo}/seed-{c.seed}": {
        evaluation or "main": {other or "base": {m: pairing(c, m, evaluation, other) for m in means}
                               for other in (None, data.report.baseline) if other != c.algo}
        for evaluation, means in c.examples.items()} for c in data.cells if c.examples}


# ---------------------------------------------------------------- plots

def save_figure(fig, path: Path) -> Path:
    """Write a PNG atomically (a temporary sibling renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()
    return path


def _grid(n: int, title: str):
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, list(axes.flat[:n])


def plot_evaluation(data: StudyData, path: Path) -> Path:
    """Per metric: base model and each algorithm, mean ± s.e. across seeds, with each seed's value as a dot."""
    labels = ["base", *data.algos]
    fig, axes = _grid(len(data.metrics), "held-out evaluation: mean ± s.e. across seeds (dots: seeds)")
    for ax, metric in zip(axes, data.metrics, strict=True):
        per_label = [data.base_values(metric), *(data.values(a, metric) for a in data.algos)]
        for x, values in enumerate(per_label):
            stat = across_seeds(values)
            ax.bar(x, stat.mean, yerr=stat.stderr if stat.n > 1 else None, capsize=3, alpha=0.6,
                   color="grey" if x == 0 else f"C{x - 1}")
            ax.scatter([x] * len(values), list(values.values()), color="k", s=10, zorder=3)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
        ax.set_title(metric, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_paired(data: StudyData, path: Path) -> Path | None:
    """Per metric: each algorithm minus the baseline, mean with its t interval, and each seed's difference."""
    others = [a for a in data.algos if a != data.report.baseline]
    if not others:
        return None
    fig, axes = _grid(len(data.metrics), f"paired differences vs {data.report.baseline} "
                                         f"({data.report.confidence:.0%} t interval; dots: seeds)")
    base = {m: data.values(data.report.baseline, m) for m in data.metrics}
    for ax, metric in zip(axes, data.metrics, strict=True):
        for y, algo in enumerate(others):
            diff = data.paired(algo, metric)
            if diff.n > 1:
                ax.errorbar(diff.mean, y, xerr=[[diff.mean - diff.low], [diff.high - diff.mean]], fmt="o",
                            color=f"C{y}", capsize=4)
            values = data.values(algo, metric)
            dots = [values[s] - base[metric][s] for s in values if s in base[metric]]
            ax.scatter(dots, [y] * len(dots), color="k", s=10, zorder=3)
        ax.axvline(0, color="grey", lw=1)
        ax.set_yticks(range(len(others)), others, fontsize="small")
        ax.set_title(metric, fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_training(data: StudyData, path: Path) -> Path | None:
    """Per rollout statistic of the training batches: each algorithm's mean across seeds, band = ± s.e."""
    keys: list[str] = []
    for cell in data.cells:
        keys += [k for k in cell.curves if k not in keys]
    if not keys:
        return None
    fig, axes = _grid(len(keys), "training batches: mean across seeds (band: ± s.e.)")
    for ax, key in zip(axes, keys, strict=True):
        for i, algo in enumerate(data.algos):
            band = mean_band([c.curves[key] for c in data.cells if c.algo == algo and key in c.curves])
            if not band:
                continue
            steps = [p.step for p in band]
            mean = [p.mean for p in band]
            err = [p.stderr if p.n > 1 else 0.0 for p in band]
            ax.plot(steps, mean, marker=".", color=f"C{i}", label=algo)
            ax.fill_between(steps, [m - e for m, e in zip(mean, err, strict=True)],
                            [m + e for m, e in zip(mean, err, strict=True)], color=f"C{i}", alpha=0.2)
        ax.set_title(key, fontsize="medium")
        ax.set_xlabel("step", fontsize="small")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_heldout_curve(data: StudyData, path: Path) -> Path | None:
    """Per headline metric: each algorithm's held-out mean across seeds at the curve's steps (step 0: the base
    model), with ± s.e. bars; None without curve points."""
    steps = data.curve_steps
    if not steps:
        return None
    metrics = data.headline
    fig, axes = _grid(len(metrics), "held-out learning curve (± s.e. across seeds)")
    for ax, metric in zip(axes, metrics, strict=True):
        for i, algo in enumerate(data.algos):
            points = [(step, across_seeds(data.curve_values(algo, metric, step))) for step in steps]
            points = [(step, stat) for step, stat in points if stat.n]
            ax.errorbar([p for p, _ in points], [stat.mean for _, stat in points],
                        yerr=[stat.stderr if stat.n > 1 else 0.0 for _, stat in points], marker="o", capsize=3,
                        color=f"C{i}", label=algo)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel("step", fontsize="small")
        ax.set_xticks(steps)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return save_figure(fig, path)


def write_report(root: Path) -> Path:
    """report.md, summary.json and plots/ from what the study directory holds; returns report.md."""
    layout = StudyLayout(Path(root))
    data = load_study(layout.root)
    if not data.cells and not data.bases:
        raise FileNotFoundError(f"study {layout.root} has no finished evaluation yet: run `rlvr study` on it")
    plots = [plot_evaluation(data, layout.plots / "evaluation.png"),
             plot_paired(data, layout.plots / "paired_differences.png"),
             plot_training(data, layout.plots / "training_curves.png"),
             plot_heldout_curve(data, layout.plots / "heldout_curve.png")]
    plots = [p for p in plots if p is not None]
    atomic_write_json(layout.summary, summary_record(data))
    return atomic_write_text(layout.report, render_markdown(data, plots, layout.root))
