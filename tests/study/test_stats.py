"""The study's statistics on hand-computed cases and properties: paired t intervals, collapse detection on
synthetic training curves, the mean curve with its band."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rlvr.evaluation import Stat
from rlvr.study.stats import (
    across_seeds,
    detect_collapse,
    example_groups,
    example_means,
    is_constant,
    mean_band,
    paired_by_group,
    paired_difference,
    pooled_replicate_sd,
    rerun_spread,
    seed_averaged,
    t_quantile,
)


def test_t_quantiles_match_the_table():
    # Student's t table, two-sided 95%: 12.706 (1 dof), 4.303 (2), 2.776 (4); 90% with 2 dof: 2.920
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    assert t_quantile(0.95, 2) == pytest.approx(2.920, abs=1e-3)


def test_paired_difference_by_hand():
    # d = (0.5-0.4, 0.6-0.3, 0.45-0.25) = (0.1, 0.3, 0.2): mean 0.2, s_d = 0.1, s.e. = 0.1/sqrt(3) = 0.057735,
    # half width = 4.302653 * 0.057735 = 0.248414
    treatment = {0: 0.5, 1: 0.6, 2: 0.45}
    baseline = {0: 0.4, 1: 0.3, 2: 0.25}
    diff = paired_difference(treatment, baseline)
    assert diff.n == 3 and diff.wins == 3 and diff.losses == 0
    assert diff.mean == pytest.approx(0.2)
    assert diff.stderr == pytest.approx(0.1 / math.sqrt(3))
    assert diff.low == pytest.approx(0.2 - 0.248414, abs=1e-6)
    assert diff.high == pytest.approx(0.2 + 0.248414, abs=1e-6)
    assert not diff.excludes_zero  # 3 of 3 wins, and still not separated at 2 degrees of freedom


def test_pairing_ignores_unpaired_seeds_and_counts_ties():
    diff = paired_difference({0: 1.0, 1: 0.5, 2: 0.7, 5: 9.0}, {0: 0.0, 1: 0.5, 2: 0.3, 7: -9.0}, level=0.9)
    # d = (1.0, 0.0, 0.4): mean 0.466667, s_d = sqrt(((0.533333)^2 + (0.466667)^2 + (0.066667)^2) / 2) = 0.503322
    assert diff.n == 3 and (diff.wins, diff.losses) == (2, 0)
    assert diff.mean == pytest.approx(0.466667, abs=1e-6)
    assert diff.stderr == pytest.approx(0.503322 / math.sqrt(3), abs=1e-6)
    assert diff.high - diff.mean == pytest.approx(2.919986 * 0.503322 / math.sqrt(3), abs=1e-5)


def test_example_means_average_each_examples_rollouts_and_pair_by_example_id():
    rows = [{"example_id": 3, "won": 1.0}, {"example_id": "3", "won": 0.0}, {"example_id": 7, "won": 1},
            {"example_id": 7, "won": 1.0}, {"example_id": 8, "won": True}, {"example_id": 9}]
    # ids as strings (results.jsonl writes them either way); booleans and missing values are not numbers here
    assert example_means(rows, "won") == {"3": 0.5, "7": 1.0}
    assert example_means(rows, "reward") == {}
    base = example_means([{"example_id": 3, "won": 0.0}, {"example_id": 7, "won": 0.5}], "won")
    diff = paired_difference(example_means(rows, "won"), base)
    assert (diff.n, diff.mean, diff.wins) == (2, 0.5, 2)


def test_examples_split_by_a_field_of_their_rows_or_their_info():
    rows = [{"example_id": 1, "info": {"seen": True}}, {"example_id": 2, "info": {"seen": False}},
            {"example_id": 3, "seen": "yes", "info": {"seen": False}}, {"example_id": 4, "info": {}},
            {"example_id": 5}]
    # a key of the row wins over one of its info; examples without the field are left out
    assert example_groups(rows, "seen") == {"1": "True", "2": "False", "3": "yes"}
    assert example_groups(rows, "absent") == {}
    treatment, base = {"1": 1.0, "2": 0.0, "3": 1.0, "4": 1.0}, {"1": 0.0, "2": 0.5, "3": 0.5, "4": 0.0}
    split = paired_by_group(treatment, base, example_groups(rows, "seen"))
    assert list(split) == ["False", "True", "yes"]  # example 4 has no group: in none of them
    assert [(d.n, d.mean) for d in split.values()] == [(1, -0.5), (1, 1.0), (1, 0.5)]


def test_seed_averaged_pools_each_example_over_the_seeds_on_the_examples_every_seed_has():
    pairs = {3: ({"a": 1.0, "b": 0.5, "c": 1.0}, {"a": 0.0, "b": 0.5, "c": 0.0}),
             4: ({"a": 0.5, "b": 1.0}, {"a": 0.5, "b": 0.0, "d": 1.0})}
    # "c" and "d" miss a side in one seed: left out; a: (1 + 0.5) / 2 vs (0 + 0.5) / 2, b: (0.5 + 1) / 2 vs (0.5 + 0) / 2
    assert seed_averaged(pairs) == ({"a": 0.75, "b": 0.75}, {"a": 0.25, "b": 0.25})
    assert seed_averaged({}) == ({}, {})
    diff = paired_difference(*seed_averaged(pairs))
    assert (diff.n, diff.mean, diff.wins) == (2, 0.5, 2)


@given(st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=1, max_size=4),
       st.lists(st.lists(st.floats(0, 1), min_size=3, max_size=3), min_size=4, max_size=4))
def test_seed_averaged_difference_is_the_mean_of_the_seeds_differences(treatments, baselines):
    """With every example in every seed, each pooled difference is the mean over the seeds of that example's
    per-seed difference; one seed pools to itself."""
    pairs = {seed: (dict(zip("xyz", t, strict=True)), dict(zip("xyz", baselines[seed], strict=True)))
             for seed, t in enumerate(treatments)}
    pooled_t, pooled_b = seed_averaged(pairs)
    for example in "xyz":
        by_seed = [t[example] - b[example] for t, b in pairs.values()]
        assert pooled_t[example] - pooled_b[example] == pytest.approx(math.fsum(by_seed) / len(by_seed), abs=1e-12)
    if len(pairs) == 1:
        assert (pooled_t, pooled_b) == pairs[0]


def test_one_or_no_shared_seed_gives_no_interval():
    one = paired_difference({0: 0.7}, {0: 0.2, 1: 0.1})
    assert one.n == 1 and one.mean == pytest.approx(0.5) and math.isnan(one.low) and math.isnan(one.high)
    none = paired_difference({0: 0.7}, {1: 0.1})
    assert none.n == 0 and math.isnan(none.mean)
    with pytest.raises(ValueError, match="level"):
        paired_difference({0: 1.0}, {0: 1.0}, level=95)


values = st.floats(-10, 10, allow_nan=False)


@given(st.lists(st.tuples(values, values), min_size=2, max_size=8), st.floats(-5, 5), st.floats(0.5, 0.99))
def test_paired_interval_properties(pairs, shift, level):
    treatment = {i: a for i, (a, _) in enumerate(pairs)}
    baseline = {i: b for i, (_, b) in enumerate(pairs)}
    diff = paired_difference(treatment, baseline, level)
    assert diff.low <= diff.mean + 1e-9 and diff.mean <= diff.high + 1e-9
    # a shift common to both algorithms on every seed cancels in the pairing
    shifted = paired_difference({k: v + shift for k, v in treatment.items()},
                                {k: v + shift for k, v in baseline.items()}, level)
    assert shifted.mean == pytest.approx(diff.mean, abs=1e-6)
    assert shifted.high - shifted.low == pytest.approx(diff.high - diff.low, abs=1e-6)
    # swapping the roles mirrors the interval
    swapped = paired_difference(baseline, treatment, level)
    assert swapped.mean == pytest.approx(-diff.mean, abs=1e-9)
    assert swapped.low == pytest.approx(-diff.high, abs=1e-9) and (swapped.wins, swapped.losses) == (
        diff.losses, diff.wins)


@given(st.lists(values, min_size=2, max_size=8, unique=True))
def test_a_higher_level_gives_a_wider_interval(diffs):
    assume(max(diffs) - min(diffs) > 1e-6)
    baseline = dict.fromkeys(range(len(diffs)), 0.0)
    treatment = dict(enumerate(diffs))
    narrow, wide = paired_difference(treatment, baseline, 0.8), paired_difference(treatment, baseline, 0.95)
    assert wide.high - wide.low > narrow.high - narrow.low


# ---------------------------------------------------------------- collapse

def test_collapse_when_the_last_window_steps_have_one_reward_value():
    # GRPO-OR's collapse in the issue: every rollout scored 0.400 from step 4 on
    collapse = detect_collapse([1, 2, 3, 4, 5, 6], [0.3, 0.2, 0.1, 0.0, 0.0, 0.0], window=3)
    assert collapse.collapsed is True and collapse.since_step == 4 and collapse.constant_steps == 3


def test_no_collapse_when_a_recent_step_has_spread():
    recovered = detect_collapse([1, 2, 3, 4, 5, 6], [0.0, 0.0, 0.0, 0.0, 0.0, 0.2], window=3)
    assert recovered.collapsed is False and recovered.constant_steps == 0 and recovered.since_step is None
    short_run = detect_collapse([1, 2, 3, 4, 5, 6], [0.3, 0.2, 0.1, 0.2, 0.0, 0.0], window=3)
    assert short_run.collapsed is False and short_run.constant_steps == 2 and short_run.since_step == 5


def test_collapse_tolerance_order_and_too_few_steps():
    # float noise below tol counts as constant; steps may come in any order
    assert detect_collapse([3, 1, 2], [1e-9, 0.5, 0.0], window=2, tol=1e-6).collapsed is True
    assert detect_collapse([1, 2, 3], [0.5, 1e-3, 0.0], window=2, tol=1e-6).collapsed is False
    undetermined = detect_collapse([1, 2], [0.0, 0.0], window=3)
    assert undetermined.collapsed is None and undetermined.constant_steps == 2
    assert detect_collapse([1, 2, 3], [0.0, math.nan, 0.0], window=2).collapsed is False  # nan is not constant
    with pytest.raises(ValueError, match="window"):
        detect_collapse([1], [0.0], window=0)
    with pytest.raises(ValueError, match="std"):
        detect_collapse([1, 2], [0.0], window=1)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=20), st.integers(1, 6))
def test_collapse_matches_its_definition(stds, window):
    steps = list(range(1, len(stds) + 1))
    collapse = detect_collapse(steps, stds, window)
    if len(stds) < window:
        assert collapse.collapsed is None
    else:
        assert collapse.collapsed == all(s <= 1e-6 for s in stds[-window:])
    trailing = len(stds) - max((i + 1 for i, s in enumerate(stds) if s > 1e-6), default=0)
    assert collapse.constant_steps == trailing


def test_constant_evaluation():
    assert is_constant(Stat(0.4, 0.0, 48))
    assert not is_constant(Stat(0.4, 0.01, 48)) and not is_constant(Stat(0.4, 0.0, 1))


# ---------------------------------------------------------------- curves and seeds

def test_mean_band_over_the_seeds_that_logged_each_step():
    band = mean_band([{1: 0.0, 2: 0.5}, {1: 1.0, 2: 0.5, 3: 0.9}])
    assert [(p.step, p.n) for p in band] == [(1, 2), (2, 2), (3, 1)]
    assert band[0].mean == pytest.approx(0.5) and band[0].stderr == pytest.approx(0.5)  # std 0.7071 / sqrt(2)
    assert band[1].stderr == 0.0 and band[2].mean == pytest.approx(0.9)


def test_across_seeds():
    stat = across_seeds({2: 0.521, 0: 0.0, 1: 0.5})  # the GRPO-OR exact match row
    assert stat.n == 3 and stat.mean == pytest.approx(0.340333, abs=1e-6)
    assert stat.stderr == pytest.approx(0.295 / math.sqrt(3), abs=1e-3)


def test_rerun_spread_by_hand():
    # means 0.30, 0.36, 0.27: mean 0.31, s.d. sqrt((0.01² + 0.05² + 0.04²) / 2) = sqrt(0.0021) = 0.045826;
    # eval s.e. sqrt((0.03² + 0.04² + 0.05²) / 3) = sqrt(0.0016667) = 0.040825; one run: sqrt(0.0016667 + 0.0021)
    # = 0.061373
    spread = rerun_spread([Stat(0.30, 0.03, 100), Stat(0.36, 0.04, 100), Stat(0.27, 0.05, 100)])
    assert spread.runs == 3 and spread.mean == pytest.approx(0.31)
    assert spread.replicate_sd == pytest.approx(0.045826, abs=1e-6)
    assert spread.eval_stderr == pytest.approx(0.040825, abs=1e-6)
    assert spread.combined == pytest.approx(0.061373, abs=1e-6)


def test_one_run_measures_no_rerun_spread():
    one = rerun_spread([Stat(0.5, 0.04, 50), Stat(math.nan, math.nan, 0)])  # an empty evaluation counts for nothing
    assert one.runs == 1 and one.eval_stderr == pytest.approx(0.04)
    assert math.isnan(one.replicate_sd) and math.isnan(one.combined)
    assert rerun_spread([]).runs == 0


finite = st.floats(min_value=-10, max_value=10, allow_nan=False)


@given(st.lists(st.tuples(finite, st.floats(min_value=0, max_value=1)), min_size=2, max_size=8), finite)
def test_rerun_spread_properties(runs, shift):
    stats = [Stat(m, se, 10) for m, se in runs]
    spread = rerun_spread(stats)
    # one run's uncertainty is at least each of its two parts, and at most their sum
    assert spread.combined >= max(spread.eval_stderr, spread.replicate_sd) - 1e-12
    assert spread.combined <= spread.eval_stderr + spread.replicate_sd + 1e-12
    # the order of the runs does not matter, and moving every run by the same amount moves only the mean
    assert rerun_spread(stats[::-1]).replicate_sd == pytest.approx(spread.replicate_sd, abs=1e-9)
    moved = rerun_spread([Stat(s.mean + shift, s.stderr, s.n) for s in stats])
    assert moved.replicate_sd == pytest.approx(spread.replicate_sd, abs=1e-6)
    assert moved.mean == pytest.approx(spread.mean + shift, abs=1e-9)


def test_pooled_replicate_sd_by_hand():
    # cells (0.5, 0.4, 0.3) and (0.333, 0.433); a single run adds nothing: squares 0.02 + 0.005 over 2 + 1 dof
    pooled = pooled_replicate_sd([[0.5, 0.4, 0.3], [0.333, 0.433], [0.9]])
    assert (pooled.dof, pooled.cells) == (3, 2) and pooled.sd == pytest.approx(math.sqrt(0.025 / 3))
    assert math.isnan(pooled_replicate_sd([[0.1], []]).sd)


@given(st.lists(finite, min_size=2, max_size=8))
def test_pooling_one_cell_is_its_own_spread(values):
    pooled = pooled_replicate_sd([values])
    assert pooled.dof == len(values) - 1
    assert pooled.sd == pytest.approx(rerun_spread([Stat(v, 0.0, 1) for v in values]).replicate_sd, abs=1e-9)
