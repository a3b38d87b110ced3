"""The study's statistics, as pure functions: paired differences with a t interval, collapse of a training run,
and the mean curve of several seeds with its band.

The unit of replication is the seed: one cell (algorithm, seed) is one training run, and its evaluation mean is one
observation. Cells of the same seed share their data order and initial weights (the seeded dataset shuffle and
model), so two algorithms are compared seed by seed (paired), which removes the seed-to-seed spread that both share.
Within one seed, two evaluations of the same held-out examples pair example by example (`example_means`); that
interval covers the evaluation's sampling and the choice of examples, not a re-run with another seed.
Same-seed re-runs of a cell (replicates) measure what one run's value does not carry in its evaluation s.e.: the
nondeterminism left after seeding (`rerun_spread`, `pooled_replicate_sd`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rlvr.evaluation import Stat, mean_stderr


@dataclass(frozen=True)
class PairedDifference:
    """treatment - baseline, unit by unit (seeds, or held-out examples), with a two-sided t interval on its mean."""

    mean: float
    stderr: float  # sample std of the per-seed differences / sqrt(n)
    low: float
    high: float
    n: int  # units (seeds, examples) with both values
    level: float  # e.g. 0.95
    wins: int  # units where the treatment is higher
    losses: int  # units where it is lower (the rest are ties)

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def t_quantile(probability: float, dof: int) -> float:
    """Student's t quantile (scipy, which ships with vLLM and scikit-learn; imported on use)."""
    from scipy.stats import t

    return float(t.ppf(probability, dof))


def paired_difference(treatment: Mapping[Hashable, float], baseline: Mapping[Hashable, float],
                      level: float = 0.95) -> PairedDifference:
    """Mean of d_s = treatment_s - baseline_s over the units s both have (seeds; or held-out examples, see
    `example_means`), with Student's paired t interval

        d̄ ± t_{(1+level)/2, n-1} · s_d / √n,    s_d² = Σ (d_s - d̄)² / (n - 1)

    (Student 1908; the interval of the paired t-test). It assumes the d_s are independent and roughly normal; with
    n = 3 seeds it has 2 degrees of freedom and t_{0.975, 2} = 4.30, so the interval is wide, honestly: a bootstrap
    over 3 seeds has only 10 distinct resamples and its percentile interval is too narrow to trust. With one seed
    there is no interval (nan). Over a held-out set's examples (24-48 here) the t interval is approximate when the
    metric is a rare 0/1 outcome (most differences 0): read it with the counts of examples higher and lower."""
    if not 0 < level < 1:
        raise ValueError(f"level={level} must be in (0, 1), e.g. 0.95")
    units = sorted(set(treatment) & set(baseline), key=str)
    diffs = [float(treatment[u]) - float(baseline[u]) for u in units]
    n = len(diffs)
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    if n == 0:
        return PairedDifference(math.nan, math.nan, math.nan, math.nan, 0, level, 0, 0)
    mean = math.fsum(diffs) / n
    if n == 1:
        return PairedDifference(mean, math.nan, math.nan, math.nan, 1, level, wins, losses)
    stderr = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)) / math.sqrt(n)
    half = t_quantile((1 + level) / 2, n - 1) * stderr
    return PairedDifference(mean, stderr, mean - half, mean + half, n, level, wins, losses)


def example_means(rows: Iterable[Mapping], metric: str) -> dict[str, float]:
    """Held-out example id -> the mean of `metric` over that example's rollouts, from an evaluation's rows
    (results.jsonl): the per-example values that `paired_difference` pairs between two evaluations of the same
    examples (the same sampling seeds per example and rollout, `rlvr.seeding`)."""
    per_example: dict[str, list[float]] = {}
    for row in rows:
        value = row.get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool):
            per_example.setdefault(str(row["example_id"]), []).append(float(value))
    return {example: math.fsum(values) / len(values) for example, values in per_example.items()}


