"""OREO at CPU scale: base, SFT, rejection sampling, OREO and OREO + value-guided beam search, every stage through
the `rlvr` CLI, on one environment. Stages whose output exists are skipped, so the script resumes after a crash.

    python benchmarks/oreo_compare.py arithmetic            # vf-arithmetic with SmolLM2-135M (the committed run)
    python benchmarks/oreo_compare.py arithmetic --model tiny-random --out runs/oreo-tiny --small   # a smoke run

Pipeline (the paper's, Sec. 5 and App. A): expert data (reference solutions) -> SFT of the base model -> N samples
per training prompt from the SFT model (`rlvr collect`) -> rejection sampling (SFT of the SFT model on the successful
samples) and OREO (from the SFT model on all samples) -> greedy evaluation of every model, and OREO's policy with
its value model guiding a step-level beam search. Results: benchmarks/results/oreo_<task>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RLVR = [sys.executable, "-m", "rlvr.cli"]

TASKS = {
    "arithmetic": {
        "env": "vf-arithmetic",
        "env_args": {"num_train_examples": 256, "num_eval_examples": 64},
        "expert": [sys.executable, "-m", "vf_arithmetic.expert", "{out}/expert", "--split", "train", "-n", "64"],
        "max_tokens": 128,
    },
}


def stages(task: dict, model: str, out: str, small: bool) -> list[tuple[str, str, list[str]]]:
    """(name, output that marks it done, command) in order."""
    env_args = json.dumps(task["env_args"])
    # sized for 2 shared CPU cores (one SmolLM2 optimizer step over 16 short trajectories takes minutes there)
    n_collect, n_eval = ("8", "8") if small else ("16", "32")
    batch = ["--set", "batch_size=16", "--set", "micro_batch_size=8"] if not small else [
        "--set", "batch_size=4", "--set", "micro_batch_size=4"]
    quiet = ["--set", "progress=false"]
    evaluate = [*RLVR, "evaluate", "--env", task["env"], "--env-args", env_args, "-n", n_eval, "-r", "1",
                "--temperature", "0", "--max-tokens", str(task["max_tokens"])]
    expert = [a.format(out=out) for a in task["expert"]] + ["--env-args", env_args]
    return [
        ("expert data", f"{out}/expert/dataset", expert),
        ("SFT on expert data", f"{out}/sft/final",
         [*RLVR, "train", "--algo", "sft", "--dataset", f"{out}/expert", "--model", model, "-o", f"{out}/sft",
          *batch, *quiet, "--set", "num_train_epochs=1", "--set", "learning_rate=2e-5"]),
        ("collect from the SFT model", f"{out}/collect/dataset",
         [*RLVR, "collect", "--env", task["env"], "--env-args", env_args, "--model", f"{out}/sft/final",
          "-n", n_collect, "-r", "4", "--temperature", "1.0", "--max-tokens", str(task["max_tokens"]),
          "-o", f"{out}/collect"]),
        ("rejection sampling", f"{out}/rs/final",
         [*RLVR, "train", "--algo", "sft", "--dataset", f"{out}/collect", "--model", f"{out}/sft/final",
          "-o", f"{out}/rs", *batch, *quiet, "--set", "num_train_epochs=1", "--set", "learning_rate=5e-6",
          "--set", "min_reward=1.0"]),
        ("OREO", f"{out}/oreo/value",
         [*RLVR, "train", "--algo", "oreo", "--dataset", f"{out}/collect", "--model", f"{out}/sft/final",
          "-o", f"{out}/oreo", "--set", "batch_size=8", "--set", "micro_batch_size=4", *quiet,
          # 4 steps (32 trajectories): what 2 shared cores allow; the value model's lr is the released
          # DeepSeekMath script's critic lr (1e-4), the policy's the paper's (5e-6)
          *(["--set", "max_steps=4"] if not small else []), "--set", "value_learning_rate=1e-4",
          # a checkpoint per step, resumed: the shared machine's OOM killer ended two attempts
          "--set", "save_steps=1", "--resume"]),
        ("evaluate base", f"{out}/eval/base/summary.json", [*evaluate, "--model", model, "-o", f"{out}/eval/base"]),
        ("evaluate SFT", f"{out}/eval/sft/summary.json",
         [*evaluate, "--model", f"{out}/sft/final", "-o", f"{out}/eval/sft"]),
        ("evaluate rejection sampling", f"{out}/eval/rs/summary.json",
         [*evaluate, "--model", f"{out}/rs/final", "-o", f"{out}/eval/rs"]),
        ("evaluate OREO", f"{out}/eval/oreo/summary.json",
         [*evaluate, "--model", f"{out}/oreo/final", "-o", f"{out}/eval/oreo"]),
        ("evaluate OREO + beam search", f"{out}/eval/oreo_beam/summary.json",
         [*evaluate, "--model", f"{out}/oreo/final", "-o", f"{out}/eval/oreo_beam", "--search", "beam",
          "--value-model", f"{out}/oreo/value", "--beam-width", "4"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", default=None, help="run directory (default runs/oreo-<task>)")
    parser.add_argument("--small", action="store_true", help="a few prompts: a smoke run, not a result")
    parser.add_argument("--until", default=None, help="stop after the stage whose name starts with this")
    parser.add_argument("--report", action="store_true", help="write the results of the finished stages only")
    parser.add_argument("--only", default=None, help="run only the stage of this name (stages whose inputs exist "
                        "can run side by side: e.g. the evaluations while OREO trains)")
    args = parser.parse_args()
    task = TASKS[args.task]
    out = args.out or f"runs/oreo-{args.task}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "WANDB_MODE": "offline"}
    log = []
    if args.report:
        log = [{"stage": name, "command": shell(command)} for name, _, command in stages(task, args.model, out,
                                                                                          args.small)]
        return report(args.task, task, out, args.model, log)
    for name, done, command in stages(task, args.model, out, args.small):
        if args.only and name != args.only:
            continue
        shown = shell(command)
        if Path(done).exists():
            print(f"[skip] {name}: {done} exists")
        else:
            print(f"[run] {name}: {shown}", flush=True)
            start = time.time()
            subprocess.run(command, check=True, env=env, cwd=ROOT)
            log.append({"stage": name, "seconds": round(time.time() - start, 1)})
        log.append({"stage": name, "command": shown})
        if (args.until and name.startswith(args.until)) or args.only:
            return
    report(args.task, task, out, args.model, log)


def shell(command: list[str]) -> str:
    """The command as a person types it (`rlvr ...`, `python -m ...`)."""
    command = ["rlvr", *command[3:]] if command[:3] == RLVR else command
    return shlex.join(command).replace(sys.executable, "python")


def report(name: str, task: dict, out: str, model: str, log: list[dict]) -> None:
    rows = {}
    for label, key in (("base", "base"), ("SFT", "sft"), ("rejection sampling", "rs"), ("OREO", "oreo"),
                       ("OREO + beam search (value model, B=4)", "oreo_beam")):
        path = Path(out, "eval", key, "summary.json")
        if not path.exists():  # a stage that did not finish: reported as missing, not left out
            rows[label] = None
            continue
        summary = json.loads(path.read_text())
        rows[label] = {k: summary[k] for k in ("reward", "turns") if k in summary}
    collected = [json.loads(line) for line in Path(out, "collect", "predictions.jsonl").read_text().splitlines()]
    result = {
        "task": name, "env": task["env"], "env_args": task["env_args"], "model": model, "run_dir": out,
        "collected": {"trajectories": len(collected),
                      "success_rate": sum(r["reward"] >= 1.0 for r in collected) / len(collected)},
        "results": rows, "stages": log,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"oreo_{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# OREO at CPU scale: {task['env']} x {model}", "",
             "| model | reward (mean +/- s.e.) | n |", "|---|---|---|"]
    for label, stats in rows.items():
        if stats is None:
            lines.append(f"| {label} | not finished | - |")
            continue
        r = stats["reward"]
        lines.append(f"| {label} | {r['mean']:.3f} +/- {r['stderr']:.3f} | {r['n']} |")
    lines += ["", "Commands (in order):", "", "```bash"]
    lines += [s["command"] for s in log if "command" in s] + ["```", ""]
    (RESULTS / f"oreo_{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
