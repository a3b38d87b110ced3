"""The policy loss (`rlvr.trainer.loss.policy_loss`, both loss types, with the k3 KL term) and the gradients it sends
into the model, on the GPU against CPU float32: tiny-random -> chunked token log-probabilities -> loss -> masked
token mean (as `accumulate_gradients`) -> backward.

The sampler's log-probabilities are the policy's own plus fixed offsets far from every clip / mask bound (ratios
e^-0.5, e^-0.05, e^0.05, e^0.5 against the 0.8 / 1.2 clip range, and e^+-2.5 against the 0.125 / 8 IS mask), so
a 1e-6 difference between the devices cannot flip a token's clipping; which tokens are clipped must agree exactly.
Tolerances as in test_gpu_logprobs (float32: sums in another order).
"""

from __future__ import annotations

import copy

import pytest
import torch
from gpu_batch import masked_mean_loss, micro_batch

from rlvr.trainer.loss import policy_loss
from rlvr.trainer.policy import frozen_reference, reference_logprobs, token_logprobs

pytestmark = pytest.mark.gpu

TEMPERATURE = 0.7
CHUNK_TOKENS = 16
OFFSETS = {"ppo_clip": (-0.5, -0.05, 0.05, 0.5), "masked_is": (-2.5, -0.05, 0.05, 2.5)}


def step_loss(policy, reference, batch, behavior, loss_type: str):
    """One micro-batch's loss as accumulate_gradients computes it, backward included; the policy holds the grads."""
    logprobs, _ = token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.keep, TEMPERATURE, CHUNK_TOKENS)
    ref = reference_logprobs(policy, reference, batch.input_ids, batch.attention_mask, batch.keep, TEMPERATURE,
                             CHUNK_TOKENS)
    terms = policy_loss(logprobs, behavior, batch.advantages, loss_type=loss_type, ref_logprobs=ref, beta=0.04)
    loss = masked_mean_loss(terms, batch.loss_mask)
    loss.backward()
    return loss.detach(), terms


@pytest.mark.parametrize("loss_type", ["ppo_clip", "masked_is"])
def test_policy_loss_and_its_gradients_match_cpu(cpu_policy, device, loss_type):
    batch = micro_batch(cpu_policy.config.vocab_size, seed=1)
    generator = torch.Generator().manual_seed(2)
    offsets = torch.tensor(OFFSETS[loss_type])[torch.randint(0, 4, batch.loss_mask.shape, generator=generator)]
    with torch.no_grad():
        own, _ = token_logprobs(cpu_policy, batch.input_ids, batch.attention_mask, batch.keep, TEMPERATURE)
    behavior = torch.where(batch.loss_mask, own - offsets, 0.0)  # ratio pi / pi_behavior = e^offset
    # The KL reference is a little away from the policy, so that the k3 term has a gradient.
    reference = frozen_reference(copy.deepcopy(cpu_policy))
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.01)

    results = []
    for where in (torch.device("cpu"), device):  # the CPU reference first
        policy = copy.deepcopy(cpu_policy).to(where)
        loss, terms = step_loss(policy, copy.deepcopy(reference).to(where), batch.to(where), behavior.to(where),
                                loss_type)
        assert loss.device.type == where.type
        results.append((loss.cpu(), terms, {n: p.grad.cpu() for n, p in policy.named_parameters()}))
    (want_loss, want_terms, want_grads), (loss, terms, grads) = results

    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-5)
    mask = batch.loss_mask
    assert torch.equal(terms.is_clipped.cpu()[mask], want_terms.is_clipped[mask])
    assert 0 < int(want_terms.is_clipped[mask].sum()) < int(mask.sum())  # both branches of the objective ran
    torch.testing.assert_close(terms.ratio.detach().cpu()[mask], want_terms.ratio.detach()[mask], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(terms.kl.detach().cpu()[mask], want_terms.kl.detach()[mask], atol=1e-5, rtol=1e-3)
    errors = {n: float((grads[n] - g).norm() / g.norm().clamp_min(1e-12)) for n, g in want_grads.items()}
    assert max(errors.values()) < 1e-3, sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    assert all(g.norm() > 0 for g in want_grads.values())  # every parameter is reached by the loss
