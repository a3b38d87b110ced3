"""Sandbox overhead per call: rlvr.sandbox.run_python against a bare interpreter start.

Times, per call and sequentially (wall clock, median and p90 over --repeats calls):
  bare        subprocess.run([python, "-I", "-c", program]) with the interpreter the sandbox uses
  sandbox     run_python(program): launcher, namespaces, private uid, rlimits, temp dir, status pipe
  fallback    run_python(program, SandboxConfig(namespaces=False)): sockets blocked, uid-wide kill
The overhead is sandbox - bare (medians). Writes benchmarks/results/sandbox_overhead.json (atomically).
Speed is measured here, never asserted in tests. The CPU is shared: compare numbers taken in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from rlvr.io import atomic_write_json
from rlvr.sandbox import SandboxConfig, run_python
from rlvr.sandbox.core import find_python

REPO = Path(__file__).resolve().parents[1]
# A typical GSM8K tool call: a few lines of arithmetic and a print.
PROGRAM = "weeks = 12 * 2\ndays = weeks * 6\nprint(days * 195)\n"


def timed(call: Callable[[], object], repeats: int) -> dict:
    call()  # warm the page cache and imports
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return {
        "median_ms": 1000 * statistics.median(samples),
        "p90_ms": 1000 * samples[int(0.9 * (len(samples) - 1))],
        "min_ms": 1000 * samples[0],
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "sandbox_overhead.json")
    args = parser.parse_args()

    probe = run_python("print(1)")
    python = find_python(unprivileged=probe.isolation.uid is not None)
    fallback = SandboxConfig(namespaces=False)
    results = {
        "bare": timed(
            lambda: subprocess.run([python, "-I", "-c", PROGRAM], capture_output=True, check=True),
            args.repeats,
        ),
        "sandbox": timed(lambda: run_python(PROGRAM), args.repeats),
        "fallback": timed(lambda: run_python(PROGRAM, fallback), args.repeats),
    }
    overhead = results["sandbox"]["median_ms"] - results["bare"]["median_ms"]
    report = {
        "program": PROGRAM,
        "python": python,
        "isolation": vars(probe.isolation),
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],  # other work on the machine inflates every number
        "results": results,
        "overhead_median_ms": overhead,
    }
    atomic_write_json(args.out, report)
    print(f"{'mode':<10} {'median ms':>10} {'p90 ms':>8} {'min ms':>8}")
    for mode, r in results.items():
        print(f"{mode:<10} {r['median_ms']:>10.1f} {r['p90_ms']:>8.1f} {r['min_ms']:>8.1f}")
    print(
        f"sandbox overhead per call (median, vs bare interpreter): {overhead:.1f} ms; isolation {probe.isolation}"
    )


if __name__ == "__main__":
    main()
