"""One optimizer step of tiny-random under DeepSpeed ZeRO, started by `accelerate launch --config_file` with one of
rlvr's shipped configs (src/rlvr/trainer/accelerate/zero2.yaml, zero3.yaml: bf16) and one process.

The step is the trainer's: `load_policy` after the Accelerator exists (so ZeRO-3 loads the weights partitioned, as
in OnPolicyTrainer), accelerate's DeepSpeed engine and ZeRO optimizer, chunked token log-probabilities through the
engine, the policy loss, `accelerator.backward` (DeepSpeed steps inside it at the accumulation boundary). Prints
one JSON line: the loss, DeepSpeed's step counts, the dtypes of the module's weights and of the optimizer's
(master) partitions, and how far the float32 master weights moved (Adam's first step: about lr per weight).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from gpu_batch import masked_mean_loss, micro_batch  # noqa: E402

from rlvr.trainer.loss import policy_loss  # noqa: E402
from rlvr.trainer.policy import load_policy, token_logprobs  # noqa: E402

LR = 1e-3


def master_partitions(optimizer) -> list[torch.Tensor]:
    """The float32 partitions DeepSpeed's ZeRO optimizer (under accelerate's wrapper) steps: ZeRO-1/2 keep them as
    `single_partition_of_fp32_groups`, ZeRO-3 as `fp32_partitioned_groups_flat` (its torch optimizer holds them only
    during its step)."""
    zero = optimizer.optimizer
    stage3 = getattr(zero, "fp32_partitioned_groups_flat", None)
    return list(stage3 if stage3 is not None else zero.single_partition_of_fp32_groups)


def main() -> None:
    accelerator = Accelerator()
    plugin = accelerator.state.deepspeed_plugin
    assert plugin is not None, "not started by accelerate launch with a DeepSpeed config"
    policy, _ = load_policy("tiny-random", bf16=accelerator.mixed_precision == "bf16")
    batch = micro_batch(policy.config.vocab_size, seed=4)
    # No dataloader goes through accelerate here: it needs the micro-batch size from the config instead.
    plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = batch.input_ids.size(0)
    model, optimizer = accelerator.prepare(policy, torch.optim.AdamW(policy.parameters(), lr=LR, weight_decay=0.0))
    masters = master_partitions(optimizer)
    before = [m.detach().clone() for m in masters]
    batch = batch.to(accelerator.device)
    with accelerator.autocast():
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.keep, 0.7, 16)
        terms = policy_loss(logprobs, logprobs.detach(), batch.advantages, loss_type="ppo_clip")
        loss = masked_mean_loss(terms, batch.loss_mask)
    accelerator.backward(loss)  # the last (only) micro-batch: DeepSpeed clips, steps and zeroes here
    optimizer.step()
    optimizer.zero_grad()
    changes = torch.cat([(m.detach() - b).abs().flatten() for m, b in zip(masters, before, strict=True)])
    print(json.dumps({
        "zero_stage": plugin.zero_stage, "device": accelerator.device.type, "loss": float(loss.detach()),
        "logprobs_dtype": str(logprobs.dtype), "deepspeed_steps": model.global_steps,
        "skipped_steps": model.skipped_steps,
        "module_dtypes": sorted({str(p.dtype) for p in model.module.parameters()}),
        "master_dtypes": sorted({str(m.dtype) for m in masters}),
        "master_numel": int(changes.numel()), "master_changed_fraction": float((changes > 0).float().mean()),
        "master_max_change": float(changes.max()),
    }))


if __name__ == "__main__":
    main()
