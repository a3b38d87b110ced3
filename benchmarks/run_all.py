"""Run every benchmark in benchmarks/ one after another (`make bench`) and print where each one's results went.

Each script runs as its own subprocess with this interpreter and its default arguments (each writes its JSON
under benchmarks/results/); its output streams through unchanged. Cheap ones run first, so a failure in a long
one comes after the quick numbers are in. A failed script does not stop the others; the exit code is non-zero
if any failed. Speed is measured here and never asserted in tests.

    .venv/bin/python benchmarks/run_all.py [--only retrieval,train_step] [--skip serve_throughput] [--list]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
# Known scripts, cheapest first (seconds, ~a minute, minutes with two servers, minutes of training).
ORDER = ("retrieval", "sandbox_overhead", "serve_throughput", "weight_sync", "train_step")


@dataclass
class Outcome:
    name: str
    returncode: int
    seconds: float
    results: list[Path] = field(default_factory=list)


def discover(bench_dir: Path) -> list[str]:
    """Benchmark scripts present: the known ones in ORDER, then any other *.py (alphabetical)."""
    present = {p.stem for p in bench_dir.glob("*.py") if p.name != Path(__file__).name and not p.stem.startswith("_")}
    return [n for n in ORDER if n in present] + sorted(present - set(ORDER))


def select(names: list[str], only: str | None, skip: str | None) -> list[str]:
    def parse(text: str | None) -> list[str]:
        return [n.strip().removesuffix(".py") for n in (text or "").split(",") if n.strip()]

    for name in parse(only) + parse(skip):
        if name not in names:
            raise SystemExit(f"unknown benchmark {name!r}: choose from {', '.join(names)}")
    chosen = parse(only) or names
    return [n for n in names if n in chosen and n not in parse(skip)]


def snapshot(results_dir: Path) -> dict[Path, int]:
    """Modification times of the result files, to tell what a script wrote (new or rewritten files)."""
    if not results_dir.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in results_dir.rglob("*") if p.is_file()}


def run(bench_dir: Path, name: str, timeout: float | None) -> Outcome:
    print(f"\n=== {name} " + "=" * max(0, 70 - len(name)), flush=True)
    results_dir = bench_dir / "results"
    before = snapshot(results_dir)
    start = time.time()
    try:
        returncode = subprocess.run([sys.executable, str(bench_dir / f"{name}.py")], timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"{name}: stopped after {timeout:.0f} s (--timeout)", flush=True)
        returncode = -1
    written = sorted(p for p, mtime in snapshot(results_dir).items() if before.get(p) != mtime)
    return Outcome(name, returncode, time.time() - start, written)


def summary(outcomes: list[Outcome], root: Path) -> str:
    def where(paths: list[Path]) -> str:
        return ", ".join(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in paths) or "-"

    rows = [("benchmark", "status", "seconds", "results")]
    for o in outcomes:
        status = "ok" if o.returncode == 0 else ("timeout" if o.returncode == -1 else f"failed ({o.returncode})")
        rows.append((o.name, status, f"{o.seconds:.0f}", where(o.results)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3] for row in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated benchmarks to run (default: all)")
    parser.add_argument("--skip", help="comma-separated benchmarks to leave out")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (default: none)")
    parser.add_argument("--list", action="store_true", help="print the benchmarks in run order and exit")
    parser.add_argument("--bench-dir", type=Path, default=BENCH_DIR, help=argparse.SUPPRESS)  # tests
    args = parser.parse_args(argv)

    names = discover(args.bench_dir)
    if args.list:
        print("\n".join(names))
        return 0
    outcomes = [run(args.bench_dir, name, args.timeout) for name in select(names, args.only, args.skip)]
    print("\n" + summary(outcomes, args.bench_dir.parent))
    failed = [o.name for o in outcomes if o.returncode != 0]
    if failed:
        print(f"\n{len(failed)} benchmark(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
