"""Policy losses: hand-computed values and properties."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.trainer.loss import k3_kl, masked_is_loss, policy_loss, ppo_clip_loss

LN = math.log


def t(*xs):
    return torch.tensor([list(xs)], dtype=torch.float64)


def test_ppo_clip_hand_computed():
    # ratios 1.5, 1.5, 0.5, 0.5 against advantages +1, -1, +1, -1, eps = 0.2:
    #   r=1.5 A=+1: min(1.5, 1.2) = 1.2 -> loss -1.2 (clipped)    r=1.5 A=-1: min(-1.5, -1.2) = -1.5 -> 1.5
    #   r=0.5 A=+1: min(0.5, 0.8) = 0.5 -> loss -0.5              r=0.5 A=-1: min(-0.5, -0.8) = -0.8 -> 0.8 (clipped)
    logprobs = t(LN(1.5), LN(1.5), LN(0.5), LN(0.5))
    loss, ratio, clipped = ppo_clip_loss(logprobs, t(0, 0, 0, 0), t(1, -1, 1, -1), 0.2, 0.2)
    torch.testing.assert_close(loss, t(-1.2, 1.5, -0.5, 0.8))
    torch.testing.assert_close(ratio, t(1.5, 1.5, 0.5, 0.5))
    assert clipped.tolist() == [[True, False, False, True]]


def test_ppo_clip_asymmetric_range():
    # clip-higher (DAPO): eps_low 0.2, eps_high 0.28 -> r = 1.5 with A = +1 is clipped to 1.28
    loss, _, _ = ppo_clip_loss(t(LN(1.5)), t(0.0), t(1.0), 0.2, 0.28)
    torch.testing.assert_close(loss, t(-1.28))


def test_masked_is_hand_computed():
    # verifiers' loss -r*A, with r outside [0.125, 8] dropped: r = 1.5, 10, 0.1 with A = 2
    loss, _, masked = masked_is_loss(t(LN(1.5), LN(10), LN(0.1)), t(0, 0, 0), t(2, 2, 2), 0.125, 8.0)
    torch.testing.assert_close(loss, t(-3.0, 0.0, 0.0))
    assert masked.tolist() == [[False, True, True]]


def test_k3_hand_computed_and_penalty_added():
    # pi = 0.5, pi_ref = 0.25: pi_ref/pi = 0.5 -> 0.5 - ln 0.5 - 1 = 0.19315
    kl = k3_kl(t(LN(0.5)), t(LN(0.25)))
    torch.testing.assert_close(kl, t(0.5 - LN(0.5) - 1))
    terms = policy_loss(t(LN(0.5)), t(LN(0.5)), t(1.0), loss_type="ppo_clip",
                        ref_logprobs=t(LN(0.25)), beta=0.1)
    torch.testing.assert_close(terms.loss, t(-1.0 + 0.1 * (0.5 - LN(0.5) - 1)))


finite = st.floats(-5, 5, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(finite, finite, finite, st.floats(0, 0.9), st.floats(0, 3))
def test_ppo_clip_properties(logp, behavior, adv, eps_low, eps_high):
    lp = torch.tensor([[logp]], dtype=torch.float64, requires_grad=True)
    loss, ratio, clipped = ppo_clip_loss(lp, t(behavior), t(adv), eps_low, eps_high)
    r = math.exp(logp - behavior)
    # pessimistic bound: never below the unclipped surrogate's loss
    assert loss.item() >= -r * adv - 1e-9
    loss.sum().backward()
    if clipped.item():
        assert lp.grad.item() == 0.0  # a clipped token gets no gradient
    else:
        assert math.isclose(lp.grad.item(), -r * adv, rel_tol=1e-9, abs_tol=1e-12)  # d(-rA)/dlogp = -rA


@settings(max_examples=200, deadline=None)
@given(finite, finite)
def test_k3_nonnegative_and_zero_at_equality(logp, ref):
    assert k3_kl(t(logp), t(ref)).item() >= -1e-12
    assert k3_kl(t(logp), t(logp)).item() == 0.0


@settings(max_examples=100, deadline=None)
@given(finite, finite)
def test_on_policy_losses_agree(logp, adv):
    # At r = 1 (trainer = sampler) both losses are the REINFORCE surrogate -A.
    for loss_type in ("ppo_clip", "masked_is"):
        terms = policy_loss(t(logp), t(logp), t(adv), loss_type=loss_type)
        assert math.isclose(terms.loss.item(), -adv, abs_tol=1e-12)


def test_decoupled_clip_hand_computed():
    # AReaL Eq. 5: w = min(pi_prox / pi_behav, cap), u = pi_theta / pi_prox, loss = -w * min(u A, clip(u) A).
    # token 1: pi_prox/pi_behav = 2, u = 1.5, A = +1: -2 * min(1.5, 1.2) = -2.4 (clipped)
    # token 2: pi_prox/pi_behav = 8 -> capped at 5, u = 1, A = -1: -5 * -1 = 5
    # token 3: pi_prox/pi_behav = 0.5, u = 0.5, A = -1: -0.5 * min(-0.5, -0.8) = 0.4 (clipped)
    terms = policy_loss(t(LN(3.0), LN(8.0), LN(0.25)), t(0, 0, 0), t(1, -1, -1), loss_type="decoupled_clip",
                        proximal_logprobs=t(LN(2.0), LN(8.0), LN(0.5)), behavior_weight_cap=5.0)
    torch.testing.assert_close(terms.loss, t(-2.4, 5.0, 0.4))
    torch.testing.assert_close(terms.ratio, t(1.5, 1.0, 0.5))
    torch.testing.assert_close(terms.behavior_weight, t(2.0, 5.0, 0.5))
    assert terms.weight_capped.tolist() == [[False, True, False]]
    assert terms.is_clipped.tolist() == [[True, False, True]]


def test_decoupled_clip_needs_the_proximal_logprobs():
    import pytest

    with pytest.raises(ValueError, match="proximal_logprobs"):
        policy_loss(t(0.0), t(0.0), t(1.0), loss_type="decoupled_clip")


@settings(max_examples=200, deadline=None)
@given(finite, finite, finite, finite, st.floats(1, 10))
def test_decoupled_clip_properties(logp, prox, behavior, adv, cap):
    lp = torch.tensor([[logp]], dtype=torch.float64, requires_grad=True)
    terms = policy_loss(lp, t(behavior), t(adv), loss_type="decoupled_clip", proximal_logprobs=t(prox),
                        behavior_weight_cap=cap)
    weight = min(math.exp(prox - behavior), cap)
    assert math.isclose(terms.behavior_weight.item(), weight, rel_tol=1e-9)
    # it is PPO-clip around the proximal policy, scaled by the (constant) behaviour weight
    plain, _, _ = ppo_clip_loss(lp, t(prox), t(adv), 0.2, 0.2)
    assert math.isclose(terms.loss.item(), weight * plain.item(), rel_tol=1e-9, abs_tol=1e-12)
    terms.loss.sum().backward()
    u = math.exp(logp - prox)
    expected = 0.0 if terms.is_clipped.item() else -weight * u * adv
    assert math.isclose(lp.grad.item(), expected, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=100, deadline=None)
@given(finite, finite)
def test_decoupled_clip_on_policy_is_the_reinforce_surrogate(logp, adv):
    # trainer = proximal = sampler (async_steps 0, the batch's first step): -A, as the other losses
    terms = policy_loss(t(logp), t(logp), t(adv), loss_type="decoupled_clip", proximal_logprobs=t(logp))
    assert math.isclose(terms.loss.item(), -adv, abs_tol=1e-12)
