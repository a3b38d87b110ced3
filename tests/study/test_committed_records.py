"""`rlvr study --results DIR` end to end on tiny-random (vf-triviaqa-search, 2 algorithms x 1 seed x 1 step): one
machine runs its share (`--cells`), its study directory is then lost (a fresh clone keeps only the committed records),
and the same command runs only the missing cell, reports every cell with its provenance, and refuses another
configuration by naming it. Real server, trainer, environment and evaluation."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from test_study_run import STUDY_TOML, rlvr
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.weights import fingerprint

pytestmark = pytest.mark.slow

ONE_STEP = STUDY_TOML.replace("seeds = [0, 1]", "seeds = [0]").replace("max_steps = 2", "max_steps = 1").replace(
    "keep_checkpoints = true\n", "").replace("at_steps = [1]\n", "")  # one step: no step before the final one


@pytest.mark.timeout(1800)  # two server starts and three units: ~15 min on 2 cores shared with 5 other sessions
def test_a_fresh_clone_runs_only_the_cells_without_a_committed_record(tiny_model, tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(ONE_STEP)
    results = tmp_path / "benchmarks" / "results" / "study_tiny"
    study = ("study", "--config", config, "--results", results)

    # machine A: the base evaluation and grpo only
    rlvr(*study, "--out", tmp_path / "a", "--cells", "base/seed-0,grpo/seed-0")
    base, grpo = (json.loads((results / f"{key}.json").read_text()) for key in ("base/seed-0", "cells/grpo/seed-0"))
    assert not (results / "cells/mt_grpo").exists()
    for record in (base, grpo):
        made = record["provenance"]
        assert len(made["commit"]) == 40 and made["machine"]["cores"] == len(os.sched_getaffinity(0))
        assert made["machine"]["cpu"] and made["peak_rss_mb"] > 0 and made["command"].split()[0] == "rlvr"
        assert made["model_sha256"] == fingerprint(tiny_model)["sha256"]
    assert grpo["definition"]["training"]["learning_rate"] == 1e-3 and grpo["steps"] == 1
    assert grpo["after"]["reward"]["n"] == 3 and set(grpo["examples"][""]) == {"reward", "tool_execution_reward"}
    report = (results / "report.md").read_text()
    assert "1 of 2 cells finished" in report and "**Left: 1 unit(s)** (mt_grpo/seed-0)" in report
    committed = {p: p.read_bytes() for p in results.rglob("*.json") if p.name != "summary.json"}

    # a fresh clone: no study directory, the committed records only; the same command runs mt_grpo alone
    shutil.rmtree(tmp_path / "a")
    dry = rlvr(*study, "--out", tmp_path / "b", "--dry-run")
    assert dry.count("done (committed record)") == 1 and "1 cells to run" in dry
    rlvr(*study, "--out", tmp_path / "b")
    assert sorted(p.relative_to(tmp_path / "b").as_posix() for p in (tmp_path / "b").glob("*/*/*/done.json")) == [
        "cells/mt_grpo/seed-0/done.json"]  # no base evaluation, no grpo: they were committed
    assert all(p.read_bytes() == data for p, data in committed.items() if p.name != "results.json")
    for where in (results, tmp_path / "b"):  # the committed report and the study directory's: every cell
        report = (where / "report.md").read_text()
        assert "2 of 2 cells finished" in report and "Nothing is left" in report
        provenance = report.split("## Provenance and cost")[1]
        for unit in ("base/seed-0", "grpo/seed-0", "mt_grpo/seed-0"):
            assert f"| {unit} | " in provenance
    summary = json.loads((results / "summary.json").read_text())
    assert {(c["algo"], c["seed"]) for c in summary["cells"]} == {("grpo", 0), ("mt_grpo", 0)}
    assert summary["paired"]["mt_grpo"]["reward"]["n"] == 1

    # another configuration with the same records: named, before any server starts
    result = CliRunner().invoke(app, [str(a) for a in (*study, "--out", tmp_path / "c", "--set", "learning_rate=2e-3")])
    assert result.exit_code != 0 and not (tmp_path / "c" / "server.log").exists()
    assert "3 committed record(s)" in result.output and "training.learning_rate: 0.001 -> 0.002" in result.output
