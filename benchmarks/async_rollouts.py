"""Asynchronous rollouts measured: for async_steps = k in --ks, on one `rlvr serve`, the same training run under the
same wall-clock budget, then a held-out evaluation of the weights it reached.

Each run trains until --minutes have passed and is then stopped the way a scheduler stops a job (SIGTERM: the step
under way finishes, a checkpoint is written, `Preempted` is raised), and its checkpoint is evaluated on the
environment's held-out split. Recorded per k: steps done and steps per hour; per step the mean generation,
training, weight-sync and trainer-wait seconds (`timing/*`) and the staleness metrics (`async/*`); the CPU seconds
of the trainer process (its producer thread included) and of the server's process group over the run, as cores
busy (CPU seconds / wall seconds: 2.0 is this machine's whole CPU); and the held-out summary.

Settings (--setting): `demo` is `rlvr demo`'s (SmolLM2-135M on vf-triviaqa-search's fact world, MT-GRPO, 16
rollouts per step, held-out: its 24 eval examples x 2); `alfworld` is vf-alfworld's TextWorld-Commonsense backend
(`twc`, a JVM per episode) with SmolLM2-135M, 6 turns, a 2-turn history window, 8 rollouts per step (held-out: 12
games x 2); `choice` is the training tests' choice environment with tiny-random (fast; held-out: 16 prompts x 8
rollouts of the same task).

On paper (`on_separate_devices`): with the server on devices of its own nothing is shared, so a synchronous step
takes G + T + S (generation, training, sync, as measured at k = 0) and a step one batch ahead max(G, T + S) once the
pipeline is full; the ratio is the speed-up the overlap can give. The measured runs share 2 cores, which bounds it.

    .venv/bin/python benchmarks/async_rollouts.py --setting demo --ks 0 1 2 --minutes 6

Writes benchmarks/results/async_rollouts_<setting>.json (atomically).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import mean

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "trainer"))
RESULTS = Path(__file__).resolve().parent / "results"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def setting(name: str):
    """(model, environment, training options, evaluation sampling, eval examples, eval rollouts)."""
    if name == "demo":
        import verifiers as vf

        from rlvr.demo import DemoSettings

        d = DemoSettings()
        env = vf.load_environment(d.env, **d.env_args)
        options = dict(batch_size=d.batch_size, rollouts_per_example=d.rollouts_per_example, micro_batch_size=4,
                       max_tokens_per_turn=d.max_tokens_per_turn, max_seq_len=1024, temperature=d.temperature,
                       learning_rate=d.learning_rate, seed=d.seed)
        sampling = {"temperature": d.temperature, "max_tokens": d.max_tokens_per_turn}
        return d.model, env, options, sampling, d.eval_examples, d.eval_rollouts
    if name == "alfworld":
        import verifiers as vf

        # TextWorld-Commonsense games (the JVM backend), 6 turns, the last 2 turns of history in each prompt
        env = vf.load_environment("vf-alfworld", backend="twc", num_train_examples=32, num_eval_examples=12,
                                  max_turns=6, history_turns=2)
        options = dict(batch_size=8, rollouts_per_example=4, micro_batch_size=2, max_tokens_per_turn=24,
                       max_seq_len=2048, temperature=1.0, learning_rate=5e-5, seed=0)
        return "smollm2-135m", env, options, {"temperature": 1.0, "max_tokens": 24}, 12, 2
    if name == "choice":
        from choice_env import load_environment

        options = dict(batch_size=32, rollouts_per_example=8, micro_batch_size=8, max_tokens_per_turn=2,
                       max_seq_len=256, temperature=1.0, learning_rate=5e-2, seed=0)
        return "tiny-random", load_environment(), options, {"temperature": 1.0, "max_tokens": 2}, 16, 8
    raise SystemExit(f"unknown setting {name!r}: demo, alfworld or choice")


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def server_processes(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def train_for(minutes: float, k: int, model: str, env, options: dict, server, run_dir: Path) -> dict:
    """Train until `minutes` pass (then SIGTERM: a checkpoint at the step boundary); CPU and wall time."""
    from rlvr.trainer import build_config, run_training
    from rlvr.trainer.faults import Preempted

    config = build_config("mt_grpo", dict(
        options, output_dir=str(run_dir), max_steps=10_000, async_steps=k, save_steps=10_000, logging_steps=1,
        report_to="none", progress=False, use_lora=False, num_logged_token_groups=0, num_iterations=1,
    ))
    trainer_proc, served = psutil.Process(), server_processes(server.pid)
    cpu_before = (cpu_seconds([trainer_proc]), cpu_seconds(served))
    timer = threading.Timer(minutes * 60, os.kill, (os.getpid(), signal.SIGTERM))
    start = time.perf_counter()
    timer.start()
    try:
        run_training(env, model, config, server_url=server.url)
        raise RuntimeError("training ended before its wall-clock budget: raise max_steps")
    except Preempted:
        pass
    finally:
        timer.cancel()
    wall = time.perf_counter() - start
    trainer_cpu = cpu_seconds([trainer_proc]) - cpu_before[0]
    server_cpu = cpu_seconds(served) - cpu_before[1]
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    (checkpoint,) = run_dir.glob("checkpoint-*")
    # a key a step lacks (train/* when the step forwarded no sample: skip_zero_advantage) is averaged where present
    per_step = {key: mean(values) if (values := [r[key] for r in steps if key in r]) else None for key in (
        "timing/generation_s", "timing/training_s", "timing/sync_s", "timing/wait_for_batch_s", "time/step_s",
        "async/staleness_mean", "async/staleness_max", "async/stale_token_fraction",
        "async/mixed_version_rollout_fraction", "train/clipped", "turn_reward", "reward")}
    return {
        "k": k, "steps": len(steps), "wall_s": wall, "steps_per_hour": 3600 * len(steps) / wall,
        "per_step_mean": per_step, "checkpoint": checkpoint,
        "cores_busy": {"trainer": trainer_cpu / wall, "server": server_cpu / wall},
        "curve": [{"step": r["step"], "reward": r.get("reward"), "turn_reward": r.get("turn_reward"),
                   "staleness_mean": r.get("async/staleness_mean")} for r in steps],
    }


def held_out(env, server, checkpoint: Path | None, sampling: dict, examples: int, rollouts: int) -> dict:
    from rlvr import evaluation
    from rlvr.serve import load_saved_weights

    if checkpoint is not None:
        load_saved_weights(server.url, checkpoint)
    results = evaluation.run_rollouts(env, base_url=server.base_url, model=server.model, num_examples=examples,
                                      rollouts_per_example=rollouts, sampling_args=sampling)
    return {name: dataclasses.asdict(stat) for name, stat in evaluation.summarize(evaluation.rollouts_of(results)).items()}


def on_separate_devices(base: dict) -> dict:
    g, t, s = (base["per_step_mean"][k] for k in ("timing/generation_s", "timing/training_s", "timing/sync_s"))
    synchronous, overlapped = g + t + s, max(g, t + s)
    return {"generation_s": g, "training_s": t, "sync_s": s, "synchronous_step_s": synchronous,
            "one_batch_ahead_step_s": overlapped, "speedup": synchronous / overlapped,
            "arithmetic": f"(G + T + S) / max(G, T + S) = ({g:.1f} + {t:.1f} + {s:.1f}) / max({g:.1f}, "
                          f"{t:.1f} + {s:.1f}) = {synchronous / overlapped:.2f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", default="demo", choices=("demo", "alfworld", "choice"))
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from rlvr.io import atomic_write_json
    from rlvr.serve import launch

    model, env, options, sampling, examples, rollouts = setting(args.setting)
    out = args.out or RESULTS / f"async_rollouts_{args.setting}.json"
    runs = []
    with tempfile.TemporaryDirectory() as tmp, launch(model=model, extra_args=["--dtype", "float32"]) as server:
        base = held_out(env, server, None, sampling, examples, rollouts)
        for k in args.ks:
            print(f"async_steps={k}: training for {args.minutes} min", flush=True)
            run = train_for(args.minutes, k, model, env, options, server, Path(tmp) / f"k{k}")
            run["held_out"] = held_out(env, server, run.pop("checkpoint"), sampling, examples, rollouts)
            print(json.dumps({key: run[key] for key in ("k", "steps", "steps_per_hour", "cores_busy")}), flush=True)
            runs.append(run)
    report = {
        "benchmark": "async_rollouts", "setting": args.setting, "model": model, "options": options,
        "minutes_per_run": args.minutes, "held_out_before": base, "runs": runs,
        "on_separate_devices": on_separate_devices(next(r for r in runs if r["k"] == 0)) if 0 in args.ks else None,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_end": os.getloadavg()},
        "command": " ".join(["benchmarks/async_rollouts.py", *sys.argv[1:]]),
    }
    atomic_write_json(out, report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
