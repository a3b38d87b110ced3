"""Seconds per MT-GRPO step, and where they go (generation, scoring, training, weight sync), on this machine;
and (`--flops`) the training step's achieved FLOP/s against this machine's measured matmul peak.

Default: for each model, `rlvr.trainer.run_training` starts its own `rlvr serve`, trains a few steps on the real
vf-gsm8k-code environment (LoRA, 2 prompts, 2 turns; SETTINGS below), and the numbers are read back from the run's
metrics.jsonl. The first step is reported apart (it includes the first weight sync and warm-up).

--flops (no server): one micro-batch of SmolLM2-135M full fine-tuning (the trainer's own `token_logprobs`, the
PPO-clip loss, AdamW), float32 and bf16 autocast. FLOPs are counted as executed (torch's FlopCounterMode: matmuls
and attention, the checkpointed LM-head chunks' recomputation included) and as the model needs them (6 x params x
tokens); seconds by phase, and the profiler's CPU time by operator family says where the time that is not matmul
goes. The peak is the best of square float32 / bf16 matmuls on the same cores, measured in the same process.

    python benchmarks/train_step.py [--models tiny-random smollm2-135m] [--steps 3]
    python benchmarks/train_step.py --flops [--flops-model smollm2-135m] [--tokens 256 --samples 2]

Writes benchmarks/results/train_step.json (default) or benchmarks/results/train_step_flops.json (--flops).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from statistics import mean

RESULTS = Path(__file__).resolve().parent / "results" / "train_step.json"
FLOPS_RESULTS = Path(__file__).resolve().parent / "results" / "train_step_flops.json"
# torch operators by family, for the profile (self CPU time).
FAMILIES = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_mkldnn", "aten::linear"),
    "attention": ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention"),
    "softmax over the vocabulary": ("aten::_log_softmax", "aten::_softmax", "aten::log_softmax", "aten::exp",
                                    "aten::gather", "aten::scatter", "aten::_log_softmax_backward"),
    "optimizer (AdamW)": ("aten::_foreach", "aten::_fused_adamw", "aten::addcdiv", "aten::addcmul", "aten::lerp",
                          "aten::sqrt", "aten::maximum"),
}
SPLIT = ("timing/generation_s", "timing/scoring_s", "timing/training_s", "timing/sync_s", "time/step_s")
SETTINGS = {  # per model; SmolLM2's forward+backward costs ~0.1 s per token on 2 busy cores, so it gets less
    "tiny-random": dict(max_tokens_per_turn=64, batch_size=8, rollouts_per_example=4, micro_batch_size=4),
    "smollm2-135m": dict(max_tokens_per_turn=32, batch_size=4, rollouts_per_example=2, micro_batch_size=2),
}


def bench(model: str, steps: int) -> dict:
    import vf_gsm8k_code

    from rlvr.trainer import MTGRPOConfig, run_training

    with tempfile.TemporaryDirectory(prefix=f"bench-{model}-") as run_dir:
        config = MTGRPOConfig(
            output_dir=run_dir, max_steps=steps, save_steps=10_000, seed=0, learning_rate=1e-5, max_seq_len=1024,
            use_lora=True, lora_rank=8, report_to="none", logging_steps=1, progress=False,
            **SETTINGS[model],
        )
        env = vf_gsm8k_code.load_environment(num_train_examples=32, num_eval_examples=4, max_turns=2)
        start = time.perf_counter()
        run_training(env, model, config)
        wall = time.perf_counter() - start
        records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "loss" in r]
    later = records[1:] or records
    return {
        "steps": len(records),
        "wall_s_including_server_start": wall,
        "first_step": {k: records[0].get(k) for k in SPLIT},
        "mean_after_first": {k: mean(r.get(k, 0.0) for r in later) for k in SPLIT},
        "tokens_generated_per_step": mean(r["tokens/generated"] for r in later),
        "generation_tokens_per_s": mean(r["tokens/generation_per_s"] for r in later),
        "training_tokens_per_s": mean(r["tokens/training_per_s"] for r in later),
        "packed_fraction": mean(r["batch/packed_fraction"] for r in later),
        "settings": {"max_turns": 2, "lora_rank": 8, **SETTINGS[model]},
    }


def matmul_peak(dtype, size: int = 2048, repeats: int = 8) -> float:
    """Best FLOP/s of a square matmul in `dtype` on this process's threads (2 n^3 FLOPs each)."""
    import torch

    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    torch.mm(a, b)  # warm-up (oneDNN picks its kernel)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def family(name: str) -> str:
    return next((f for f, prefixes in FAMILIES.items() if name.startswith(prefixes)), "other (norms, elementwise, "
                                                                                         "copies, autograd)")


