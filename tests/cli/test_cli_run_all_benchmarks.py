"""benchmarks/run_all.py (`make bench`): discovery and run order, the summary of where results went, failures
reported without stopping the rest. Runs stand-in scripts in a temporary benchmarks directory, not the real ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN_ALL = Path(__file__).resolve().parents[2] / "benchmarks" / "run_all.py"

WRITES = """\
from pathlib import Path
out = Path(__file__).parent / "results" / "{name}.json"
out.parent.mkdir(exist_ok=True)
out.write_text('{{"ok": true}}')
print("wrote", out)
"""


def run_all(bench_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN_ALL), "--bench-dir", str(bench_dir), *args],
                          capture_output=True, text=True, timeout=120)


def make_bench_dir(tmp_path: Path) -> Path:
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    for name in ("train_step", "retrieval", "extra_probe"):
        (bench / f"{name}.py").write_text(WRITES.format(name=name))
    (bench / "sandbox_overhead.py").write_text("import sys\nprint('no sandbox here')\nsys.exit(3)\n")
    (bench / "run_all.py").write_text("raise SystemExit('must not run itself')\n")
    (bench / "results").mkdir()
    (bench / "results" / "old.json").write_text("{}")  # written before this run: not listed
    return bench


def test_run_all_order_summary_and_failures(tmp_path):
    bench = make_bench_dir(tmp_path)
    assert run_all(bench, "--list").stdout.split() == ["retrieval", "sandbox_overhead", "train_step", "extra_probe"]

    result = run_all(bench)
    assert result.returncode == 1  # one failed
    out = result.stdout
    starts = [out.index(f"=== {name} ") for name in ("retrieval", "sandbox_overhead", "train_step", "extra_probe")]
    assert starts == sorted(starts)  # one after another, cheapest known ones first
    assert "no sandbox here" in out  # the scripts' own output streams through
    table = out[out.index("benchmark  "):].splitlines()
    rows = {line.split()[0]: line for line in table[2:]}
    assert rows["retrieval"].split()[1] == "ok" and rows["retrieval"].endswith("benchmarks/results/retrieval.json")
    assert rows["train_step"].endswith("benchmarks/results/train_step.json")
    assert "failed (3)" in rows["sandbox_overhead"] and rows["sandbox_overhead"].endswith("-")
    assert "old.json" not in out
    assert "1 benchmark(s) failed: sandbox_overhead" in result.stderr


def test_run_all_only_and_skip(tmp_path):
    bench = make_bench_dir(tmp_path)
    result = run_all(bench, "--only", "retrieval,train_step.py", "--skip", "train_step")
    assert result.returncode == 0, result.stderr
    assert "=== retrieval " in result.stdout and "=== train_step " not in result.stdout
    result = run_all(bench, "--only", "serve_throughput")
    assert result.returncode != 0
    assert "unknown benchmark 'serve_throughput': choose from retrieval, sandbox_overhead" in result.stderr
