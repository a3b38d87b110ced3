"""One optimizer step of the real OnPolicyTrainer under DeepSpeed ZeRO on DeepSpeed's CPU accelerator (gloo), run
as a script because DeepSpeed binds the process's accelerate state: the test starts it with DS_ACCELERATOR=cpu and
the single-rank environment accelerate's DeepSpeed path reads (ACCELERATE_USE_DEEPSPEED, RANK, WORLD_SIZE, ...).

The same six samples train tiny-random for one step twice from the same weights: in one micro-batch, and in
`--micro-batch-size`-sample micro-batches; then a third time with a NaN sampling logprob on one trained token,
which DeepSpeed must skip. Prints one JSON line: DeepSpeed's optimizer-step count after each run, the largest
weight change of the one-micro-batch run, the largest difference between the first two runs' changes, and the
skipped run's step counts and largest change. Each run also checks that the weights its stand-in server was sent
before step 0 are the initial weights, whole (under ZeRO-3 the sync gathers the shards).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from fixed_batch import FixedBatchTrainer, fixed_batch_config, random_samples  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from rlvr.models import resolve  # noqa: E402
from rlvr.trainer.batching import Sample  # noqa: E402


def zero_config(stage: int) -> dict:
    return {"zero_optimization": {"stage": stage}, "train_micro_batch_size_per_gpu": "auto",
            "train_batch_size": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
            "bf16": {"enabled": "auto"}}


def weights(trainer) -> dict[str, torch.Tensor]:
    """Whole tensors (ZeRO-3 keeps a shard of each on every rank: gathered as the weight sync gathers them)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    with trainer.gathered_parameters(model):
        return {k: v.detach().float().clone() for k, v in model.state_dict().items()}


def one_step(samples: list[Sample], micro_batch_size: int, stage: int, run_dir: str) -> tuple[dict, int, int]:
    args = fixed_batch_config(run_dir, micro_batch_size=micro_batch_size, batch_size=48,
                              rollouts_per_example=8, learning_rate=1e-3, deepspeed=zero_config(stage))
    trainer = FixedBatchTrainer("tiny-random", args, samples)
    before = weights(trainer)
    trainer.train()
    after = weights(trainer)
    (synced,) = trainer.server.syncs  # before step 0: the initial weights, whole (gathered under ZeRO-3)
    assert synced.keys() == before.keys() and all(torch.equal(t.float(), before[k]) for k, t in synced.items())
    return {k: after[k] - before[k] for k in before}, trainer.model_wrapped.global_steps, trainer.skipped_steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--stage", type=int, default=2)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(resolve("tiny-random"), dtype=torch.float32)
    samples = random_samples(model, 6)
    s = samples[3]
    poisoned = samples[:3] + [Sample(s.input_ids, s.loss_mask, s.behavior_logprobs[:-1] + [float("nan")],
                                     s.advantages, s.turn_index)] + samples[4:]
    with tempfile.TemporaryDirectory() as tmp:
        whole, steps_whole, _ = one_step(samples, len(samples), args.stage, f"{tmp}/whole")
        split, steps_split, _ = one_step(samples, args.micro_batch_size, args.stage, f"{tmp}/split")
        nan, steps_nan, skipped = one_step(poisoned, args.micro_batch_size, args.stage, f"{tmp}/nan")
    print(json.dumps({
        "ds_steps_one_micro_batch": steps_whole, "ds_steps_split": steps_split,
        "max_change": max(float(d.abs().max()) for d in whole.values()),
        "max_difference": max(float((whole[k] - split[k]).abs().max()) for k in whole),
        "nan_ds_steps": steps_nan, "nan_skipped_steps": skipped,
        "nan_max_change": max(float(d.abs().max()) for d in nan.values()),
    }))


if __name__ == "__main__":
    main()
