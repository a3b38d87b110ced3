"""`rlvr study` end to end on tiny-random: 2 algorithms x 2 seeds x 2 steps on vf-triviaqa-search (search
protocol), each cell also evaluated after step 1 (the held-out learning curve, [evaluation] at_steps), one server per
invocation, then an interrupted cell (its completion marker, evaluation, final weights and last checkpoint removed, as
a kill after step 1's checkpoint and curve point leaves it) resumed by the same command, which also re-runs that cell
once with the same seed (replicates = 2), and `rlvr analyze` on the study directory. Real server, trainer,
environment and evaluation throughout."""

from __future__ import annotations

import filecmp
import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from rlvr.cli import app

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

STUDY_TOML = """
env = "vf-triviaqa-search"
model = "tiny-random"
algos = ["grpo", "mt_grpo"]
seeds = [0, 1]
keep_checkpoints = true
server_args = ["--kv-cache-gb", "0.5"]

[env_args]
protocol = "search"
num_train_examples = 8
num_eval_examples = 3
max_turns = 2

[training]
max_steps = 2
save_steps = 1
save_total_limit = 2
batch_size = 4
rollouts_per_example = 2
micro_batch_size = 2
max_tokens_per_turn = 4
max_seq_len = 512
temperature = 1.0
learning_rate = 1e-3
progress = false

[evaluation]
examples = 3
rollouts = 1
at_steps = [1]

[report]
headline = ["reward", "tool_execution_reward"]
collapse_window = 2
"""


