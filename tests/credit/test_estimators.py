"""Hand-computed cases for every estimator (numbers worked out in the comments) and input validation."""

from __future__ import annotations

import math

import pytest

from rlvr.credit import (
    ESTIMATORS,
    batch_whiten,
    compute_advantages,
    expand_to_tokens,
    group_normalize,
    merge_params,
)

S = 1 / (math.sqrt(2) + 1e-4)  # two values 2 apart: mean in the middle, sample std sqrt(2) -> +-1 / (sqrt(2) + 1e-4)


def approx(rows, abs=1e-9):
    return [pytest.approx(r, abs=abs) for r in rows]


# --- normalisation ---


def test_std_normalisation_uses_sample_std_and_adds_eps_to_it():
    # [1, 2, 3, 4]: mean 2.5, sample var (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3, std 1.2909944;
    # the population std (1.1180340) would give -1.3415 for the first value instead of -1.5 / 1.2910944 = -1.161805
    assert group_normalize([1, 2, 3, 4]) == pytest.approx([-1.161805, -0.387268, 0.387268, 1.161805], abs=1e-6)
    assert group_normalize([0, 2]) == pytest.approx([-S, S])
    assert group_normalize([1, 2, 3, 4], norm="none") == [-1.5, -0.5, 0.5, 1.5]


