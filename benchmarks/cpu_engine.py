"""`rlvr serve --cpu-engine worker` (vLLM's CPU layout) against `--cpu-engine inline` (the model in the engine core).

Each round starts one server per layout, one after the other (worker, inline, worker, ...), so that load from other
processes falls on both alike, and measures: the wall time until `/health` answers, the CPU seconds the server's
processes used to get there, then one batch of chat requests (as benchmarks/serve_throughput.py: --num-prompts
requests, --concurrency at a time, exactly --max-tokens tokens each, greedy): tokens/s and the CPU seconds each process
spent on it (the engine core's polling of its worker shows there). The load average before each start is recorded:
on a shared machine these are numbers to compare within a run, not across machines.

Writes benchmarks/results/cpu_engine_<model>.json (atomically).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_throughput import one_round  # noqa: E402

from rlvr.io import atomic_write_json  # noqa: E402
from rlvr.serve import launch  # noqa: E402
from rlvr.serve.launch import group_processes  # noqa: E402
from rlvr.study.records import machine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = ("worker", "inline")


def cpu_seconds(group: int) -> dict[str, float]:
    """User + system CPU seconds of each live process of a server's process group, by its title and pid."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for pid in group_processes(group):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        seconds[f"{title.rsplit('/', 1)[-1]} {pid}"] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def one_layout(layout: str, args: argparse.Namespace) -> dict:
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with launch(args.model, extra_args=["--cpu-engine", layout, "--kv-cache-gb", "0.5"], dtype=args.dtype,
                timeout=args.timeout) as server:
        start_s = time.perf_counter() - started
        at_start = cpu_seconds(server.pid)
        asyncio.run(one_round(server.base_url, server.model, 4, 4, 8))  # warm-up: lazy initialisation
        before = cpu_seconds(server.pid)
        result = asyncio.run(one_round(server.base_url, server.model, args.num_prompts, args.concurrency,
                                       args.max_tokens))
        during = {name: round(seconds - before.get(name, 0.0), 2) for name, seconds in cpu_seconds(server.pid).items()}
    return {"layout": layout, "load_average_before": round(load, 2), "start_s": round(start_s, 1),
            "start_cpu_s": round(sum(at_start.values()), 1), "processes": len(at_start),
            "tokens_per_s": round(result["tokens_per_s"], 1), "generate_s": round(result["seconds"], 2),
            "generate_cpu_s": round(sum(during.values()), 2), "generate_cpu_s_by_process": during}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for each server to start")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/cpu_engine_<model>.json")
    args = parser.parse_args()

    runs = []
    for round_index in range(args.rounds):
        for layout in LAYOUTS:
            run = one_layout(layout, args)
            runs.append({"round": round_index, **run})
            print(f"round {round_index} {layout:>6}: started in {run['start_s']} s on {run['start_cpu_s']} CPU s "
                  f"({run['processes']} processes); {run['tokens_per_s']} tokens/s on {run['generate_cpu_s']} CPU s",
                  flush=True)
    median = {layout: {key: statistics.median(r[key] for r in runs if r["layout"] == layout)
                       for key in ("start_s", "start_cpu_s", "tokens_per_s", "generate_cpu_s")} for layout in LAYOUTS}
    out = args.out or REPO / "benchmarks" / "results" / f"cpu_engine_{args.model}.json"
    atomic_write_json(out, {"model": args.model, "dtype": args.dtype, "num_prompts": args.num_prompts,
                            "concurrency": args.concurrency, "max_tokens": args.max_tokens,
                            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "median": median, "runs": runs,
                            "machine": machine()})
    for layout in LAYOUTS:
        print(f"{layout:>6} (median): {median[layout]}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
