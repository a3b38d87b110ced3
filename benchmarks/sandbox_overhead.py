"""Sandbox cost per call and calls per second: rlvr.sandbox.run_python against a bare interpreter start.

Measures, for each mode:
  latency     wall clock of one call at a time (median, p90, min over --repeats calls; the modes take
              turns call by call, so the other sessions' load falls on all of them alike)
  throughput  calls per second with 1, 8 and 32 calls in flight (asyncio; what an environment running that
              many rollouts at once sees), over --calls-per-level calls or 4 per slot, whichever is more
  cpu         CPU milliseconds per call of this process and everything it starts (sandbox server and
              call processes included), from a cgroup-v1 cpuacct group of our own; null where none can be
              made (not root, no cpuacct). On 2 shared cores this, not latency, bounds calls per second
Modes:
  bare        `python -I -c program` with the interpreter sandboxed programs run on (asyncio subprocess)
  sandbox     run_python / arun_python with the default config
  fallback    SandboxConfig(namespaces=False): what a machine without namespaces gets
  previous, previous-fallback   the same two through an earlier design's `core.py` (--previous), e.g. the
              v1 launcher (one process per call), extracted with
              `git archive 8a9074c src | tar -x -C /tmp/v1` and passed as /tmp/v1/src/rlvr/sandbox/core.py
The overhead is sandbox - bare (latency medians); negative means a sandboxed call is faster than starting a
bare interpreter (the pre-forked server never starts one). Writes benchmarks/results/sandbox_overhead.json
(atomically). sandbox_overhead_v1.json there is this script's run on the untouched v1 tree, before v2.
Speed is measured here, never asserted in tests. The 2 cores are shared: compare numbers taken in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rlvr.io import atomic_write_json
from rlvr.sandbox import SandboxConfig, arun_python, run_python

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# A typical GSM8K tool call: a few lines of arithmetic and a print.
PROGRAM = "weeks = 12 * 2\ndays = weeks * 6\nprint(days * 195)\n"
CONCURRENCY = (1, 8, 32)


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def own_cpuacct_group() -> Path:
    """The cpuacct group this process is in (cgroup v1), from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return CPUACCT / path.lstrip("/")
    raise OSError("no cgroup-v1 cpuacct controller for this process")


