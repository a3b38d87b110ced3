"""How fast a held-out evaluation runs with more rollouts in flight (`run_rollouts(max_concurrent=...)`, a study's
`[evaluation] max_concurrent`, `rlvr evaluate --max-concurrent`).

One `rlvr serve` for the whole benchmark; each round evaluates the same held-out examples with one concurrency,
seeded (every request's seed comes from the example, the rollout and the turn), after the server's prefix cache
is dropped (`/reset_prefix_cache`) so that no round reuses another's KV entries. Rounds alternate their order per
repeat (8, 16, 32, then 32, 16, 8, ...) so that load from other processes falls on all alike. Reported per round:
wall time, completion tokens, tokens per second, and whether the rollouts equal the first round's (seeded sampling:
they should, up to the server's batch numerics).

    python benchmarks/eval_concurrency.py --model runs/pipeline-alfworld/sft/cells/sft/seed-0/train/final \\
        --env vf-alfworld --env-args '{"backend": "alfworld", "max_turns": 10, ...}' --examples 8 --rollouts 2

Writes benchmarks/results/eval_concurrency_<env>.json (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import time
from pathlib import Path

import httpx

from rlvr import evaluation
from rlvr.io import atomic_write_json
from rlvr.serve import launch
from rlvr.serve.protocol import RESET_PREFIX_CACHE_PATH

REPO = Path(__file__).resolve().parents[1]


def completion_tokens(results: dict) -> int:
    """The tokens the server generated, from each answer's usage."""
    return sum(getattr(getattr(step.get("response"), "usage", None), "completion_tokens", 0) or 0
               for state in results["state"] for step in state["trajectory"])


def completions(results: dict) -> list[str]:
    return [json.dumps(state["completion"], sort_keys=True, default=str) for state in results["state"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--env-args", default="{}")
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--concurrency", default="8,16", help="comma-separated max_concurrent values")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--kv-cache-gb", default="2")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import verifiers as vf

    env = vf.load_environment(args.env, **json.loads(args.env_args))
    levels = [int(c) for c in args.concurrency.split(",")]
    sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}
    rounds = []
    with launch(args.model, extra_args=["--kv-cache-gb", args.kv_cache_gb], dtype=args.dtype, timeout=900) as server:
        first: list[str] | None = None
        for repeat in range(args.repeats):
            for concurrency in (levels if repeat % 2 == 0 else levels[::-1]):
                httpx.post(f"{server.url}{RESET_PREFIX_CACHE_PATH}", timeout=120).raise_for_status()
                start = time.perf_counter()
                results = evaluation.run_rollouts(
                    env, base_url=server.base_url, model=server.model, num_examples=args.examples,
                    rollouts_per_example=args.rollouts, sampling_args=dict(sampling), max_concurrent=concurrency,
                    sampling_seed=0)
                seconds = time.perf_counter() - start
                tokens = completion_tokens(results)
                texts = completions(results)
                first = first or texts
                rounds.append({"repeat": repeat, "max_concurrent": concurrency, "seconds": seconds, "tokens": tokens,
                               "tokens_per_s": tokens / seconds, "reward": sum(results["reward"]) / len(texts),
                               "same_rollouts_as_first_round": sum(a == b for a, b in zip(texts, first, strict=True)),
                               "rollouts": len(texts), "load_average": os.getloadavg()})
                print(json.dumps(rounds[-1]))
    by_level = {c: [r["seconds"] for r in rounds if r["max_concurrent"] == c] for c in levels}
    out = args.out or REPO / "benchmarks" / "results" / f"eval_concurrency_{args.env.replace('-', '_')}.json"
    atomic_write_json(out, {
        "command": "python benchmarks/eval_concurrency.py " + " ".join(
            f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in vars(args).items() if v is not None),
        "rounds": rounds,
        "mean_seconds": {str(c): sum(s) / len(s) for c, s in by_level.items()},
        "speedup_over_first": {str(c): (sum(by_level[levels[0]]) / len(by_level[levels[0]])) / (sum(s) / len(s))
                               for c, s in by_level.items()},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    })
    print(f"written: {out}")


if __name__ == "__main__":
    main()
