"""PPO with a critic (rlvr.trainer.ppo) on CPU with SmolLM2-135M: learning curves and wall time of real runs.

For each environment: start an fp32 `rlvr serve` of the model (the trainer is fp32, so the sampler's log-probs, the
PPO "old policy", match the trainer's), train with the repository's CPU config (configs/train/<name>_ppo_cpu.toml,
optionally overridden with --set), and record every step's metrics from the run's metrics.jsonl.

    python benchmarks/ppo_cpu.py [--envs triviaqa webshop] [--set max_steps=6] [--keep-runs runs/]
    python benchmarks/ppo_cpu.py --envs webshop --summarize runs/ppo-webshop    # results from a kept run

Writes benchmarks/results/ppo_<env>.json. Each run takes one to several hours on 2 shared cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = {"triviaqa": REPO / "configs/train/triviaqa_ppo_cpu.toml", "webshop": REPO / "configs/train/webshop_ppo_cpu.toml"}
NOT_CURVES = ("time", "epoch", "step", "learning_rate", "iteration")


def train(name: str, overrides: list[str], run_dir: Path, kv_cache_gb: float) -> float:
    """One training run with its own fp32 server (continued from run_dir's last checkpoint, if any); returns the
    server's start-up seconds."""
    from rlvr.cli.train import apply_override, read_config
    from rlvr.serve import launch
    from rlvr.trainer import build_config, run_training

    data = read_config(CONFIGS[name])
    training = dict(data["training"])
    for item in overrides:
        apply_override(training, item, data["algo"])
    config = build_config(data["algo"], {"output_dir": str(run_dir), "progress": False, **training})
    start = time.perf_counter()
    with launch(model=data["model"], dtype="float32", extra_args=["--kv-cache-gb", str(kv_cache_gb)],
                timeout=900) as server:
        server_s = time.perf_counter() - start
        # resume=True: a run killed on this shared machine (the OOM killer) continues from its last checkpoint
        run_training(data["env"], data["model"], config, server_url=server.url, run_dir=run_dir,
                     env_args=data.get("env_args", {}), resume=True)
    return server_s


def summarize(name: str, run_dir: Path, server_s: float | None) -> dict:
    """The run's resolved settings, every numeric per-step metric as a curve, and its wall time."""
    config = json.loads((run_dir / "config.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    end = next((r for r in reversed(records) if "train_runtime" in r), None)  # a resumed run: its last segment
    keys = sorted({k for r in steps for k, v in r.items() if isinstance(v, (int, float)) and k not in NOT_CURVES})
    training = config["training"]
    return {
        "env": config["environment"], "model": config["model"], "config": str(CONFIGS[name].relative_to(REPO)),
        "env_args": config["env_args"],
        "settings": {k: training[k] for k in (
            "max_steps", "batch_size", "rollouts_per_example", "max_tokens", "temperature", "learning_rate",
            "use_lora", "gae", "gamma", "lam", "turn_gamma", "turn_lam", "kl_reward_coef", "critic_learning_rate",
            "critic_use_lora", "value_clip", "seed")},
        "resumed_from": config.get("resumed_from"),
        "wall_s": {"server_start": server_s, "training": end["train_runtime"] if end else None,
                   "steps": math.fsum(r.get("time/step_s", 0.0) for r in steps),  # every segment's steps
                   "per_step": [r.get("time/step_s") for r in steps]},
        "step": [r["step"] for r in steps],
        "curves": {k: [r.get(k) for r in steps] for k in keys},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_at_end": os.getloadavg()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="training KEY=VALUE")
    parser.add_argument("--keep-runs", type=Path, default=None, help="keep the run directories under this folder")
    parser.add_argument("--kv-cache-gb", type=float, default=1.0, help="the server's KV cache (enough for one batch)")
    parser.add_argument("--summarize", type=Path, default=None, help="only write the results of this kept run")
    args = parser.parse_args()
    from rlvr.io import atomic_write_json

    for name in args.envs:
        with tempfile.TemporaryDirectory(prefix=f"ppo-{name}-") as tmp:
            if args.summarize:
                run_dir, server_s = args.summarize, None
            else:
                run_dir = (args.keep_runs / f"ppo-{name}") if args.keep_runs else Path(tmp) / "run"
                server_s = train(name, args.overrides, run_dir, args.kv_cache_gb)
            result = summarize(name, run_dir, server_s)
        atomic_write_json(RESULTS / f"ppo_{name}.json", result)
        reward = result["curves"]["reward"]
        print(f"{name}: {len(result['step'])} steps in {result['wall_s']['training'] or 0:.0f} s; reward "
              f"{reward[0]:.3f} -> {reward[-1]:.3f}; results: benchmarks/results/ppo_{name}.json")


if __name__ == "__main__":
    main()
