"""PPO with a critic (rlvr.trainer.ppo) on CPU with SmolLM2-135M: learning curves and wall time of real runs.

For each environment: start an fp32 `rlvr serve` of the model (the trainer is fp32, so the sampler's log-probs, the
PPO "old policy", match the trainer's), train with the repository's CPU config (configs/train/<name>_ppo_cpu.toml,
optionally overridden), and record every step's metrics from the run's metrics.jsonl.

    python benchmarks/ppo_cpu.py [--envs triviaqa webshop] [--set max_steps=10] [--keep-runs runs/]

Writes benchmarks/results/ppo_<env>.json. Each run takes tens of minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = {"triviaqa": REPO / "configs/train/triviaqa_ppo_cpu.toml", "webshop": REPO / "configs/train/webshop_ppo_cpu.toml"}
CURVES = (  # per-step metrics kept in the results (when present)
    "reward", "turn_reward", "turn/1/reward", "turn/2/reward", "turn/3/reward", "turns", "errors",
    "valid_action", "search_hit", "target_click", "purchase_reward", "success", "tool_execution", "exact_match",
    "critic/value_loss", "critic/explained_variance", "critic/clip_fraction", "critic/old_value_mean",
    "critic/return_mean", "reward/kl", "train/clipped", "train/ratio", "train/mismatch_kl", "train/entropy",
    "turn/1/advantage_mean", "turn/2/advantage_mean", "turn/1/value_mean", "turn/2/value_mean",
    "tokens/generated", "batch/packed_fraction", "batch/max_sample_tokens",
    "timing/generation_s", "timing/training_s", "timing/sync_s", "time/step_s",
)


def run(name: str, overrides: list[str], keep: Path | None) -> dict:
    from rlvr.cli.train import apply_override, read_config
    from rlvr.serve import launch
    from rlvr.trainer import build_config, run_training

    data = read_config(CONFIGS[name])
    training = dict(data["training"])
    for item in overrides:
        apply_override(training, item, data["algo"])
    with tempfile.TemporaryDirectory(prefix=f"ppo-{name}-") as tmp:
        run_dir = (keep / f"ppo-{name}") if keep else Path(tmp) / "run"
        config = build_config(data["algo"], {"output_dir": str(run_dir), "progress": False, **training})
        start = time.perf_counter()
        with launch(model=data["model"], dtype="float32", timeout=900) as server:
            server_s = time.perf_counter() - start
            mark = time.perf_counter()
            run_training(data["env"], data["model"], config, server_url=server.url, run_dir=run_dir,
                         env_args=data.get("env_args", {}))
            training_s = time.perf_counter() - mark
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    return {
        "env": data["env"], "model": data["model"], "config": str(CONFIGS[name].relative_to(REPO)),
        "overrides": overrides, "env_args": data.get("env_args", {}), "training": training,
        "wall_s": {"server_start": server_s, "training": training_s, "per_step_mean": training_s / max(len(steps), 1)},
        "curves": {key: [r.get(key) for r in steps] for key in ("step", *CURVES) if any(key in r for r in steps)},
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpus": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="training KEY=VALUE")
    parser.add_argument("--keep-runs", type=Path, default=None, help="keep the run directories under this folder")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    from rlvr.io import atomic_write_json

    for name in args.envs:
        result = run(name, args.overrides, args.keep_runs)
        atomic_write_json(RESULTS / f"ppo_{name}.json", result)
        curves = result["curves"]
        print(f"{name}: {len(curves['step'])} steps in {result['wall_s']['training']:.0f} s; reward "
              f"{curves['reward'][0]:.3f} -> {curves['reward'][-1]:.3f}; results: benchmarks/results/ppo_{name}.json")


if __name__ == "__main__":
    main()
