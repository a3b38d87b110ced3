"""Hypothesis properties of the estimators."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.credit import ESTIMATORS, compute_advantages

# Rewards on a 1/8 grid keep std-scale arguments exact enough (no denormal spreads); groups of 1-6 rollouts.
reward = st.integers(-40, 40).map(lambda x: x / 8)


@st.composite
def groups(draw, min_turns=0, same_length=False):
    n = draw(st.integers(1, 6))
    fixed = draw(st.integers(max(min_turns, 1), 4))
    turns = []
    for _ in range(n):
        k = fixed if same_length else draw(st.integers(min_turns, 4))
        turns.append(draw(st.lists(reward, min_size=k, max_size=k)))
    outcome = draw(st.lists(reward, min_size=n, max_size=n))
    first = [draw(st.one_of(st.none(), st.integers(0, len(t) - 1))) if t else None for t in turns]
    return turns, outcome, first


def keys_for(turns, draw_key):
    return [[draw_key(i, k) for k in range(len(t))] for i, t in enumerate(turns)]


def advantages(estimator, turns, outcome, first, **params):
    """compute_advantages, with anchor-state keys (the turn index mod 2) for the estimators that need them."""
    if ESTIMATORS[estimator].anchor_states:
        params["state_keys"] = keys_for(turns, lambda i, k: k % 2)
    return compute_advantages(estimator, turns, outcome, first, **params)


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(sorted(ESTIMATORS)), st.sampled_from(["std", "none"]))
def test_outputs_are_finite_and_shaped_like_the_turns(group, estimator, norm):
    turns, outcome, first = group
    adv = advantages(estimator, turns, outcome, first, norm=norm)
    assert [len(a) for a in adv] == [len(t) for t in turns]
    assert all(math.isfinite(x) for row in adv for x in row)


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1), st.sampled_from(["grpo", "grpo_mr"]), st.sampled_from(["std", "none"]))
def test_trajectory_level_estimators_have_zero_group_mean(group, estimator, norm):
    turns, outcome, first = group
    adv = compute_advantages(estimator, turns, outcome, first, norm=norm)
    assert abs(math.fsum(a[0] for a in adv)) < 1e-9


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1, same_length=True), st.sampled_from(["std", "none"]))
def test_turn_return_has_zero_mean_at_every_turn_index(group, norm):
    turns, outcome, first = group
    adv = compute_advantages("turn_return", turns, outcome, first, norm=norm, gamma=0.9)
    for k in range(len(turns[0])):
        assert abs(math.fsum(a[k] for a in adv)) < 1e-9


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(["grpo", "grpo_mr", "mt_grpo", "ms_po", "mt_grpo_k"]), reward)
def test_shifting_every_outcome_changes_nothing(group, estimator, shift):
    turns, outcome, first = group
    before = compute_advantages(estimator, turns, outcome, first)
    after = compute_advantages(estimator, turns, [o + shift for o in outcome], first)
    for b, a in zip(before, after, strict=True):
        assert all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(b, a, strict=True))


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1, same_length=True), reward)
def test_turn_return_is_shift_invariant_when_rollouts_have_equal_length(group, shift):
    turns, outcome, first = group
    before = compute_advantages("turn_return", turns, outcome, first, gamma=0.7)
    after = compute_advantages("turn_return", turns, [o + shift for o in outcome], first, gamma=0.7)
    for b, a in zip(before, after, strict=True):
        assert all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(b, a, strict=True))


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(sorted(ESTIMATORS)), st.sampled_from([0.25, 2.0, 3.0, 10.0]))
def test_std_normalisation_is_scale_invariant(group, estimator, scale):
    # exactly so with eps = 0 (with the default 1e-4 only approximately: eps does not scale with the rewards)
    turns, outcome, first = group
    before = advantages(estimator, turns, outcome, first, eps=0.0)
    after = advantages(
        estimator, [[r * scale for r in t] for t in turns], [o * scale for o in outcome], first, eps=0.0
    )
    for b, a in zip(before, after, strict=True):
        assert all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(b, a, strict=True))


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1))
def test_mt_grpo_with_coef_zero_is_the_outcome_advantage_once_a_tool_result_came(group):
    turns, outcome, first = group
    mt = compute_advantages("mt_grpo", turns, outcome, first, coef=0.0)
    or_ = compute_advantages("grpo", turns, outcome, first)
    for i, t in enumerate(first):
        if t is not None:
            assert mt[i] == or_[i]


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1), reward)
def test_ms_po_with_gamma_zero_credits_turns_up_to_the_result_without_the_outcome(group, bump):
    # gamma = 0: cumulative = R_turn, so changing an outcome moves only the turns after the first result
    turns, outcome, first = group
    before = compute_advantages("ms_po", turns, outcome, first, gamma=0.0)
    after = compute_advantages("ms_po", turns, [outcome[0] + bump, *outcome[1:]], first, gamma=0.0)
    for i, t in enumerate(first):
        early = range(len(turns[i])) if t is None else range(t + 1)
        assert all(before[i][k] == after[i][k] for k in early)


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1), reward)
def test_mt_grpo_k_with_alpha_zero_keeps_the_outcome_on_the_last_turn_only(group, bump):
    turns, outcome, first = group
    before = compute_advantages("mt_grpo_k", turns, outcome, first, alpha=0.0)
    after = compute_advantages("mt_grpo_k", turns, [outcome[0] + bump, *outcome[1:]], first, alpha=0.0)
    for b, a in zip(before, after, strict=True):
        assert b[:-1] == a[:-1]


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=2), st.data())
def test_turn_return_with_gamma_zero_couples_only_equal_turn_indices(group, data):
    # gamma = 0: G_k = r_k (+ R_outcome on the last turn); a reward change at index j moves only index j
    turns, outcome, first = group
    i = data.draw(st.sampled_from([i for i, t in enumerate(turns) if t]))
    j = data.draw(st.integers(0, len(turns[i]) - 1))
    bumped = [list(t) for t in turns]
    bumped[i][j] += data.draw(reward)
    before = compute_advantages("turn_return", turns, outcome, first, gamma=0.0)
    after = compute_advantages("turn_return", bumped, outcome, first, gamma=0.0)
    for b, a in zip(before, after, strict=True):
        assert all(b[k] == a[k] for k in range(len(b)) if k != j)


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1), st.floats(0.0, 2.0), st.integers(1, 3))
def test_anchor_grouping_is_finite_and_zero_on_identical_rollouts(group, omega, num_keys):
    turns, outcome, first = group
    keys = keys_for(turns, lambda i, k: (i + k) % num_keys)
    adv = compute_advantages("gigpo", turns, outcome, first, state_keys=keys, omega=omega)
    assert all(math.isfinite(x) for row in adv for x in row)
    # identical rollouts with the turn index as the anchor: every anchor group is constant
    n, length = len(turns), len(turns[0])
    same = compute_advantages(
        "gigpo", [turns[0]] * n, [outcome[0]] * n, [None] * n, state_keys=[list(range(length))] * n
    )
    assert all(x == 0.0 for row in same for x in row)


@settings(max_examples=100, deadline=None)
@given(groups(min_turns=1), st.data(), st.sampled_from(["std", "none"]))
def test_mt_grpo_k_zero_baseline_does_not_depend_on_the_stopping_turn(group, data, norm):
    # verl RFC #7244: with unreached="zero" (alpha = 1) a rollout that takes one more intermediate turn with reward 0,
    # without becoming the group's longest, changes no baseline: every rollout's existing turns keep their advantage.
    turns, outcome, first = group
    longest = max(len(t) for t in turns)
    shorter = [i for i, t in enumerate(turns) if len(t) < longest]
    if not shorter:
        return
    i = data.draw(st.sampled_from(shorter))
    longer = [list(t) for t in turns]
    longer[i].insert(len(longer[i]) - 1, 0.0)
    kw = dict(alpha=1.0, unreached="zero", norm=norm)
    before = compute_advantages("mt_grpo_k", turns, outcome, [None] * len(turns), **kw)
    after = compute_advantages("mt_grpo_k", longer, outcome, [None] * len(turns), **kw)
    # rollout i's turn positions 0..K-1 keep their values (the inserted turn sits where its answer was: both sum the
    # same zero-padded intermediate terms plus A^O); its moved answer turn is a new decision and is not compared
    for b, a in zip(before, after, strict=True):
        assert all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(b, a, strict=False))
