"""SmolLM2-135M on v1-calculator (a verifiers v1 environment, through rlvr's bridge): a turn-level estimator
(MT-GRPO, turn rewards from trace.info) and GRPO-OR (the outcome on every turn) side by side, same seed, same
settings, on one `rlvr serve --enable-scale-out` of SmolLM2 (weights pushed by each run at its start).

Per run and step: the outcome (correct answers), the mean turn reward, the fraction of rollouts with a tool result,
turns per rollout, and the step's wall time (generation through the bridge, training). Writes
benchmarks/results/v1_calculator.json.

    .venv/bin/python benchmarks/v1_calculator.py [--steps 8] [--algos mt_grpo grpo] [--model DIR]

`--model`: the model both runs start from: a warm start that calls the tool (SFT on v1-calculator's scripted
expert, docs/v1.md "A warm start"), since the base SmolLM2 answers in one turn without a call and then turn-level
and outcome credit coincide.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from rlvr.io import atomic_write_json
from rlvr.serve import launch
from rlvr.trainer import MTGRPOConfig, run_training
from rlvr.v1 import V1Environment
from rlvr.v1.bridge import SERVE_FLAGS

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "results" / "v1_calculator.json"
# sums and differences of two operands 1-9: on the default tasks (2-3 operands of 1-99) SmolLM2-135M answered none
# of 32 rollouts over 2 steps right, in one turn without a tool call (2026-11-27), so no group had a signal
ENV_ARGS = {"taskset": {"num_tasks": 64, "seed": 0, "max_terms": 2, "max_operand": 9}}
# lr 5e-5 as the v1 credit-suite port (configs/study/credit_suite_v1_port.toml), where 8 steps moved the policy; at
# 1e-5 the two runs from the warm start logged the same reward, turn rewards, turns and tool use at all 8 steps
# (2026-11-28): they share the per-call seeds, and their updates were apparently too small to flip sampled tokens
SETTINGS = dict(seed=0, batch_size=16, rollouts_per_example=4, micro_batch_size=8, max_tokens_per_turn=96,
                max_seq_len=1024, temperature=1.0, learning_rate=5e-5, report_to="none", logging_steps=1,
                progress=False, save_steps=10_000)


def step_records(run_dir: Path) -> list[dict]:
    keep = ("reward", "correct_answer", "turn/1/reward", "turn/2/reward", "tool_result_fraction", "turns", "errors",
            "timing/generation_s", "timing/training_s", "time/step_s")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: m[k] for k in keep if k in m} for m in metrics if "reward" in m]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--algos", nargs="+", default=["mt_grpo", "grpo"])
    parser.add_argument("--model", default="smollm2-135m",
                        help="where both runs start: a registered name or a model directory (an SFT run's final/)")
    args = parser.parse_args()
    runs = {}
    with launch(model=args.model, extra_args=[*SERVE_FLAGS, "--dtype", "float32"], timeout=1200) as server, \
            tempfile.TemporaryDirectory() as tmp:
        for algo in args.algos:
            env = V1Environment("v1:v1-calculator", ENV_ARGS)
            run_dir = Path(tmp) / algo
            start = time.perf_counter()
            try:
                run_training(env, args.model, MTGRPOConfig(algo=algo, max_steps=args.steps,
                                                               output_dir=str(run_dir), **SETTINGS),
                             server_url=server.url)
            finally:
                env.close()
            steps = step_records(run_dir)
            runs[algo] = {"wall_s": round(time.perf_counter() - start, 1), "steps": steps}
            print(algo, json.dumps(steps[-1]), flush=True)
            atomic_write_json(OUT, {  # after each run: a cut-short benchmark keeps the runs it finished
                "what": "SmolLM2-135M trained on v1-calculator through the verifiers v1 bridge, per estimator",
                "command": f".venv/bin/python benchmarks/v1_calculator.py --steps {args.steps} --algos "
                           f"{' '.join(args.algos)} --model {args.model}",
                "model": args.model,
                "env": "v1:v1-calculator", "env_args": ENV_ARGS, "settings": SETTINGS, "steps": args.steps,
                "machine": {"cpu": platform.processor() or platform.machine(), "note": "shared CPU machine, 2 cores"},
                "runs": runs,
            })
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
