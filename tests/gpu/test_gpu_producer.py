"""The asynchronous producer (`rlvr.trainer.producer.RolloutProducer`) feeding a training loop on the GPU: batches are
made on the producer's thread as CPU data (what the rollout client hands over) and moved to the device on the
training thread, as `OnPolicyTrainer` does. Checked: every batch trained once, in order, never more than the
lookahead behind the weights; and the synchronous schedule through the thread trains bit-identical weights to the
inline one (no nondeterminism from the thread on CUDA)."""

from __future__ import annotations

import pytest
import torch
from gpu_batch import masked_mean_loss, micro_batch

from rlvr.trainer.loss import policy_loss
from rlvr.trainer.policy import load_policy, token_logprobs
from rlvr.trainer.producer import RolloutProducer

pytestmark = pytest.mark.gpu


def train(tiny_model, device: torch.device, lookahead: int, threaded: bool, steps: int = 4):
    torch.manual_seed(0)
    policy, _ = load_policy(str(tiny_model), bf16=False)
    policy.to(device).train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4, weight_decay=0.0)
    version = {"served": -1}
    made: list[tuple[int, int]] = []  # (batch, version served when its generation started)

    def generate(batch: int):
        made.append((batch, version["served"]))
        return micro_batch(policy.config.vocab_size, seed=batch)  # CPU tensors, like the rollout client's lists

    producer = RolloutProducer(generate, lookahead=lookahead, first=0, last=steps - 1, threaded=threaded)
    taken = []
    for b in range(steps):
        version["served"] = b  # the weight sync before batch b
        producer.release(b)
        batch = producer.take(b).to(device)
        taken.append(b)
        logprobs, _ = token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.keep, 1.0, 16)
        terms = policy_loss(logprobs, logprobs.detach() - 0.01, batch.advantages, loss_type="decoupled_clip",
                            proximal_logprobs=logprobs.detach())
        loss = masked_mean_loss(terms, batch.loss_mask)
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    producer.stop()
    return policy, made, taken


def test_a_producer_one_batch_ahead_feeds_a_gpu_training_loop(tiny_model, device):
    _, made, taken = train(tiny_model, device, lookahead=1, threaded=True)
    assert taken == [0, 1, 2, 3]
    assert sorted(b for b, _ in made) == [0, 1, 2, 3]  # each generated once
    assert all(0 <= b - served <= 1 for b, served in made)


def test_the_synchronous_schedule_through_the_thread_trains_identical_weights(tiny_model, device):
    inline, _, _ = train(tiny_model, device, lookahead=0, threaded=False, steps=2)
    threaded, _, _ = train(tiny_model, device, lookahead=0, threaded=True, steps=2)
    for (name, a), (_, b) in zip(inline.named_parameters(), threaded.named_parameters(), strict=True):
        assert torch.equal(a, b), name