def flops_of_a_step(model_name: str, tokens: int, samples: int, bf16: bool) -> dict:
    """One micro-batch of full fine-tuning, timed by phase, with executed and model FLOPs and a profile."""
    import contextlib

    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    from rlvr.models import resolve
    from rlvr.trainer.loss import policy_loss
    from rlvr.trainer.policy import token_logprobs

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve(model_name), dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    input_ids = torch.randint(0, model.config.vocab_size, (samples, tokens))
    mask = torch.ones_like(input_ids)
    keep = torch.arange(tokens // 4, tokens - 1)  # a prompt, then trained assistant tokens
    advantages = torch.randn(samples, keep.numel())
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step(timings: dict | None = None) -> None:
        marks = [time.perf_counter()]
        with autocast():
            logprobs, _ = token_logprobs(model, input_ids, mask, keep, temperature=1.0)
            marks.append(time.perf_counter())
            terms = policy_loss(logprobs, logprobs.detach(), advantages, loss_type="ppo_clip")
            loss = terms.loss.mean()
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        if timings is not None:
            for name, a, b in zip(("forward_s", "backward_s", "optimizer_s"), marks, marks[1:], strict=False):
                timings.setdefault(name, []).append(b - a)

    step()  # warm-up
    with FlopCounterMode(display=False) as counter:
        step()
    executed = counter.get_total_flops()
    timings: dict[str, list[float]] = {}
    for _ in range(2):
        step(timings)
    seconds = {k: min(v) for k, v in timings.items()}
    total = sum(seconds.values())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    by_family: dict[str, float] = {}
    others: dict[str, float] = {}
    for event in prof.key_averages():
        seconds_self = event.self_cpu_time_total / 1e6
        by_family[family(event.key)] = by_family.get(family(event.key), 0.0) + seconds_self
        if family(event.key).startswith("other"):
            others[event.key] = seconds_self
    profiled = sum(by_family.values())
    params = sum(p.numel() for p in model.parameters())
    trained_tokens = samples * tokens
    model_flops = 6 * params * trained_tokens  # forward 2N + backward 4N per token (Kaplan et al. 2020, Sec. 2.1)
    dtype = torch.bfloat16 if bf16 else torch.float32
    peak = matmul_peak(dtype)
    return {
        "model": model_name, "dtype": "bf16 autocast (fp32 weights)" if bf16 else "float32",
        "micro_batch": {"samples": samples, "tokens_per_sample": tokens, "trained_positions": samples * keep.numel()},
        "params": params, "seconds": seconds, "step_s": total,
        "executed_flops": executed, "model_flops_6NT": model_flops,
        "achieved_flops_per_s": executed / total, "matmul_peak_flops_per_s": peak,
        "fraction_of_peak": executed / total / peak,
        "profile_share": {k: round(v / profiled, 3) for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])},
        "profile_cpu_s": profiled,
        "largest_other_ops": {k: round(v / profiled, 3) for k, v in sorted(others.items(), key=lambda kv: -kv[1])[:8]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--flops", action="store_true", help="FLOP/s of a training step (no server)")
    parser.add_argument("--flops-model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--samples", type=int, default=2)
    args = parser.parse_args()
    from rlvr.io import atomic_write_json

    if args.flops:
        import torch

        results = {"machine": {"cpus": __import__("os").cpu_count(), "threads": torch.get_num_threads(),
                               "platform": platform.platform(), "load_average": __import__("os").getloadavg()},
                   "steps": [flops_of_a_step(args.flops_model, args.tokens, args.samples, bf16) for bf16 in
                             (False, True)]}
        print(json.dumps(results, indent=2))
        atomic_write_json(FLOPS_RESULTS, results)
        print(f"wrote {FLOPS_RESULTS}")
        return
    results = {"machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
               "environment": "vf-gsm8k-code", "models": {}}
    for model in args.models:
        results["models"][model] = bench(model, args.steps)
        print(model, json.dumps(results["models"][model]["mean_after_first"], indent=2), flush=True)
    atomic_write_json(RESULTS, results)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
