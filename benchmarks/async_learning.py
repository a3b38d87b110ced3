"""Learning per step with rollouts one batch ahead: the training tests' choice environment with tiny-random (the
setting of `assert_learned`: 32 rollouts per step, lr 5e-2, 20 steps), the per-step turn-1 reward curve of each
(async_steps, loss_type, seed) run on one fp32 `rlvr serve`, and the step at which each curve first reaches 0.9.

    .venv/bin/python benchmarks/async_learning.py [--seeds 0 1 2] [--steps 20]

Runs: k = 0 with ppo_clip (the synchronous baseline), k = 1 with decoupled_clip (AReaL Eq. 5) for every seed, and
k = 1 with ppo_clip for the first seed (PPO-clip against stale sampler logprobs). Clipping of the stale tokens
(`train/clipped_by_staleness/1`) and the behaviour weights are kept per step.
Writes benchmarks/results/async_learning.json (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "trainer"))
OUT = Path(__file__).resolve().parent / "results" / "async_learning.json"
KEPT = ("turn/1/reward", "async/staleness_mean", "train/clipped", "train/clipped_by_staleness/1",
        "train/behavior_weight", "time/step_s")


def first_at(curve: list[float], level: float = 0.9) -> int | None:
    return next((step for step, value in enumerate(curve, 1) if value >= level), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    from choice_env import load_environment
    from train_script import config

    from rlvr.io import atomic_write_json
    from rlvr.serve import launch
    from rlvr.trainer import run_training

    plan = [(0, "ppo_clip", s) for s in args.seeds] + [(1, "decoupled_clip", s) for s in args.seeds]
    plan.append((1, "ppo_clip", args.seeds[0]))
    runs = []
    with tempfile.TemporaryDirectory() as tmp, launch(model="tiny-random", extra_args=["--dtype", "float32"]) as server:
        for k, loss, seed in plan:
            run_dir = Path(tmp) / f"k{k}-{loss}-{seed}"
            start = time.perf_counter()
            run_training(load_environment(), "tiny-random", config(
                str(run_dir), args.steps, learning_rate=5e-2, batch_size=32, async_steps=k, loss_type=loss,
                seed=seed, num_logged_token_groups=0), server_url=server.url)
            steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
            curve = [r["turn/1/reward"] for r in steps]
            runs.append({"async_steps": k, "loss_type": loss, "seed": seed, "wall_s": time.perf_counter() - start,
                         "first_step_at_0.9": first_at(curve), "last_3_mean": sum(curve[-3:]) / 3,
                         "per_step": [{key: r.get(key) for key in KEPT} for r in steps]})
            print(json.dumps({key: runs[-1][key] for key in ("async_steps", "loss_type", "seed",
                                                             "first_step_at_0.9", "last_3_mean")}), flush=True)
    atomic_write_json(OUT, {"benchmark": "async_learning", "steps": args.steps, "runs": runs,
                            "load_average_at_end": os.getloadavg(),
                            "command": " ".join(["benchmarks/async_learning.py", *sys.argv[1:]])})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