def seed_averaged(pairs: Mapping[int, tuple[Mapping[str, float], Mapping[str, float]]]
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """seed -> (treatment's, baseline's per-example means) to the per-example means over the seeds, on the examples
    both sides of every seed evaluated: paired over examples (`paired_difference`), their difference is

        d̄_e = (1/S) Σ_s (t_{s,e} - b_{s,e}),

    one value per held-out example pooled over S training runs. Its t interval over the examples covers the
    evaluation's sampling, the choice of examples and how each run moved each example; a shift one run gives every
    example alike is common to all d̄_e and so is not in it (that is the across-seed pairing's, with S - 1 degrees of
    freedom): the interval holds for these S runs, with S times the rollouts of one."""
    if not pairs:
        return {}, {}
    shared = set.intersection(*(set(treatment) & set(baseline) for treatment, baseline in pairs.values()))

    def mean_over_seeds(side: int) -> dict[str, float]:
        return {e: math.fsum(float(pair[side][e]) for pair in pairs.values()) / len(pairs) for e in shared}

    return mean_over_seeds(0), mean_over_seeds(1)


def example_groups(rows: Iterable[Mapping], name: str) -> dict[str, str]:
    """Held-out example id -> its value of field `name` as text (a key of its rows, or else of their `info`, where
    environments keep what they know of an example, e.g. vf-webshop's target_in_training); examples without the
    field are left out."""
    found = {}
    for row in rows:
        info = row.get("info") if isinstance(row.get("info"), Mapping) else {}
        if name in row or name in info:
            found[str(row["example_id"])] = str(row[name] if name in row else info[name])
    return found


def paired_by_group(treatment: Mapping[str, float], baseline: Mapping[str, float], groups: Mapping[str, str],
                    level: float = 0.95) -> dict[str, PairedDifference]:
    """`paired_difference` within each group of examples (`example_groups`): group value -> the pairing over the
    examples of that group only, in the values' sorted order; examples without a group are left out."""
    return {group: paired_difference({e: v for e, v in treatment.items() if groups.get(e) == group}, baseline, level)
            for group in sorted(set(groups.values()))}


@dataclass(frozen=True)
class Collapse:
    """Whether a training run's rewards became constant (see `detect_collapse`)."""

    collapsed: bool | None  # None: fewer logged steps than the window, nothing to judge
    constant_steps: int  # trailing steps whose batch had one reward value
    since_step: int | None  # first of those steps (None when there are none)
    window: int


def detect_collapse(steps: Sequence[int], reward_std: Sequence[float], window: int,
                    tol: float = 1e-6) -> Collapse:
    """A run has collapsed when, in each of its last `window` logged steps, every rollout of the step's batch got
    the same outcome reward: the within-batch std of the reward (the trainer's `reward/std`) is <= `tol`.

    Why this definition: a batch with one reward value has zero advantage in every group for outcome-only credit
    (GRPO), so the policy gets no gradient and keeps producing that batch. Turn-level credit can still move when
    the turn rewards differ, which is why the run is judged on the outcome reward and over several steps. With
    fewer than `window` steps logged the answer is None (undetermined), never a guess."""
    if window < 1:
        raise ValueError(f"collapse window={window} must be >= 1 steps")
    if len(steps) != len(reward_std):
        raise ValueError(f"{len(steps)} steps but {len(reward_std)} reward std values")
    order = sorted(range(len(steps)), key=lambda i: steps[i])
    constant = 0
    for i in reversed(order):
        if reward_std[i] > tol or math.isnan(reward_std[i]):
            break
        constant += 1
    since = steps[order[len(order) - constant]] if constant else None
    collapsed = None if len(steps) < window else constant >= window
    return Collapse(collapsed, constant, since, window)


def first_step_reaching(curve: Mapping[int, float], value: float) -> int | None:
    """The first training step whose batch mean (a training curve: step -> mean over the step's rollouts) is at
    least `value`, or None if no logged step got there: the suite's "updates to reach 90% of the optimum"."""
    return next((step for step in sorted(curve) if curve[step] >= value), None)


def is_constant(stat: Stat) -> bool:
    """An evaluation in which every rollout got the same value (zero spread over more than one rollout)."""
    return stat.n > 1 and stat.stderr == 0


@dataclass(frozen=True)
class BandPoint:
    step: int
    mean: float
    stderr: float  # across the seeds that logged this step
    n: int


def mean_band(curves: Sequence[Mapping[int, float]]) -> list[BandPoint]:
    """Per step, the mean across seeds' curves (step -> value) and its standard error, over the curves that have
    the step (a cell still training contributes its steps so far)."""
    steps = sorted({s for curve in curves for s in curve})
    points = []
    for step in steps:
        stat = mean_stderr([curve[step] for curve in curves if step in curve])
        points.append(BandPoint(step, stat.mean, stat.stderr, stat.n))
    return points


def across_seeds(values: Mapping[int, float]) -> Stat:
    """Mean and standard error (sample std / √n) of one number per seed."""
    return mean_stderr([values[s] for s in sorted(values)])


@dataclass(frozen=True)
class RerunSpread:
    """How much a cell's evaluation moves when the same command runs again: R runs of one (algorithm, seed),
    each trained and evaluated from scratch with the same seed (the study's `replicates`)."""

    mean: float  # mean over the runs of their evaluation means
    eval_stderr: float  # one run's evaluation-sampling standard error: root mean square of the runs' s.e.
    replicate_sd: float  # sample std (n - 1) of the runs' means; nan with one run
    combined: float  # sqrt(eval_stderr² + replicate_sd²): one run's uncertainty, a re-run included; nan with one run
    runs: int


def rerun_spread(runs: Sequence[Stat]) -> RerunSpread:
    """The spread of same-seed re-runs of one cell, from each run's evaluation (mean, s.e.) of one metric.

    Model: run r's value is m_r = μ + T_r + E_r, with T_r what the run's training made of the seed (the
    nondeterminism left after seeding: server batching numerics, thread timing; variance σ_T²) and E_r its
    evaluation's sampling error (variance σ_E², estimated by the run's s.e.²). One run's value deviates from μ with
    variance σ_T² + σ_E², which `combined`² estimates: E[replicate_sd²] = σ_T² + (1 - ρ) σ_E² (ρ: the correlation of
    two runs' evaluation errors, which share their sampling seeds) is at most σ_T² + σ_E², and adding eval_stderr²
    counts the evaluation's part at least once, at most twice: conservative by at most σ_E². With one run nothing
    measures σ_T, and the spread is nan rather than the evaluation's s.e. alone."""
    runs = [r for r in runs if r.n > 0 and not math.isnan(r.mean)]
    if not runs:
        return RerunSpread(math.nan, math.nan, math.nan, math.nan, 0)
    means = [r.mean for r in runs]
    mean = math.fsum(means) / len(means)
    eval_stderr = math.sqrt(math.fsum(r.stderr ** 2 for r in runs) / len(runs))
    if len(runs) == 1:
        return RerunSpread(mean, eval_stderr, math.nan, math.nan, 1)
    replicate_sd = math.sqrt(math.fsum((m - mean) ** 2 for m in means) / (len(means) - 1))
    return RerunSpread(mean, eval_stderr, replicate_sd, math.hypot(eval_stderr, replicate_sd), len(runs))


@dataclass(frozen=True)
class PooledSpread:
    sd: float  # nan without a cell of two or more runs
    dof: int  # Σ (runs of a cell - 1)
    cells: int  # cells with two or more runs


def pooled_replicate_sd(cells: Sequence[Sequence[float]]) -> PooledSpread:
    """The pooled standard deviation of same-seed re-runs over several cells (each a list of its runs' means),
    assuming one σ for all: s_p² = Σ_c Σ_r (m_cr - m̄_c)² / Σ_c (R_c - 1) (the pooled variance of a one-way
    layout, e.g. NIST/SEMATECH e-Handbook of Statistical Methods, 7.4.3). A cell with one run adds nothing."""
    groups = [[float(v) for v in c] for c in cells if len(c) > 1]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return PooledSpread(math.nan, 0, 0)
    squares = math.fsum((v - math.fsum(g) / len(g)) ** 2 for g in groups for v in g)
    return PooledSpread(math.sqrt(squares / dof), dof, len(groups))