def test_groups_without_spread_give_exact_zeros():
    assert group_normalize([0.7]) == [0.0]
    assert group_normalize([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]
    assert group_normalize([]) == []


def test_std_floor_reproduces_verl_tool_centring_below_1e_4():
    # [0, 1e-5]: sample std 7.07e-6 < 1e-4 -> only centred; without the floor: -5e-6 / (7.07e-6 + 1e-4) = -0.046702
    assert group_normalize([0.0, 1e-5], std_floor=1e-4) == pytest.approx([-5e-6, 5e-6])
    assert group_normalize([0.0, 1e-5])[0] == pytest.approx(-5e-6 / (math.sqrt(5e-11) + 1e-4))


def test_batch_whiten_weights_values_by_token_counts():
    # values 1 (1 token) and 3 (3 tokens): mean 10/4 = 2.5, var (2.25 + 3 * 0.25) / 4 = 0.75, x 4/3 (Bessel) = 1
    assert batch_whiten([1.0, 3.0], [1, 3]) == pytest.approx([-1.5, 0.5])
    with pytest.raises(ValueError, match="one weight per value"):
        batch_whiten([1.0, 3.0], [1])


def test_expand_to_tokens():
    assert expand_to_tokens([1.0, -1.0], [2, 3]) == [1.0, 1.0, -1.0, -1.0, -1.0]
    with pytest.raises(ValueError, match="one per turn"):
        expand_to_tokens([1.0], [2, 3])


# --- estimators ---


def test_grpo_and_grpo_mr():
    turns, outcome, first = [[0.5, 0.0], [0.0]], [1.0, 3.0], [0, None]
    # GRPO-OR: outcomes [1, 3] -> -+S on every turn
    assert compute_advantages("grpo", turns, outcome, first) == approx([[-S, -S], [S]])
    # GRPO-MR: [1.5, 3]: mean 2.25, sample std 1.5 / sqrt(2) -> -+0.75 / (1.0606602 + 1e-4) = -+0.7070401
    mr = 0.75 / (1.5 / math.sqrt(2) + 1e-4)
    assert compute_advantages("grpo_mr", turns, outcome, first) == approx([[-mr, -mr], [mr]])


# Shared group for mt_grpo / ms_po, normalisation "none" so the numbers stay whole:
#   turn rewards [[1, 1, 0], [0, 0], [1]] -> R_turn = [2, 0, 1] -> A_turn = [1, -1, 0]
#   outcomes [3, 0, 0]                                           -> A_out  = [2, -1, -1]
#   R_turn + R_out = [5, 0, 1] (mean 2)                          -> A_comb = [3, -2, -1]
#   first tool result after turn 1, none, after turn 0
TURNS, OUTCOME, FIRST = [[1, 1, 0], [0, 0], [1]], [3, 0, 0], [1, None, 0]


def test_mt_grpo_original_code_form():
    # turns <= first result: A_out + 0.5 A_turn; later turns: A_out; no result: A_comb
    # rollout 0: [2 + 0.5, 2 + 0.5, 2]; rollout 1: [-2, -2]; rollout 2: [-1 + 0.5 * 0]
    got = compute_advantages("mt_grpo", TURNS, OUTCOME, FIRST, coef=0.5, norm="none")
    assert got == approx([[2.5, 2.5, 2.0], [-2.0, -2.0], [-1.0]])


def test_mt_grpo_paper_eq5_form_puts_the_coefficient_on_the_outcome():
    # turns <= first result: A_turn + 0.5 A_out: rollout 0: 1 + 1 = 2, then A_out 2; rollout 2: 0 - 0.5
    got = compute_advantages("mt_grpo", TURNS, OUTCOME, FIRST, coef=0.5, coef_on="outcome", norm="none")
    assert got == approx([[2.0, 2.0, 2.0], [-2.0, -2.0], [-0.5]])


def test_mt_grpo_with_std_matches_the_original_formula():
    # Two rollouts, both with a result after turn 0; the eps shows because it is not scaled with the rewards:
    # R_out [1, 0]: sample std 1/sqrt(2) -> A_out = +-0.5 / (0.7071068 + 1e-4) = +-0.7070068
    # R_turn [0.2, 0]: sample std 0.2/sqrt(2) -> A_turn = +-0.1 / (0.1414214 + 1e-4) = +-0.7066070
    got = compute_advantages("mt_grpo", [[0.2, 0.0], [0.0, 0.0]], [1.0, 0.0], [0, 0])
    assert got == approx([[1.4136138, 0.7070068], [-1.4136138, -0.7070068]], abs=1e-6)


def test_mt_grpo_zero_spread_group_gives_zeros():
    got = compute_advantages("mt_grpo", [[0.2, 0.0], [0.2, 0.0], [0.2]], [1.0, 1.0, 1.0], [0, 0, None])
    assert got == [[0.0, 0.0], [0.0, 0.0], [0.0]]


# --- edge cases pinned to the original code (SiliangZeng/Multi-Turn-RL-Agent, verifiers/trainers/) ---
# grpo_env_trainer.py `_compute_normalized_advantages`: (r - mean) / (std + 1e-4), torch's unbiased std, over all
# num_generations rollouts of the prompt. mt_grpo_env_trainer.py `_assign_advantages` ("aae"): result_segment > 0 ->
# A_out + coef * A_turn on the assistant tokens before the env message holding the first <result>, A_out after;
# result_segment == -1 -> combined_advantages. verl-tool's mt_grpo_core_algos.py does the same per uid.


def test_mt_grpo_when_only_one_of_two_rollouts_reached_a_tool_result():
    # R_out [1, 0] -> A_out = +-0.5 / (0.7071068 + 1e-4) = +-0.7070068
    # R_turn [0.5, 0] -> A_turn = +-0.25 / (0.3535534 + 1e-4) = +-0.7069068
    # R_turn + R_out [1.5, 0] -> A_comb = +-0.75 / (1.0606602 + 1e-4) = +-0.7070401
    # The rollout without a result gets A_comb normalised over the *whole* group (both rollouts), not over the
    # rollouts without a result (which would be a group of one, i.e. 0).
    got = compute_advantages("mt_grpo", [[0.5, 0.0], [0.0]], [1.0, 0.0], [0, None])
    assert got == approx([[1.4139136, 0.7070068], [-0.7070401]], abs=1e-6)


def test_mt_grpo_and_ms_po_when_no_rollout_reached_a_tool_result():
    # combined [1.2, 0, 0.1]: mean 0.4333333, sample std 0.6658328 -> [1.1512673, -0.6507163, -0.5005510] on every
    # turn: MT-GRPO is then GRPO-MR. MS-PO (gamma 0.5): cumulative [0.7, 0, 0.1] -> [1.1442839, -0.7041747, -0.4401092]
    turns, outcome, first = [[0.2, 0.0], [0.0], [0.1, 0.0, 0.0]], [1.0, 0.0, 0.0], [None] * 3
    comb = [1.1512673, -0.6507163, -0.5005510]
    expected = [[comb[0]] * 2, [comb[1]], [comb[2]] * 3]
    assert compute_advantages("mt_grpo", turns, outcome, first, coef=0.3) == approx(expected, abs=1e-6)
    assert compute_advantages("grpo_mr", turns, outcome, first) == approx(expected, abs=1e-6)
    cum = [1.1442839, -0.7041747, -0.4401092]
    got = compute_advantages("ms_po", turns, outcome, first, gamma=0.5)
    assert got == approx([[cum[0]] * 2, [cum[1]], [cum[2]] * 3], abs=1e-6)


def test_ties_and_a_constant_turn_reward():
    # outcomes [1, 1, 0, 0]: sample std sqrt(1/3) = 0.5773503 -> +-0.5 / 0.5774503 = +-0.8658754.
    # The turn reward is the same for everyone, so A_turn = 0 (0 / (0 + 1e-4)) and A_comb = A_out: MT-GRPO gives
    # A_out on every turn, whoever reached a result.
    a = 0.8658754
    got = compute_advantages("mt_grpo", [[0.3, 0.0]] * 4, [1.0, 1.0, 0.0, 0.0], [0, None, 1, None])
    assert got == approx([[a, a], [a, a], [-a, -a], [-a, -a]], abs=1e-6)


def test_the_turn_producing_the_first_result_and_every_earlier_turn_get_the_turn_term():
    # before_result_mask covers all assistant tokens before the env message with the first <result>: a result after
    # the last turn credits every turn; a result after turn 0 credits only turn 0. norm "none": R_turn [1, 0] ->
    # A_turn [0.5, -0.5], R_out [2, 0] -> A_out [1, -1].
    got = compute_advantages("mt_grpo", [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [2.0, 0.0], [2, 0], norm="none")
    assert got == approx([[1.5, 1.5, 1.5], [-1.5, -1.0, -1.0]])


def test_ms_po_with_std_normalisation():
    # mt_grpo_env_trainer.py "cae": cumulative = R_turn + discount_factor * R_out = [0.2 + 0.5, 0] ->
    # +-0.35 / (0.4949747 + 1e-4) = +-0.7069640 before and at the first result, A_out = +-0.7070068 after it
    got = compute_advantages("ms_po", [[0.2, 0.0], [0.0, 0.0]], [1.0, 0.0], [0, 0], gamma=0.5)
    assert got == approx([[0.7069640, 0.7070068], [-0.7069640, -0.7070068]], abs=1e-6)


def test_mt_grpo_with_verl_tool_std_floor():
    # verl-tool grpo_normalize: a group std below 1e-4 is only centred. R_turn [1e-5, 0] -> A_turn = +-5e-6;
    # R_out [1, 0] -> +-0.7070068 (std above the floor, divided as usual)
    got = compute_advantages("mt_grpo", [[1e-5], [0.0]], [1.0, 0.0], [0, 0], std_floor=1e-4)
    assert got == approx([[0.7070068 + 5e-6], [-0.7070068 - 5e-6]], abs=1e-7)


def test_ms_po():
    # gamma 0.5: cumulative = R_turn + 0.5 R_out = [3.5, 0, 1] (mean 1.5) -> A_cum = [2, -1.5, -0.5]; A_out [2, -1, -1]
    # rollout 0: turns 0, 1 get A_cum 2, turn 2 A_out 2; rollout 1 (no result): A_cum; rollout 2: A_cum
    got = compute_advantages("ms_po", TURNS, OUTCOME, FIRST, gamma=0.5, norm="none")
    assert got == approx([[2.0, 2.0, 2.0], [-1.5, -1.5], [-0.5]])


# mt_grpo_k group: turn rewards [[2, 3, 0], [4, 0], [5]], outcomes [1, 2, 4], alpha 0.5, norm "none".
# The last turn's reward joins the outcome: R^O = [1 + 0, 2 + 0, 4 + 5] = [1, 2, 9] (mean 4) -> A^O = [-3, -2, 5].
# Intermediate turns: index 0 has rollouts 0 and 1 (values 2, 4), index 1 only rollout 0 (value 3).
K_TURNS, K_OUTCOME = [[2, 3, 0], [4, 0], [5]], [1, 2, 4]


def test_mt_grpo_k_over_rollouts_that_reached_the_turn():
    # exclude: A^I_0 = [-1, 1] (mean 3), A^I_1 = [0] (group of one)
    # rollout 0: k0 = -1 + 0.5 * 0 + 0.25 * -3 = -1.75; k1 = 0 + 0.5 * -3 = -1.5; k2 = A^O = -3
    # rollout 1: k0 = 1 + 0.5 * -2 = 0; k1 = -2.   rollout 2: [5]
    got = compute_advantages("mt_grpo_k", K_TURNS, K_OUTCOME, [None] * 3, alpha=0.5, norm="none")
    assert got == approx([[-1.75, -1.5, -3.0], [0.0, -2.0], [5.0]])


def test_mt_grpo_k_with_unreached_turns_counted_as_zero():
    # zero: index 0 = [2, 4, 0] (mean 2) -> [0, 2, -2]; index 1 = [3, 0, 0] (mean 1) -> [2, -1, -1].
    # Every rollout sums to the group's last intermediate index 1, its never-taken turns included:
    # rollout 0: k0 = 0 + 0.5 * 2 + 0.25 * -3 = 0.25; k1 = 2 - 1.5 = 0.5; k2 = -3
    # rollout 1: k0 = 2 + 0.5 * -1 + 0.5 * -2 = 0.5; k1 = -1 + 1 * -2 = -3
    # rollout 2: k0 = -2 + 0.5 * -1 + 1 * 5 = 2.5
    got = compute_advantages("mt_grpo_k", K_TURNS, K_OUTCOME, [None] * 3, alpha=0.5, unreached="zero", norm="none")
    assert got == approx([[0.25, 0.5, -3.0], [0.5, -3.0], [2.5]])


def test_mt_grpo_k_zero_removes_the_termination_bias_of_verl_rfc_7244():
    # Rollout B takes one more intermediate turn (reward c = 0.5) before answering, rollout A answers at once; same
    # outcome. B's return is c higher, so the decision at turn index 1 (A: answer, B: search again) should differ by c.
    # R^O = [1, 1] -> A^O = [0, 0]; index 0 = [0, 0] -> [0, 0].
    # exclude: index 1 = [0.5] (B only) -> [0]: the gap is 0, the hidden -E[R_intermediate] of the RFC.
    # zero: index 1 = [0.5, 0] (mean 0.25) -> [0.25, -0.25]; B: [0.25, 0.25, 0], A: [-0.25, -0.25]: gap 0.5 = c.
    turns, outcome = [[0.0, 0.5, 0.0], [0.0, 0.0]], [1.0, 1.0]
    got = compute_advantages("mt_grpo_k", turns, outcome, [None, None], norm="none")
    assert got == approx([[0.0, 0.0, 0.0], [0.0, 0.0]])
    got = compute_advantages("mt_grpo_k", turns, outcome, [None, None], unreached="zero", norm="none")
    assert got == approx([[0.25, 0.25, 0.0], [-0.25, -0.25]])


# turn_return group: turn rewards [[1, 0], [0], [2, 2]], outcomes [4, 0, 0], gamma 0.5, norm "none".
# Returns: rollout 0: G1 = 0 + 4 = 4, G0 = 1 + 0.5 * 4 = 3; rollout 1: G0 = 0; rollout 2: G1 = 2, G0 = 2 + 1 = 3.
R_TURNS, R_OUTCOME = [[1, 0], [0], [2, 2]], [4, 0, 0]


def test_turn_return_per_turn_index():
    # exclude: index 0 = [3, 0, 3] (mean 2) -> [1, -2, 1]; index 1 = [4, 2] (mean 3) -> [1, -1]
    got = compute_advantages("turn_return", R_TURNS, R_OUTCOME, [None] * 3, gamma=0.5, norm="none")
    assert got == approx([[1.0, 1.0], [-2.0], [1.0, -1.0]])
    # zero: index 1 = [4, 0, 2] (mean 2) -> [2, -, 0]
    got = compute_advantages("turn_return", R_TURNS, R_OUTCOME, [None] * 3, gamma=0.5, unreached="zero", norm="none")
    assert got == approx([[1.0, 2.0], [-2.0], [1.0, 0.0]])


def test_gigpo_groups_turns_by_anchor_state():
    # Episode returns R = [1 + 0 + 4, 0 + 0, 2 + 2 + 0] = [5, 0, 4] (mean 3) -> A^E = [2, -3, 1].
    # Anchor "s0": turns (0,0), (2,0) with G = 3, 3 -> [0, 0]. Anchor "s1" across turn indices:
    # (0,1), (1,0), (2,1) with G = 4, 0, 2 (mean 2) -> [2, -2, 0]. omega 0.5:
    # rollout 0: [2 + 0, 2 + 1]; rollout 1: [-3 - 1]; rollout 2: [1 + 0, 1 + 0]
    keys = [["s0", "s1"], ["s1"], ["s0", "s1"]]
    got = compute_advantages(
        "gigpo", R_TURNS, R_OUTCOME, [None] * 3, state_keys=keys, gamma=0.5, omega=0.5, norm="none"
    )
    assert got == approx([[2.0, 3.0], [-4.0], [1.0, 1.0]])
    # state keys are read only by the anchor-state estimators
    plain = compute_advantages("turn_return", R_TURNS, R_OUTCOME, [None] * 3, gamma=0.5, norm="none")
    assert compute_advantages("turn_return", R_TURNS, R_OUTCOME, [None] * 3, state_keys=keys, gamma=0.5,
                              norm="none") == plain


# MS-GRPO (ms_grpo_env_trainer.py, _combine_advantages), norm "none" so the arithmetic stays exact:
# R_turn = [0.7, 0, 0] -> centred [0.466667, -0.233333, -0.233333]; R_out = [1, 0, 1] -> [0.333333, -0.666667, 0.333333]
# rollout 0 (result after turn 0): turn 0 = 0.333333 + 0.466667 = 0.8, turn 1 = 0.333333
# rollout 1 (no tool result): the outcome advantage only, -0.666667 (mt_grpo would give norm(R_turn + R_out))
# rollout 2 (result after turn 0): turn 0 = 0.333333 - 0.233333 = 0.1, turn 1 = 0.333333
def test_ms_grpo_gives_rollouts_without_a_tool_result_the_outcome_advantage():
    got = compute_advantages("ms_grpo", [[0.7, 0.0], [0.0], [0.0, 0.0]], [1.0, 0.0, 1.0], [0, None, 0], norm="none")
    assert got == approx([[0.8, 1 / 3], [-2 / 3], [0.1, 1 / 3]])
    mt = compute_advantages("mt_grpo", [[0.7, 0.0], [0.0], [0.0, 0.0]], [1.0, 0.0, 1.0], [0, None, 0], norm="none")
    assert mt[0] == got[0] and mt[2] == got[2] and mt[1] != got[1]
    # coef 0 (the original's default step_advantage_coe) is outcome-only GRPO
    assert compute_advantages("ms_grpo", [[0.7, 0.0], [0.0]], [1.0, 0.0], [0, None], coef=0.0) == \
        compute_advantages("grpo", [[0.7, 0.0], [0.0]], [1.0, 0.0], [0, None])


def test_merge_params_keeps_environment_defaults_and_refuses_conflicts():
    assert merge_params("mt_grpo_k", {"unreached": "zero", "omega": 2.0}, {"alpha": 0.5}) == \
        {"unreached": "zero", "alpha": 0.5}  # omega is not mt_grpo_k's: that environment default is not for it
    assert merge_params("mt_grpo_k", {"unreached": "zero"}, {"unreached": "zero"}) == {"unreached": "zero"}
    with pytest.raises(ValueError, match="sets 'exclude' but the environment's TurnRubric declares 'zero'"):
        merge_params("mt_grpo_k", {"unreached": "zero"}, {"unreached": "exclude"})
    with pytest.raises(ValueError, match="has no parameter"):
        merge_params("grpo", {}, {"coef": 1.0})


def test_rollout_without_turns_still_counts_in_the_group():
    # outcomes [2, 0]: the turnless rollout pulls the mean down; it gets no advantage entries
    assert compute_advantages("grpo", [[0.0], []], [2.0, 0.0], [None, None]) == approx([[S], []])


def test_group_of_one_is_zero_not_nan():
    for name in ESTIMATORS:
        keys = {"state_keys": [["a", "b"]]} if ESTIMATORS[name].anchor_states else {}
        assert compute_advantages(name, [[0.3, 0.1]], [1.0], [0], **keys) == [[0.0, 0.0]], name


# --- bad input ---


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("nope", [[0.0]], [0.0], [None]), {}, ValueError, "unknown estimator 'nope'"),
        (("grpo", [[0.0], [0.0]], [0.0], [None, None]), {}, ValueError, "one entry per rollout"),
        (("mt_grpo", [[0.0]], [0.0], [1]), {}, ValueError, r"first_result_turn\[0\] = 1 but rollout 0 has 1 turns"),
        (("grpo", [[float("nan")]], [0.0], [None]), {}, ValueError, r"turn_rewards\[0\]\[0\]"),
        (("mt_grpo", [[0.0]], [0.0], [None]), {"cof": 1.0}, TypeError, "unknown parameter"),
        (("gigpo", [[0.0]], [0.0], [None]), {}, ValueError, "needs one state key per turn"),
        (("gigpo", [[0.0, 1.0]], [0.0], [None]), {"state_keys": [["a"]]}, ValueError, "one anchor-state key"),
        (("turn_return", [[0.0]], [0.0], [None]), {"unreached": "drop"}, ValueError, "unreached must be"),
        (("grpo", [[0.0]], [0.0], [None]), {"norm": "l2"}, ValueError, "unknown norm"),
    ],
)
def test_bad_input_is_named(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        compute_advantages(*args, **kwargs)
