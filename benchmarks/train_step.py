"""Seconds per MT-GRPO step, and where they go (generation, scoring, training, weight sync), on this machine.

For each model: `rlvr.trainer.run_training` starts its own `rlvr serve`, trains a few steps on the real
vf-gsm8k-code environment (LoRA, 2 prompts, 2 turns; SETTINGS below), and the numbers are read back from the run's
metrics.jsonl. The first step is reported apart (it includes the first weight sync and warm-up).

    python benchmarks/train_step.py [--models tiny-random smollm2-135m] [--steps 3]

Writes benchmarks/results/train_step.json.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    results = {"machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform()},
               "environment": "vf-gsm8k-code", "models": {}}
    for model in args.models:
        results["models"][model] = bench(model, args.steps)
        print(model, json.dumps(results["models"][model]["mean_after_first"], indent=2), flush=True)
    from rlvr.trainer.metrics import write_json_atomic

    write_json_atomic(RESULTS, results)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