def rlvr(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"{result.output[-4000:]}\n{result.exception!r}"
    return result.output


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_study_runs_resumes_an_interrupted_cell_and_reports(tiny_model, tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(STUDY_TOML)
    out = tmp_path / "study"
    rlvr("study", "--config", config, "--out", out)

    cells = [(a, s) for a in ("grpo", "mt_grpo") for s in (0, 1)]
    for algo, seed in cells:
        unit = out / "cells" / algo / f"seed-{seed}"
        done = json.loads((unit / "done.json").read_text())
        assert done["resumed_from"] is None and set(done["wall_s"]) == {"training", "final_sync", "evaluation", "total"}
        assert [r["step"] for r in read_jsonl(unit / "train" / "metrics.jsonl") if "loss" in r] == [1, 2]
        config_json = json.loads((unit / "train" / "config.json").read_text())
        assert config_json["training"]["seed"] == seed and config_json["training"]["max_steps"] == 2
        assert config_json["training"].get("algo") == algo
        rows = read_jsonl(unit / "eval" / "results.jsonl")
        assert len(rows) == 3 and all("reward" in r for r in rows)
        # the held-out curve's point: step 1's weights (kept out of rotation), evaluated like the final ones
        point = unit / "curve" / "step-1"
        assert filecmp.cmp(point / "weights" / "model.safetensors", unit / "train" / "checkpoint-1" /
                           "model.safetensors", shallow=False)
        assert len(read_jsonl(point / "eval" / "results.jsonl")) == 3
    for seed in (0, 1):
        assert len(read_jsonl(out / "base" / f"seed-{seed}" / "eval" / "results.jsonl")) == 3

    manifest = json.loads((out / "study.json").read_text())
    (invocation,) = manifest["invocations"]
    assert invocation["finished"] and invocation["versions"]["packages"]["verifiers"] == "0.1.9.post3"
    assert sorted(manifest["cells"]) == ["grpo/seed-0", "grpo/seed-1", "mt_grpo/seed-0", "mt_grpo/seed-1"]
    assert manifest["settings"]["training"]["max_steps"] == 2

    report = (out / "report.md").read_text()
    assert "4 of 4 cells finished" in report
    assert "## Paired differences against grpo" in report and "Student's t with n-1 degrees of freedom" in report
    # one row per cell, with the headline metrics, collapse verdict, steps and tokens
    cell_rows = re.findall(r"^\| (grpo|mt_grpo) \| ([01]) \| .* \| (\*\*yes\*\*, from step \d|no.*?) \| (yes|no) \| 2 \| "
                           r"\d+ \|", report, re.MULTILINE)
    assert sorted((a, int(s)) for a, s, *_ in cell_rows) == cells, report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["baseline"] == "grpo" and set(summary["paired"]) == {"mt_grpo"}
    paired = summary["paired"]["mt_grpo"]["reward"]
    assert paired["n"] == 2 and paired["low"] <= paired["mean"] <= paired["high"]
    assert "## Held-out learning curve" in report and "| step 1 | step 2 (final) |" in report
    assert re.search(r"^\| reward \| mt_grpo - grpo \| [-+]\d", report, re.MULTILINE), report
    assert summary["heldout_curve"]["steps"] == [0, 1, 2]
    assert summary["heldout_curve"]["algorithms"]["grpo"]["reward"]["1"]["n"] == 2
    for png in ("evaluation", "paired_differences", "training_curves", "heldout_curve"):
        assert (out / "plots" / f"{png}.png").read_bytes()[:8] == PNG_MAGIC
        assert f"(plots/{png}.png)" in report

    # A cell killed after step 1's checkpoint: no marker, no evaluation, no final weights, no checkpoint-2. The next
    # invocation also asks for replicates = 2 on that cell only: it resumes the cell, then re-runs it from scratch
    # with the same seed (one server for both), and nothing else runs again.
    unit = out / "cells" / "grpo" / "seed-0"
    for path in (unit / "done.json", unit / "eval", unit / "train" / "final", unit / "train" / "checkpoint-2"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    untouched = {p: p.read_text() for p in out.glob("*/*/seed-*/done.json")} | {
        p: p.read_text() for p in out.glob("base/seed-*/done.json")}
    assert len(untouched) == 5
    point_eval = unit / "curve" / "step-1" / "eval"
    point_rows, point_made = (point_eval / "results.jsonl").read_text(), point_eval.stat().st_mtime_ns
    config.write_text("replicates = 2\n" + STUDY_TOML)
    only_the_cell = ("--algos", "grpo", "--seeds", "0")

    dry = rlvr("study", "--config", config, "--out", out, "--dry-run", *only_the_cell)
    assert "resumes from checkpoint-1" in dry and "(1 same-seed re-runs to do" in dry and "2 cells to run" in dry
    rlvr("study", "--config", config, "--out", out, *only_the_cell)

    assert all(p.read_text() == text for p, text in untouched.items())  # nothing finished ran again
    done = json.loads((unit / "done.json").read_text())
    assert done["resumed_from"].endswith("checkpoint-1")
    assert json.loads((unit / "train" / "config.json").read_text())["resumed_from"].endswith("checkpoint-1")
    steps = [r for r in read_jsonl(unit / "train" / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]  # step 2 trained once more, step 1 kept from before
    assert len(read_jsonl(unit / "eval" / "results.jsonl")) == 3
    manifest = json.loads((out / "study.json").read_text())
    assert len(manifest["invocations"]) == 2 and manifest["cells"]["grpo/seed-0"] == done

    replicate = unit / "replicate-1"
    replicate_done = json.loads((replicate / "done.json").read_text())
    assert replicate_done["replicate"] == 1 and replicate_done["seed"] == 0 and replicate_done["resumed_from"] is None
    assert len(read_jsonl(replicate / "eval" / "results.jsonl")) == 3
    assert [r["step"] for r in read_jsonl(replicate / "train" / "metrics.jsonl") if "loss" in r] == [1, 2]
    assert json.loads((replicate / "train" / "config.json").read_text())["training"]["seed"] == 0
    assert manifest["settings"]["replicates"] == 2 and "grpo/seed-0/replicate-1" in manifest["cells"]
    report = (out / "report.md").read_text()
    assert "| grpo | 0 |" in report and "checkpoint-1" in report
    assert "1 of 4 cells were run more than once with their own seed" in report
    assert re.search(r"^\| grpo \| 0 \| 2 \| ", report.split("## Re-run spread")[1], re.MULTILINE), report
    # seeded sampling: the uninterrupted re-run trained and evaluated token for token like the resumed cell (CPU, one
    # server; benchmarks/rerun_determinism.py measures the same on a run whose weights move)
    assert [r["completion"] for r in read_jsonl(replicate / "eval" / "results.jsonl")] == [
        r["completion"] for r in read_jsonl(unit / "eval" / "results.jsonl")]
    assert [(r["loss"], r["reward"]) for r in read_jsonl(replicate / "train" / "metrics.jsonl") if "loss" in r] == [
        (r["loss"], r["reward"]) for r in steps]
    # the resumed cell's finished curve point was not evaluated again; the re-run's is the same, token for token
    assert (point_eval / "results.jsonl").read_text() == point_rows and point_eval.stat().st_mtime_ns == point_made
    assert [r["completion"] for r in read_jsonl(replicate / "curve" / "step-1" / "eval" / "results.jsonl")] == [
        r["completion"] for r in read_jsonl(point_eval / "results.jsonl")]
    assert "| 0.000 |" in report.split("## Re-run spread")[1]

    # rlvr analyze recognises the study directory and redraws its report
    (out / "report.md").unlink()
    rlvr("analyze", out)
    assert "4 of 4 cells finished" in (out / "report.md").read_text()