class CpuMeter:
    """CPU used by this process and all its descendants, through a cpuacct group nested in our own."""

    def __init__(self) -> None:
        self.parent = own_cpuacct_group()
        self.group = self.parent / f"rlvr-sandbox-bench-{os.getpid()}"
        self.group.mkdir()
        (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def ms(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e6

    def close(self) -> None:
        """Move every process still in the group (us, the sandbox server) back to where we came from."""
        while pids := (self.group / "cgroup.procs").read_text().split():
            for pid in pids:
                try:
                    (self.parent / "cgroup.procs").write_text(pid)
                except ProcessLookupError:
                    pass  # a call's process that just ended
        self.group.rmdir()


def cpu_meter() -> CpuMeter | None:
    try:
        return CpuMeter()
    except OSError:
        return None


def cpu_per_call(call: Callable[[], object], meter: CpuMeter | None, calls: int) -> float | None:
    if meter is None:
        return None
    start = meter.ms()
    for _ in range(calls):
        call()
    return (meter.ms() - start) / calls


def latencies(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict]:
    """Wall clock per call for each mode, the modes interleaved call by call so that the load other
    sessions put on the shared cores falls on all of them alike."""
    for call in calls.values():
        call()  # warm the page cache, imports and (for the sandbox) its server
    samples: dict[str, list[float]] = {mode: [] for mode in calls}
    for _ in range(repeats):
        for mode, call in calls.items():
            start = time.perf_counter()
            call()
            samples[mode].append(time.perf_counter() - start)
    return {mode: summary(sorted(s)) for mode, s in samples.items()}


def summary(samples: list[float]) -> dict:
    return {
        "median_ms": 1000 * statistics.median(samples),
        "p90_ms": 1000 * samples[int(0.9 * (len(samples) - 1))],
        "min_ms": 1000 * samples[0],
        "repeats": len(samples),
    }


def throughput(call: Callable[[], Awaitable[object]], in_flight: int, calls: int) -> float:
    """Calls per second with `in_flight` calls running at once."""

    async def drive() -> float:
        slots = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with slots:
                await call()

        await asyncio.gather(*(one() for _ in range(in_flight)))  # warm-up round
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return calls / (time.perf_counter() - start)

    return asyncio.run(drive())


def bare_async(python: str) -> Callable[[], Awaitable[object]]:
    async def call() -> None:
        proc = await asyncio.create_subprocess_exec(
            python, "-I", "-c", PROGRAM, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        await proc.communicate()

    return call


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--calls-per-level", type=int, default=64)
    parser.add_argument("--python", default=shutil.which("python3", path=os.defpath), help="bare interpreter")
    parser.add_argument("--out", type=Path, default=RESULTS / "sandbox_overhead.json")
    parser.add_argument(
        "--note", default="", help="what was measured, e.g. which sandbox source was imported"
    )
    parser.add_argument("--previous", type=Path, help="core.py of an earlier sandbox design to compare with")
    args = parser.parse_args()

    load_at_start = os.getloadavg()[0]
    meter = cpu_meter()  # before the sandbox server starts, so it is inside the group too
    probe = run_python("print(1)")
    fallback = SandboxConfig(namespaces=False)
    modes: dict[str, tuple[Callable[[], object], Callable[[], Awaitable[object]]]] = {
        "bare": (
            lambda: subprocess.run([args.python, "-I", "-c", PROGRAM], capture_output=True, check=True),
            bare_async(args.python),
        ),
        "sandbox": (lambda: run_python(PROGRAM), lambda: arun_python(PROGRAM)),
        "fallback": (lambda: run_python(PROGRAM, fallback), lambda: arun_python(PROGRAM, fallback)),
    }
    if args.previous:
        old = load_module("previous_sandbox", args.previous)
        old_fallback = old.SandboxConfig(namespaces=False)
        modes["previous"] = (lambda: old.run_python(PROGRAM), lambda: old.arun_python(PROGRAM))
        modes["previous-fallback"] = (
            lambda: old.run_python(PROGRAM, old_fallback),
            lambda: old.arun_python(PROGRAM, old_fallback),
        )
    results = latencies({mode: calls[0] for mode, calls in modes.items()}, args.repeats)
    for mode, (sync_call, async_call) in modes.items():
        results[mode]["cpu_ms_per_call"] = cpu_per_call(sync_call, meter, args.repeats)
        results[mode]["calls_per_second"] = {
            str(n): throughput(async_call, n, max(args.calls_per_level, 4 * n)) for n in CONCURRENCY
        }
    if meter is not None:
        meter.close()
    overhead = {m: results[m]["median_ms"] - results["bare"]["median_ms"] for m in results if m != "bare"}
    report = {
        "program": PROGRAM,
        "note": args.note,
        "previous": str(args.previous) if args.previous else None,
        "sandbox_module": sys.modules[run_python.__module__].__file__,
        "python": args.python,
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip(),
        "isolation": vars(probe.isolation),
        "cpus": os.cpu_count(),
        # other work on the machine inflates every number
        "load_average_1m": {"start": load_at_start, "end": os.getloadavg()[0]},
        "results": results,
        "overhead_median_ms": overhead,  # per mode: its median minus the bare interpreter's
    }
    atomic_write_json(args.out, report)

    levels = "".join(f" {f'{n} in flight':>12}" for n in CONCURRENCY)
    print(f"{'mode':<18} {'median ms':>10} {'p90 ms':>8} {'min ms':>8} {'cpu ms':>7}{levels}   (calls/s)")
    for mode, r in results.items():
        rates = "".join(f" {r['calls_per_second'][str(n)]:>12.1f}" for n in CONCURRENCY)
        cpu = "n/a" if r["cpu_ms_per_call"] is None else f"{r['cpu_ms_per_call']:.1f}"
        print(f"{mode:<18} {r['median_ms']:>10.1f} {r['p90_ms']:>8.1f} {r['min_ms']:>8.1f} {cpu:>7}{rates}")
    print(
        "overhead per call (median, vs bare interpreter): "
        + ", ".join(f"{m} {ms:+.1f} ms" for m, ms in overhead.items())
        + f"\nisolation {probe.isolation}"
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
