"""The study report on a study directory written by hand (known numbers, no training): the tables hold the
hand-computed means, paired intervals and collapse verdicts, the plots are PNGs, `rlvr analyze` renders it, and a
study cut short reports what it finished."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.study.layout import StudyLayout
from rlvr.study.report import write_report
from rlvr.study.settings import EvaluationSettings, ReportSettings, StudyError, StudySettings
from rlvr.study.stats import first_step_reaching

# exact match after training, per seed: the first look (GRPO-OR collapsed in seed 0)
EXACT_MATCH = {"grpo": [0.0, 0.5, 0.521], "mt_grpo": [0.333, 0.562, 0.417]}
# within-batch reward std per step: grpo seed 0 constant from step 2 on
REWARD_STD = {("grpo", 0): [0.3, 0.0, 0.0, 0.0], ("grpo", 1): [0.3, 0.2, 0.1, 0.2], ("grpo", 2): [0.3, 0.2, 0.0, 0.1],
              ("mt_grpo", 0): [0.3, 0.2, 0.2, 0.1], ("mt_grpo", 1): [0.2, 0.2, 0.1, 0.3],
              ("mt_grpo", 2): [0.1, 0.0, 0.1, 0.2]}


def summary(exact_match: float, n: int = 48) -> dict:
    se = 0.0 if exact_match in (0.0, 1.0) else math.sqrt(exact_match * (1 - exact_match) / (n - 1))
    return {"reward": {"mean": 0.4 + exact_match, "stderr": se, "n": n},
            "exact_match": {"mean": exact_match, "stderr": se, "n": n}}


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def make_study(root: Path, seeds=(0, 1, 2), sets=None, at_steps=()) -> Path:
    settings = StudySettings(env="vf-triviaqa-search", model="smollm2-135m", algos=["grpo", "mt_grpo"],
                             seeds=list(seeds), training={"max_steps": 4, "batch_size": 16, "temperature": 0.7,
                                                         "max_tokens_per_turn": 32},
                             algo_options={"mt_grpo": {"credit": {"coef": 0.5}}},
                             evaluation=EvaluationSettings(examples=24, rollouts=2, sets=sets or {},
                                                           at_steps=list(at_steps)),
                             report=ReportSettings(headline=["exact_match"], collapse_window=3))
    layout = StudyLayout(root)
    write_json(layout.manifest, {"settings": settings.to_dict(), "evaluation_sampling": settings.sampling(),
                                 "cells": {}, "bases": {}, "invocations": [
        {"command": "rlvr study --config x.toml --out study", "started": "", "finished": ""}]})
    for seed in seeds:
        write_json(layout.eval(layout.base(seed)) / "summary.json", summary(0.05))
        write_json(layout.done(layout.base(seed)), {"seed": seed, "wall_s": {"evaluation": 60.0}})
        for algo, values in EXACT_MATCH.items():
            write_cell(layout, algo, seed, values[seed])
    return root


def write_cell(layout: StudyLayout, algo: str, seed: int, exact_match: float, replicate: int = 0) -> None:
    """A finished cell (replicate 0) or same-seed re-run whose evaluation has this exact match."""
    unit = layout.cell(algo, seed, replicate)
    write_json(layout.eval(unit) / "summary.json", summary(exact_match))
    write_json(layout.done(unit), {"algo": algo, "seed": seed, "replicate": replicate, "resumed_from": None,
                                   "wall_s": {"training": 300.0, "evaluation": 120.0, "total": 450.0}})
    records = [{"step": k + 1, "loss": 0.1, "reward": 0.5, "reward/std": std, "tokens/generated": 100.0,
                "exact_match": exact_match * (k + 1) / 4, "timing/generation_s": 3.0}
               for k, std in enumerate(REWARD_STD[(algo, seed)])]
    records.append({"step": 4, "train_loss": 0.1, "train_runtime": 9.0})  # the trainer's summary line
    path = layout.train(unit) / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def table_row(report: str, first_cell: str) -> list[str]:
    line = next(line for line in report.splitlines() if line.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_report_numbers(tmp_path):
    report = write_report(make_study(tmp_path)).read_text()
    # mean ± s.e. across seeds: grpo (0 + 0.5 + 0.521) / 3 = 0.340, s.e. 0.2950 / sqrt(3) = 0.170
    assert table_row(report, "exact_match")[1:] == ["0.050 ± 0.000", "0.340 ± 0.170", "0.437 ± 0.067"]
    # mt_grpo - grpo per seed: 0.333, 0.062, -0.104: mean 0.097, s_d 0.220592, half width 4.302653 * s_d / sqrt(3) = 0.548
    diff = [c for c in report.split("## Paired differences against grpo")[1].splitlines()
            if c.startswith("| exact_match |")][0]
    assert "+0.097 [-0.451, +0.645] 2/3" in diff
    assert ("- mt_grpo - grpo: +0.097 [-0.451, +0.645] 2/3 (not separated at 95%; higher in 2, lower in 1 of 3 "
            "seeds)") in report
    assert "(temperature 0.7, max_tokens 32)." in report and "Options of mt_grpo only: credit = {'coef': 0.5}." in report
    # the collapsed cell: std 0 in the last 3 steps, from step 2; and the one with 1 constant step
    assert table_row(report, "grpo")[:4] == ["grpo", "0", "0.000 ± 0.000", "**yes**, from step 2"]
    grpo_seed2 = [r for r in report.splitlines() if r.startswith("| grpo | 2 |")][0]
    assert "| no |" in grpo_seed2 and "| 4 | 400 | 5.0 | 2.0 | 7.5 | - |" in grpo_seed2
    assert "eval reward constant" in report and "| grpo | 0 | 0.000 ± 0.000 | **yes**, from step 2 | yes |" in report
    assert "Sum over finished units: 48.0 min" in report  # 6 cells x 7.5 + 3 base evaluations x 1
    assert "```bash\nrlvr study --config x.toml --out study\n```" in report

    # against the base model (0.05 in every seed): grpo -0.05, 0.45, 0.471 (mean 0.290, s_d 0.294926, half width
    # 4.302653 * s_d / sqrt(3) = 0.733); mt_grpo 0.283, 0.512, 0.367 (mean 0.387, s_d 0.115847, half width 0.288)
    against_base = report.split("## Paired differences against the base model")[1]
    assert "(smollm2-135m, the weights every cell starts from" in against_base
    assert table_row(against_base, "exact_match")[1:] == ["+0.290 [-0.442, +1.023] 2/3", "+0.387 [+0.100, +0.675] 3/3"]

    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["paired_with_base"]["grpo"]["exact_match"]["mean"] == pytest.approx((-0.05 + 0.45 + 0.471) / 3)
    paired = data["paired"]["mt_grpo"]["exact_match"]
    assert paired["mean"] == pytest.approx(0.097, abs=1e-9)
    assert paired["high"] - paired["mean"] == pytest.approx(4.302653 * 0.220592 / math.sqrt(3), abs=1e-5)
    collapsed = {(c["algo"], c["seed"]): c["collapse"]["collapsed"] for c in data["cells"]}
    assert collapsed == {(a, s): (a, s) == ("grpo", 0) for a in EXACT_MATCH for s in (0, 1, 2)}
    for png in ("evaluation", "paired_differences", "training_curves"):
        assert (tmp_path / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.rglob(".*tmp*"))  # atomic writes leave no temporaries


def test_a_study_cut_short_reports_what_it_finished(tmp_path):
    make_study(tmp_path, seeds=(0,))
    layout = StudyLayout(tmp_path)
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["seeds"] = [0, 1]
    layout.manifest.write_text(json.dumps(manifest))
    layout.done(layout.cell("mt_grpo", 0)).unlink()  # interrupted: its files stay, without the marker
    report = write_report(tmp_path).read_text()
    assert "1 of 4 cells finished" in report and "Missing: mt_grpo/seed-0, grpo/seed-1, mt_grpo/seed-1." in report
    assert "| mt_grpo |" not in report and "## Paired differences against grpo" not in report
    assert table_row(report.split("against the base model")[1], "exact_match")[1:] == ["-0.050 (1 seed: no interval)"]


def test_a_statistic_only_the_newer_units_have(tmp_path):
    """Records committed before a statistic existed (e.g. repeated_turns) sit beside cells that have it: the report
    gives it for the cells that have it and every other table as before."""
    make_study(tmp_path)
    layout = StudyLayout(tmp_path)
    for seed in (1, 2):
        path = layout.eval(layout.cell("mt_grpo", seed)) / "summary.json"
        newer = json.loads(path.read_text()) | {"repeated_turns": {"mean": 0.5 * seed, "stderr": 0.1, "n": 48}}
        path.write_text(json.dumps(newer))
    report = write_report(tmp_path).read_text()
    assert table_row(report, "exact_match")[1:] == ["0.050 ± 0.000", "0.340 ± 0.170", "0.437 ± 0.067"]
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["algorithms"]["mt_grpo"]["repeated_turns"]["mean"] == pytest.approx(0.75)  # its 2 seeds
    assert data["paired"]["mt_grpo"]["repeated_turns"]["n"] == 0  # grpo has none to pair with


def test_how_each_training_batch_was_made_is_tabled_per_step(tmp_path):
    """batch/* and timing/* scalars of the training log reach the cell's record (batch_curves) and the report's
    'Training batches' table, one value per step; cells without them (older records) are left out of it."""
    from rlvr.study.records import cell_from_json, cell_to_json
    from rlvr.study.units import read_cell

    make_study(tmp_path, seeds=(0,))
    layout = StudyLayout(tmp_path)
    assert "## Training batches" not in write_report(tmp_path).read_text()  # no cell was trained with these
    path = layout.train(layout.cell("mt_grpo", 0)) / "metrics.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for k, line in enumerate(lines[:4]):
        line |= {"batch/skipped_zero_advantage_fraction": [0.0, 0.5, 1.0, 0.25][k],
                 "batch/generation_rounds": [1, 3, 4, 1][k], "batch/dropped_groups": [0, 2, 5, 0][k],
                 "timing/training_s": 30.0, "batch/flag": True}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cell = read_cell(layout, "mt_grpo", 0)
    assert cell.batch_curves["batch/generation_rounds"] == {1: 1.0, 2: 3.0, 3: 4.0, 4: 1.0}
    assert "batch/flag" not in cell.batch_curves and "batch/generation_rounds" not in cell.curves
    assert cell_from_json(json.loads(json.dumps(cell_to_json(cell)))) == cell  # as a committed record reads back
    report = write_report(tmp_path).read_text()
    section = report.split("## Training batches")[1].split("##")[0]
    assert table_row(section, "mt_grpo") == ["mt_grpo", "0", "0 0.5 1 0.25", "1 3 4 1", "0 2 5 0", "0.2", "2.0"]
    assert table_row(section, "grpo") == ["grpo", "0", "n/a", "n/a", "n/a", "0.2", "0.0"]  # timing/ only
    assert "Not listed" not in section
    grpo = layout.train(layout.cell("grpo", 0)) / "metrics.jsonl"  # as recorded before: no batch statistics
    grpo.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if not k.startswith("timing/")})
                            + "\n" for line in grpo.read_text().splitlines()))
    section = write_report(tmp_path).read_text().split("## Training batches")[1].split("##")[0]
    assert "| grpo |" not in section and "Not listed: 1 cell(s) whose records were made before" in section


def test_analyze_renders_a_study_directory(tmp_path):
    make_study(tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "analysis.md").exists()
    assert "Credit-assignment study" in result.output


def test_the_report_lists_how_an_offline_dataset_was_made(tmp_path):
    make_study(tmp_path)
    layout = StudyLayout(tmp_path)
    manifest = json.loads(layout.manifest.read_text())
    manifest["offline_sources"] = {"mt_grpo": "rlvr collect --env e -o runs/c", "oreo": "rlvr collect -o not/in/grid"}
    layout.manifest.write_text(json.dumps(manifest))
    report = write_report(tmp_path).read_text()
    # the dataset is made before the study that trains on it; an algorithm outside the grid is not listed
    assert "```bash\nrlvr collect --env e -o runs/c\nrlvr study --config x.toml --out study\n```" in report
    assert "not/in/grid" not in report


def test_the_report_names_the_algorithm_behind_a_variant(tmp_path):
    make_study(tmp_path)
    layout = StudyLayout(tmp_path)
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["variants"] = {"mt_grpo": "ms_po"}  # (a grid name that is a variant, here for the text)
    layout.manifest.write_text(json.dumps(manifest))
    assert "Options of mt_grpo (ms_po) only: credit = {'coef': 0.5}." in write_report(tmp_path).read_text()


def test_without_replicates_the_report_says_what_the_cell_uncertainty_covers(tmp_path):
    report = write_report(make_study(tmp_path)).read_text()
    section = report.split("## Re-run spread (same-seed replicates)")[1]
    assert "the ± of a cell above is its evaluation's sampling error only" in section
    assert "`replicates = 2`" in section
    assert json.loads((tmp_path / "summary.json").read_text())["replicates"] == []


def test_rerun_spread_of_replicated_cells_by_hand(tmp_path):
    layout = StudyLayout(make_study(tmp_path))
    # grpo seed 1 ran three times (0.5, then 0.4 and 0.3), mt_grpo seed 0 twice (0.333, then 0.433)
    write_cell(layout, "grpo", 1, 0.4, replicate=1)
    write_cell(layout, "grpo", 1, 0.3, replicate=2)
    write_cell(layout, "mt_grpo", 0, 0.433, replicate=1)
    report = write_report(tmp_path).read_text()
    section = report.split("## Re-run spread (same-seed replicates)")[1]
    assert "2 of 6 cells were run more than once" in section
    # grpo seed 1: s.d. of (0.5, 0.4, 0.3) = 0.1; eval s.e. = sqrt(mean(v(1-v)/47)) = sqrt((0.25+0.24+0.21)/3/47)
    # = 0.070459; one run: sqrt(0.070459² + 0.1²) = 0.122330
    assert table_row(section, "grpo") == ["grpo", "1", "3", "0.500, 0.400, 0.300", "0.070", "0.100", "0.122"]
    # mt_grpo seed 0: s.d. of (0.333, 0.433) = 0.1 / sqrt(2) = 0.070711; eval s.e. = sqrt((0.333*0.667 +
    # 0.433*0.567)/2/47) = 0.070532; one run: sqrt(0.070532² + 0.070711²) = 0.099873
    assert table_row(section, "mt_grpo") == ["mt_grpo", "0", "2", "0.333, 0.433", "0.071", "0.071", "0.100"]
    # pooled: (0.1² + 0 + 0.1² + 2 * 0.05²) / (2 + 1) = 0.025 / 3: s_p = 0.091287
    assert "the re-run s.d. of exact_match is 0.091 (3 degrees of freedom from 2 cells)" in section
    # the tables above still use each cell's first run: grpo across seeds (0 + 0.5 + 0.521) / 3
    assert table_row(report, "exact_match")[1:] == ["0.050 ± 0.000", "0.340 ± 0.170", "0.437 ± 0.067"]

    data = json.loads((tmp_path / "summary.json").read_text())
    spread = next(c for c in data["cells"] if (c["algo"], c["seed"]) == ("grpo", 1))["rerun_spread"]["exact_match"]
    assert spread["runs"] == 3 and spread["mean"] == pytest.approx(0.4)
    assert spread["replicate_sd"] == pytest.approx(0.1) and spread["eval_stderr"] == pytest.approx(0.070459, abs=1e-6)
    assert spread["combined"] == pytest.approx(0.122330, abs=1e-6)
    single = next(c for c in data["cells"] if (c["algo"], c["seed"]) == ("grpo", 0))["rerun_spread"]["exact_match"]
    assert single["runs"] == 1 and math.isnan(single["combined"])
    assert sorted((r["algo"], r["seed"], r["replicate"]) for r in data["replicates"]) == [
        ("grpo", 1, 1), ("grpo", 1, 2), ("mt_grpo", 0, 1)]


def test_a_held_out_set_gets_its_own_tables(tmp_path):
    """[evaluation.sets]: eval-NAME/ of the base and of every cell, read into a section of its own (means across
    seeds, paired against the baseline and the base model) and into summary.json; the main tables are unchanged."""
    make_study(tmp_path, sets={"valid_seen": {"eval_split": "valid_seen"}})
    layout = StudyLayout(tmp_path)
    seen = {"grpo": [0.2, 0.4, 0.6], "mt_grpo": [0.3, 0.6, 0.6]}
    for seed in (0, 1, 2):
        write_json(layout.eval_set(layout.base(seed), "valid_seen") / "summary.json", summary(0.1))
        for algo, values in seen.items():
            write_json(layout.eval_set(layout.cell(algo, seed), "valid_seen") / "summary.json", summary(values[seed]))
    report = write_report(tmp_path).read_text()
    section = report.split("## Held-out set valid_seen")[1].split("## Cells")[0]
    assert '`{"eval_split": "valid_seen"}`' in section
    # grpo 0.4 ± 0.2/sqrt(3) = 0.115; mt_grpo 0.5 ± 0.1; base 0.1
    assert table_row(section, "exact_match")[1:] == ["0.100 ± 0.000", "0.400 ± 0.115", "0.500 ± 0.100"]
    # mt_grpo - grpo: 0.1, 0.2, 0.0 (mean 0.1, s_d 0.1, half width 4.302653 * 0.1 / sqrt(3) = 0.248)
    paired = [line for line in section.splitlines() if line.startswith("| exact_match |")][1]
    assert paired.split("|")[2].strip() == "+0.100 [-0.148, +0.348] 2/3"
    assert table_row(report, "exact_match")[1:] == ["0.050 ± 0.000", "0.340 ± 0.170", "0.437 ± 0.067"]  # main set
    data = json.loads((tmp_path / "summary.json").read_text())["sets"]["valid_seen"]
    assert data["algorithms"]["mt_grpo"]["exact_match"]["mean"] == pytest.approx(0.5)
    assert data["paired_with_base"]["grpo"]["exact_match"]["mean"] == pytest.approx(0.3)
    assert data["base"]["seed-1"]["exact_match"]["mean"] == pytest.approx(0.1)


def write_results(eval_dir: Path, exact_match: dict[int, list[float]]) -> None:
    """results.jsonl of an evaluation: example id -> the exact match of each of its rollouts."""
    eval_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"example_id": example, "reward": 0.4 + value, "exact_match": value}
            for example, values in exact_match.items() for value in values]
    (eval_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_cells_are_paired_with_the_base_model_and_the_baseline_example_by_example(tmp_path):
    """One seed: the per-example means (over rollouts) of each cell minus the base model's and the baseline cell's,
    with a t interval over the examples, per held-out set; an evaluation without results.jsonl is left out."""
    make_study(tmp_path, seeds=(0,), sets={"valid_seen": {"eval_split": "valid_seen"}})
    layout = StudyLayout(tmp_path)
    write_results(layout.eval(layout.base(0)), {0: [0, 0], 1: [0, 0], 2: [0, 1], 3: [0, 0]})
    write_results(layout.eval(layout.cell("grpo", 0)), {0: [1, 0], 1: [0, 0], 2: [1, 1], 3: [0, 0]})
    write_results(layout.eval(layout.cell("mt_grpo", 0)), {0: [1, 1], 1: [1, 0], 2: [1, 1], 3: [0, 1]})
    write_results(layout.eval_set(layout.cell("mt_grpo", 0), "valid_seen"), {0: [1], 1: [1]})  # no base: no pairs
    write_json(layout.eval_set(layout.cell("mt_grpo", 0), "valid_seen") / "summary.json", summary(1.0))
    report = write_report(tmp_path).read_text()
    section = report.split("## Paired over the held-out examples (within a seed)")[1].split("## Cells")[0]
    main, seen = section.split("**valid_seen**")
    # grpo - base per example: 0.5, 0, 0.5, 0 (mean 0.25, s_d 0.288675, half width 3.182446 * s_d / 2 = 0.459)
    # mt_grpo - base: 1, 0.5, 0.5, 0.5 (mean 0.625, s_d 0.25, half 0.398); mt_grpo - grpo: 0.5, 0.5, 0, 0.5 (0.375,
    # s_d 0.25, half 0.398)
    assert table_row(main, "grpo/seed-0")[1:] == ["+0.250 [-0.209, +0.709] 2/4", "-"]
    assert table_row(main, "mt_grpo/seed-0")[1:] == ["+0.625 [+0.227, +1.023] 4/4", "+0.375 [-0.023, +0.773] 3/4"]
    assert "| cell | exact_match: - base | exact_match: - grpo |" in main
    assert table_row(seen, "mt_grpo/seed-0")[1:] == ["n/a", "n/a"]
    # what the pairings against the base resolve at 80% power: (1.959964 + 0.841621) x s.e. = 2.80 x 0.125 (mt_grpo)
    # and 2.80 x 0.144338 (grpo); the valid_seen set has no pairs, so no such line
    assert "resolve with 80% power (two-sided, 95%; 2.80 x the paired s.e., over the cells): exact_match " \
           "0.350-0.404." in main
    assert "resolve with 80% power" not in seen
    pairs = json.loads((tmp_path / "summary.json").read_text())["paired_over_examples"]
    assert pairs["mt_grpo/seed-0"]["main"]["grpo"]["exact_match"]["mean"] == pytest.approx(0.375)
    assert pairs["mt_grpo/seed-0"]["main"]["base"]["exact_match"]["n"] == 4
    assert "base" in pairs["grpo/seed-0"]["main"] and "grpo" not in pairs["grpo/seed-0"]["main"]


def test_each_algorithm_is_paired_over_the_examples_pooled_over_its_seeds(tmp_path):
    """Two seeds: per example the cell minus the base model averaged over the seeds, paired over the examples; a
    pairing with the baseline over fewer seeds names them; an algorithm with one seed of results has no row."""
    make_study(tmp_path, seeds=(0, 1))
    layout = StudyLayout(tmp_path)
    write_results(layout.eval(layout.base(0)), {0: [0, 0], 1: [0, 0], 2: [0, 1]})
    write_results(layout.eval(layout.base(1)), {0: [1, 1], 1: [0, 0], 2: [0, 0]})
    write_results(layout.eval(layout.cell("grpo", 0)), {0: [1, 0], 1: [0, 0], 2: [1, 1]})  # seed 1: no results
    write_results(layout.eval(layout.cell("mt_grpo", 0)), {0: [1, 1], 1: [1, 0], 2: [1, 1]})
    write_results(layout.eval(layout.cell("mt_grpo", 1)), {0: [1, 1], 1: [1, 1], 2: [0, 1]})
    report = write_report(tmp_path).read_text()
    section = report.split("## Pooled over seeds, paired over the held-out examples")[1].split("## Cells")[0]
    # mt_grpo - base per example: seed 0 (1, 0.5, 0.5), seed 1 (0, 1, 0.5): pooled 0.5, 0.75, 0.5, mean 0.583,
    # s_d 0.144338, s.e. 0.083333, half width 4.302653 x 0.083333 = 0.359; mt_grpo - grpo on seed 0 only:
    # 0.5, 0.5, 0 (mean 0.333, s_d 0.288675, half 4.302653 x 0.166667 = 0.717)
    assert table_row(section, "mt_grpo")[1:] == ["0, 1", "+0.583 [+0.225, +0.942] 3/3",
                                                 "+0.333 [-0.384, +1.050] 2/3 (seeds 0)"]
    assert "| grpo |" not in section
    assert "resolve with 80% power (two-sided, 95%, over the algorithms): exact_match 0.233." in section
    pooled = json.loads((tmp_path / "summary.json").read_text())["pooled_over_examples"]
    assert list(pooled) == ["mt_grpo"]
    assert pooled["mt_grpo"]["main"]["base"]["exact_match"]["mean"] == pytest.approx(7 / 12)
    assert pooled["mt_grpo"]["main"]["base"]["exact_match"]["seeds"] == [0, 1]
    assert pooled["mt_grpo"]["main"]["grpo"]["exact_match"]["seeds"] == [0]


def split_study(root: Path, split_by: str) -> StudyLayout:
    """One seed, 5 held-out examples, the first three marked target_in_training (in their info, as vf-webshop's
    held-out rows are), with `[report] split_by` set in the manifest."""
    make_study(root, seeds=(0,))
    layout = StudyLayout(root)
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["report"]["split_by"] = split_by
    write_json(layout.manifest, manifest)
    per_unit = {layout.base(0): {0: [0, 0], 1: [0, 0], 2: [0, 1], 3: [0, 0], 4: [1, 1]},
                layout.cell("grpo", 0): {0: [1, 0], 1: [0, 0], 2: [1, 1], 3: [0, 0], 4: [1, 0]},
                layout.cell("mt_grpo", 0): {0: [1, 1], 1: [1, 0], 2: [1, 1], 3: [0, 1], 4: [0, 0]}}
    for unit, exact_match in per_unit.items():
        rows = [{"example_id": example, "reward": 0.4 + value, "exact_match": value,
                 "info": {"goal": {"asin": f"P{example}"}, "target_in_training": example < 3}}
                for example, values in exact_match.items() for value in values]
        (layout.eval(unit) / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return layout


def test_paired_over_examples_split_by_a_field_of_the_held_out_rows(tmp_path):
    """[report] split_by: each cell's pairings against the base model and the baseline, again within each value of
    the field, with the count of examples; the unsplit table stays as it is."""
    split_study(tmp_path, "target_in_training")
    report = write_report(tmp_path).read_text()
    section = report.split("## Paired over the held-out examples (within a seed)")[1].split("## Cells")[0]
    # grpo - base per example: 0.5, 0, 0.5 | 0, -0.5. True: mean 1/3, s_d 0.288675, half 4.302653 * s_d / √3 =
    # 0.717; False: mean -0.25, s_d 0.353553, half 12.706205 * s_d / √2 = 3.177
    # unsplit, as before: mean 0.1, s_d 0.418330, half 2.776445 * s_d / √5 = 0.519
    assert table_row(section, "grpo/seed-0")[1:] == ["+0.100 [-0.419, +0.619] 2/5", "-"]
    assert "| cell | target_in_training | examples | exact_match: - base | exact_match: - grpo |" in section
    assert table_row(section, "grpo/seed-0 | True")[2:] == ["3", "+0.333 [-0.384, +1.050] 2/3", "-"]
    assert table_row(section, "grpo/seed-0 | False")[2:] == ["2", "-0.250 [-3.427, +2.927] 0/2", "-"]
    # mt_grpo - base: 1, 0.5, 0.5 | 0.5, -1 (False: s_d 1.06066, half 9.530); mt_grpo - grpo: 0.5, 0.5, 0 | 0.5, -0.5
    # (False: s_d 0.707107, half 6.353)
    assert table_row(section, "mt_grpo/seed-0 | True")[2:] == [
        "3", "+0.667 [-0.050, +1.384] 3/3", "+0.333 [-0.384, +1.050] 2/3"]
    assert table_row(section, "mt_grpo/seed-0 | False")[2:] == [
        "2", "-0.250 [-9.780, +9.280] 1/2", "+0.000 [-6.353, +6.353] 1/2"]
    split = json.loads((tmp_path / "summary.json").read_text())["paired_over_examples_split"]
    assert split["split_by"] == "target_in_training"
    assert split["cells"]["mt_grpo/seed-0"]["main"]["grpo"]["exact_match"]["True"]["mean"] == pytest.approx(1 / 3)
    assert split["cells"]["grpo/seed-0"]["main"]["base"]["exact_match"]["False"]["n"] == 2


def test_a_split_by_field_no_row_has_is_named_in_the_report(tmp_path):
    split_study(tmp_path, "target_in_trainig")
    report = write_report(tmp_path).read_text()
    assert ("**[report] split_by = 'target_in_trainig': no held-out row of this evaluation has that field**"
            in report)
    assert "| cell | target_in_trainig |" not in report
    assert "+0.100 [-0.419, +0.619] 2/5" in report  # the unsplit pairings are still there
    with pytest.raises(StudyError, match=r"\[report\] split_by = '': name a field of the held-out rows"):
        ReportSettings(split_by="").check()


def test_without_results_files_there_is_no_per_example_section(tmp_path):
    """An exported study (summaries only) reports the tables over seeds and no per-example section."""
    report = write_report(make_study(tmp_path)).read_text()
    assert "Paired over the held-out examples" not in report
    assert json.loads((tmp_path / "summary.json").read_text())["paired_over_examples"] == {}


def test_training_steps_to_a_target_by_hand(tmp_path):
    """[report] target: the first step whose training batch reached the value, per seed. The stand-in cells log
    exact_match = final * step / 4 at steps 1-4 (final: grpo 0, 0.5, 0.521; mt_grpo 0.333, 0.562, 0.417), so
    >= 0.25 is reached by grpo at steps -, 2, 2 (median 2) and by mt_grpo at 4 (0.333 * 3/4 = 0.24975 falls just
    short at step 3), 2, 3 (median 3)."""
    make_study(tmp_path)
    layout = StudyLayout(tmp_path)
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["report"]["target"] = {"exact_match": 0.25}
    layout.manifest.write_text(json.dumps(manifest))
    report = write_report(tmp_path).read_text()
    section = report.split("## Training steps to exact_match >= 0.25")[1]
    assert table_row(section, "grpo") == ["grpo", "0: -, 1: 2, 2: 2", "2 of 3", "2"]
    assert table_row(section, "mt_grpo") == ["mt_grpo", "0: 4, 1: 2, 2: 3", "3 of 3", "3"]
    cells = json.loads((tmp_path / "summary.json").read_text())["cells"]
    assert {(c["algo"], c["seed"]): c["steps_to_target"]["exact_match"] for c in cells} == {
        ("grpo", 0): None, ("grpo", 1): 2, ("grpo", 2): 2, ("mt_grpo", 0): 4, ("mt_grpo", 1): 2, ("mt_grpo", 2): 3}
    assert "## Training steps to" not in write_report(make_study(tmp_path / "plain")).read_text()  # no target: none


def test_first_step_reaching():
    assert first_step_reaching({3: 0.9, 1: 0.2, 2: 0.95}, 0.9) == 2  # by step, not by insertion order
    assert first_step_reaching({1: 0.2}, 0.9) is None and first_step_reaching({}, 0.0) is None
    with pytest.raises(StudyError, match=r"target outcome = 'high'"):
        ReportSettings(target={"outcome": "high"}).check()


def test_a_cell_whose_held_out_outcome_fell_is_warned_about_first(tmp_path):
    """grpo seed 0 ends at exact match 0.0 against its base model's 0.05 (reward 0.40 against 0.45): the report says
    so right under its title, for that cell only (issue 44)."""
    report = write_report(make_study(tmp_path)).read_text()
    warnings = [line for line in report.splitlines() if line.startswith("**Warning")]
    assert warnings == [
        "**Warning: training lowered the held-out exact match (the task's outcome) in grpo/seed-0** from 0.050 to "
        "0.000 (-0.050, 1.6 standard errors of the difference).",
        "**Warning: training lowered the held-out outcome reward in grpo/seed-0** from 0.450 to 0.400 (-0.050, 1.6 "
        "standard errors of the difference).",
    ]
    assert report.index(warnings[-1]) < report.index("Every cell:")


# exact match after training step 2 of 4, per seed: the held-out learning curve's point ([evaluation] at_steps)
AT_STEP_2 = {"grpo": [0.1, 0.2, 0.3], "mt_grpo": [0.2, 0.4, 0.3]}


def write_curve(root: Path) -> None:
    layout = StudyLayout(root)
    for algo, values in AT_STEP_2.items():
        for seed, value in enumerate(values):
            write_json(layout.eval(layout.curve_point(layout.cell(algo, seed), 2)) / "summary.json", summary(value))


def test_heldout_learning_curve_by_hand(tmp_path):
    write_curve(make_study(tmp_path, at_steps=[2]))
    report = write_report(tmp_path).read_text()
    curve = report.split("## Held-out learning curve")[1]
    assert "| metric | algo | step 0 (base) | step 2 | step 4 (final) |" in curve
    # step 0: the base model (0.05 in every seed); step 2: grpo 0.1, 0.2, 0.3 (mean 0.2, s.d. 0.1, s.e. 0.1/sqrt(3) =
    # 0.058), mt_grpo 0.2, 0.4, 0.3; step 4: the final evaluations (the tables above)
    assert table_row(curve, "exact_match")[1:] == ["grpo", "0.050 ± 0.000", "0.200 ± 0.058", "0.340 ± 0.170"]
    assert "| exact_match | mt_grpo | 0.050 ± 0.000 | 0.300 ± 0.058 | 0.437 ± 0.067 |" in curve
    # mt_grpo - grpo at step 2: 0.1, 0.2, 0.0 (mean 0.1, s_d 0.1, half width 4.302653 * 0.1 / sqrt(3) = 0.248); at
    # step 4 the paired differences above
    assert "| exact_match | mt_grpo - grpo | +0.100 [-0.148, +0.348] 2/3 | +0.097 [-0.451, +0.645] 2/3 |" in curve
    assert "![heldout_curve](plots/heldout_curve.png)" in report
    assert (tmp_path / "plots" / "heldout_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "summary.json").read_text())["heldout_curve"]
    assert data["steps"] == [0, 2, 4]
    assert data["algorithms"]["mt_grpo"]["exact_match"]["2"]["mean"] == pytest.approx(0.3)
    assert data["paired"]["mt_grpo"]["exact_match"]["2"]["n"] == 3

    plain = write_report(make_study(tmp_path / "plain")).read_text()  # no curve points: no section, no plot
    assert "## Held-out learning curve" not in plain and not (tmp_path / "plain/plots/heldout_curve.png").exists()
