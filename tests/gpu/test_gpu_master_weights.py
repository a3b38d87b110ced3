"""bf16 on the GPU keeps float32 master weights (`load_policy`, `trained_weights_dtype`): one optimizer step of the
trainer's shape (accelerate with mixed_precision bf16, `accelerator.autocast()` around the forward and the loss,
`accelerator.backward`, AdamW) leaves every trained parameter, its gradient and Adam's moments in float32, while
the matmuls ran in bf16; at lr 1e-6 almost every weight moves (bf16 weights would round most such steps away:
8 mantissa bits). Under LoRA the frozen base stays bf16 and untouched, and the float32 adapters train.
"""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from gpu_batch import masked_mean_loss, micro_batch
from peft import LoraConfig, get_peft_model

from rlvr.trainer.loss import policy_loss
from rlvr.trainer.policy import load_policy, token_logprobs

pytestmark = pytest.mark.gpu


def one_bf16_step(policy, device: torch.device, lr: float) -> tuple[Accelerator, torch.optim.Optimizer, set]:
    accelerator = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")
    trained = [p for p in policy.parameters() if p.requires_grad]
    model, optimizer = accelerator.prepare(policy, torch.optim.AdamW(trained, lr=lr, weight_decay=0.0))
    assert accelerator.device.type == device.type
    matmul_dtypes = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, i, out: matmul_dtypes.add(out.dtype))
    batch = micro_batch(model.config.vocab_size, seed=3).to(accelerator.device)
    with accelerator.autocast():
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.keep, 0.7, 16)
        # The sampler's logprobs are the policy's own (ratio 1): the gradient is the plain policy gradient.
        terms = policy_loss(logprobs, logprobs.detach(), batch.advantages, loss_type="ppo_clip")
        loss = masked_mean_loss(terms, batch.loss_mask)
    assert torch.isfinite(loss)
    accelerator.backward(loss)
    optimizer.step()
    return accelerator, optimizer, matmul_dtypes


def changed_fraction(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    after = {n: p.detach().cpu() for n, p in model.named_parameters() if n in before}
    changed = sum(int((after[n] != before[n]).sum()) for n in before)
    return changed / sum(t.numel() for t in before.values())


def test_full_fine_tuning_under_bf16_keeps_float32_master_weights_and_moments(tiny_model, device):
    policy, _ = load_policy(str(tiny_model), bf16=True)
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    _, optimizer, matmul_dtypes = one_bf16_step(policy, device, lr=1e-6)
    assert matmul_dtypes == {torch.bfloat16}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    assert {p.dtype for p in params} == {p.grad.dtype for p in params} == {torch.float32}
    assert {p.device.type for p in params} == {device.type}
    moments = [s[k] for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]
    assert len(moments) == 2 * len(params) and {m.dtype for m in moments} == {torch.float32}
    assert changed_fraction(before, policy) > 0.9  # bf16 master weights: ~2% (measured on CPU, tests/trainer)


def test_lora_under_bf16_trains_float32_adapters_over_a_frozen_bf16_base(tiny_model, device):
    base, _ = load_policy(str(tiny_model), bf16=True, lora=True)
    assert {p.dtype for p in base.parameters()} == {torch.bfloat16}
    policy = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    adapters = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    assert {t.dtype for t in adapters.values()} == {torch.float32}  # peft casts adapters up
    _, optimizer, matmul_dtypes = one_bf16_step(policy, device, lr=1e-3)
    assert torch.bfloat16 in matmul_dtypes
    assert {p.dtype for group in optimizer.param_groups for p in group["params"]} == {torch.float32}
    assert all(torch.equal(p.detach().cpu(), frozen[n]) for n, p in policy.named_parameters() if n in frozen)
    assert {p.dtype for n, p in policy.named_parameters() if n in frozen} == {torch.bfloat16}
    # lora_B starts at zero: its first Adam step moves it; lora_A gets no gradient through a zero B yet.
    moved = [n for n, p in policy.named_parameters() if n in adapters and not torch.equal(p.detach().cpu(), adapters[n])]
    assert moved and all("lora_B" in n for n in moved)
