"""`rlvr analyze DIR --against OTHER` (rlvr.study.ablation) on study directories written by hand (test_report's
make_study: known numbers, no training): the cells of the same algorithm and seed paired over the held-out
examples, per seed and pooled, the settings and starting weights that differ named, and studies that evaluate
otherwise refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report import make_study, table_row, write_json, write_results
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.study.ablation import compare, settings_difference, weights_difference, write_ablation
from rlvr.study.layout import StudyLayout
from rlvr.study.report import load_study


def study(root: Path, per_cell: dict[tuple[str, int], dict[int, list[float]]], **training) -> Path:
    """Two seeds; the given cells' held-out results (example -> exact match of each rollout); [training] changed."""
    make_study(root, seeds=(0, 1))
    layout = StudyLayout(root)
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["training"].update(training)
    write_json(layout.manifest, manifest)
    for (algo, seed), exact_match in per_cell.items():
        write_results(layout.eval(layout.cell(algo, seed)), exact_match)
    return root


@pytest.fixture
def pair(tmp_path):
    treated = study(tmp_path / "filtered", {("grpo", 0): {0: [1, 0], 1: [0, 0], 2: [1, 1]},
                                            ("grpo", 1): {0: [1, 1], 1: [1, 0], 2: [0, 0]},
                                            ("mt_grpo", 0): {0: [1, 1], 1: [1, 1], 2: [1, 1]}}, filter_groups=True)
    control = study(tmp_path / "plain", {("grpo", 0): {0: [0, 0], 1: [0, 0], 2: [1, 0]},
                                         ("grpo", 1): {0: [1, 0], 1: [1, 0], 2: [0, 0]}})
    return treated, control


def test_cells_of_the_same_algorithm_and_seed_pair_over_the_examples_per_seed_and_pooled(pair):
    treated, control = pair
    rows = compare(load_study(treated), load_study(control), ["exact_match"])
    # seed 0: 0.5, 0, 0.5 (mean 1/3, s_d 0.288675, half 4.302653 x 0.166667 = 0.717); seed 1: 0.5, 0, 0 (1/6,
    # half 0.717); pooled: 0.5, 0, 0.25 (mean 0.25, s_d 0.25, half 4.302653 x 0.144338 = 0.621). mt_grpo: no
    # results in the control, no row.
    assert [(r.algo, r.seed) for r in rows] == [("grpo", 0), ("grpo", 1), ("grpo", None)]
    assert [round(r.diff.mean, 4) for r in rows] == [0.3333, 0.1667, 0.25]
    assert (round(rows[0].diff.low, 3), round(rows[0].diff.high, 3), rows[0].diff.wins) == (-0.384, 1.050, 2)
    assert (round(rows[2].diff.low, 3), round(rows[2].diff.high, 3), rows[2].seeds) == (-0.371, 0.871, (0, 1))

    text = write_ablation(treated, control).read_text()
    assert "- `study.training.filter_groups: None -> True`" in text
    assert table_row(text, "grpo/seed-0")[1:5] == ["exact_match", "0.000", "0.000", "+0.333 [-0.384, +1.050] 2/3"]
    assert table_row(text, "grpo pooled (seeds 0, 1)")[4] == "+0.250 [-0.371, +0.871] 2/3"


def test_studies_that_evaluate_otherwise_do_not_pair(pair, tmp_path):
    treated, _ = pair
    other = study(tmp_path / "other_eval", {})
    layout = StudyLayout(other)
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["evaluation"]["rollouts"] = 4
    write_json(layout.manifest, manifest)
    with pytest.raises(ValueError, match=r"(?s)do not evaluate alike.*study.evaluation.rollouts: 4 -> 2"):
        settings_difference(load_study(treated), load_study(other))


def test_the_cli_writes_the_comparison_and_names_a_directory_that_is_no_study(pair, tmp_path):
    treated, control = pair
    result = CliRunner().invoke(app, ["analyze", str(treated), "--against", str(control)])
    assert result.exit_code == 0, result.output
    assert (treated / "against_plain.md").is_file()
    result = CliRunner().invoke(app, ["analyze", str(treated), "--against", str(tmp_path)])
    assert result.exit_code == 2 and "is no study directory" in " ".join(result.output.split())


def started_from(root: Path, algo: str, seed: int, sha: str) -> None:
    layout = StudyLayout(root)
    done = layout.done(layout.cell(algo, seed))
    write_json(done, {**json.loads(done.read_text()), "model_sha256": sha})


def test_cells_that_started_from_other_weights_are_named_and_unrecorded_ones_said_unchecked(pair):
    treated, control = pair
    for root in pair:
        for algo in ("grpo", "mt_grpo"):
            started_from(root, algo, 0, "a" * 64)
            started_from(root, algo, 1, "a" * 64)
    started_from(treated, "grpo", 1, "b" * 64)
    started_from(control, "grpo", 1, "a" * 64)
    assert weights_difference(load_study(treated), load_study(control)) == [
        f"starting weights sha256 {'a' * 16}... -> {'b' * 16}... (grpo/seed-1)"]
    (StudyLayout(control).done(StudyLayout(control).cell("grpo", 1))).write_text(
        json.dumps({"algo": "grpo", "seed": 1, "replicate": 0, "wall_s": {"total": 1.0}}))
    text = write_ablation(treated, control).read_text()
    assert "- `starting weights not checked (grpo/seed-1): a record names no sha256 of its weights`" in text
    assert "grpo/seed-0" not in text.split("What differs")[1].split("| cell")[0]
