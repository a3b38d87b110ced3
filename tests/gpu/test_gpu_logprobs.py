"""Chunked token log-probabilities (`rlvr.trainer.policy.token_logprobs`, `reference_logprobs`) on the GPU against
CPU float32: with and without gradients (the chunks run under activation checkpointing), in float32 and under the
trainer's bf16 autocast, for several `logprob_chunk_tokens`.

Tolerances. float32: CUDA and CPU kernels sum in different orders; on tiny-random (log-probabilities near
-ln 49152 = -10.8) that moves a value by ~1e-6, so 1e-4 absolute (1e-5 relative) is far above rounding and far
below any real error (a wrong token, position or temperature moves it by > 0.1). bf16: each matmul's output keeps
8 mantissa bits (relative rounding 2^-9 = 0.002); measured on CPU autocast: at most 0.0054 apart from float32, 0.0015
on average, so 0.03 at most and 0.01 on average.
"""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate import Accelerator
from gpu_batch import micro_batch
from peft import LoraConfig, get_peft_model

from rlvr.trainer.policy import frozen_reference, reference_logprobs, token_logprobs

pytestmark = pytest.mark.gpu

TEMPERATURE = 0.7  # not 1: the division by the temperature is part of what runs on the device
CHUNKS = [1, 7, 64, 4096]  # one token per chunk, uneven chunks, a few chunks, everything in one
FP32_ATOL = 1e-4
BF16_MAX, BF16_MEAN = 0.03, 0.01


@pytest.fixture(scope="module")
def batch(cpu_policy):
    return micro_batch(cpu_policy.config.vocab_size)


@pytest.fixture(scope="module")
def cpu_reference(cpu_policy, batch):
    """Log-probabilities, entropies and the gradient of a fixed weighted sum of the log-probabilities, on CPU in
    float32 with the whole batch in one chunk."""
    model = copy.deepcopy(cpu_policy)
    logprobs, entropies = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.keep, TEMPERATURE,
                                         chunk_tokens=4096)
    (logprobs * batch.advantages).sum().backward()
    return logprobs.detach(), entropies, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def bf16_accelerator(device):
    """The trainer's compute context: `accelerator.autocast()` with mixed_precision bf16 (accumulate_gradients)."""
    return Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.cpu() - want).norm() / want.norm().clamp_min(1e-12))


@pytest.mark.parametrize("chunk_tokens", CHUNKS)
def test_float32_logprobs_entropies_and_gradients_match_cpu(cpu_policy, cpu_reference, batch, device, chunk_tokens):
    want_logprobs, want_entropies, want_grads = cpu_reference
    model = copy.deepcopy(cpu_policy).to(device)
    on_device = batch.to(device)
    logprobs, entropies = token_logprobs(model, on_device.input_ids, on_device.attention_mask, on_device.keep,
                                         TEMPERATURE, chunk_tokens)
    assert logprobs.device.type == device.type and logprobs.dtype == torch.float32
    torch.testing.assert_close(logprobs.detach().cpu(), want_logprobs, atol=FP32_ATOL, rtol=0)
    torch.testing.assert_close(entropies.cpu(), want_entropies, atol=FP32_ATOL, rtol=0)
    # The backward recomputes each chunk's logits (checkpoint): the gradients are the unchunked CPU ones.
    (logprobs * on_device.advantages).sum().backward()
    errors = {name: relative_error(p.grad, want_grads[name]) for name, p in model.named_parameters()}
    assert max(errors.values()) < 1e-3, sorted(errors.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize("chunk_tokens", CHUNKS)
def test_bf16_autocast_logprobs_are_float32_and_near_the_float32_ones(cpu_policy, cpu_reference, batch, device,
                                                                      bf16_accelerator, chunk_tokens):
    want_logprobs, _, _ = cpu_reference
    model = copy.deepcopy(cpu_policy).to(device)
    on_device = batch.to(device)
    matmul_dtypes = set()
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: matmul_dtypes.add(out.dtype))
    with bf16_accelerator.autocast():
        logprobs, entropies = token_logprobs(model, on_device.input_ids, on_device.attention_mask, on_device.keep,
                                             TEMPERATURE, chunk_tokens)
    assert matmul_dtypes == {torch.bfloat16}  # autocast did reach the model
    assert logprobs.dtype == entropies.dtype == torch.float32  # the log-softmax runs in float32 (_head_logprobs)
    difference = (logprobs.detach().cpu() - want_logprobs)[batch.loss_mask].abs()
    assert difference.max() < BF16_MAX and difference.mean() < BF16_MEAN, (difference.max(), difference.mean())
    assert torch.isfinite(entropies).all()


def test_reference_logprobs_of_a_bf16_frozen_copy_and_of_a_disabled_lora_adapter(cpu_policy, cpu_reference, batch,
                                                                                 device, bf16_accelerator):
    want_logprobs, _, _ = cpu_reference
    on_device = batch.to(device)
    args = (on_device.input_ids, on_device.attention_mask, on_device.keep, TEMPERATURE, 7)
    # Full fine-tuning under bf16: the reference is a frozen bf16 copy (OnPolicyTrainer.__init__).
    reference = frozen_reference(copy.deepcopy(cpu_policy), torch.bfloat16).to(device)
    with bf16_accelerator.autocast():
        frozen = reference_logprobs(None, reference, *args)
    difference = (frozen.cpu() - want_logprobs)[batch.loss_mask].abs()
    assert difference.max() < BF16_MAX and difference.mean() < BF16_MEAN, (difference.max(), difference.mean())
    assert not frozen.requires_grad

    # LoRA: the reference is the policy with its adapter off. A trained adapter (B != 0) changes the policy's
    # log-probabilities; switched off, the base model's come back.
    lora = get_peft_model(copy.deepcopy(cpu_policy), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(1))
    lora.to(device)
    with torch.no_grad():
        adapted, _ = token_logprobs(lora, *args)
    off = reference_logprobs(lora, None, *args)
    torch.testing.assert_close(off.cpu(), want_logprobs, atol=FP32_ATOL, rtol=0)
    assert (adapted.cpu() - want_logprobs)[batch.loss_mask].abs().max() > 100 * FP32_ATOL  # the adapter mattered
