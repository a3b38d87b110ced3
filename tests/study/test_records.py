"""Committed records (rlvr.study.records) on study directories written by hand (tests/study/test_report.py's
make_study: known numbers, no training): records of two machines merged give the report of one study, a record of
another configuration is named, recorded units are not pending, what is left is estimated from the measured cells."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from test_report import make_study, split_study, write_cell, write_curve
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.study import records, runner
from rlvr.study.layout import StudyLayout
from rlvr.study.report import write_report
from rlvr.study.settings import StudyError, StudySettings

MACHINE_A = {"cpu": "Some CPU @ 3.0GHz", "cores": 2, "memory_gb": 24.0}
MACHINE_B = {"cpu": "Other CPU @ 2.0GHz", "cores": 8, "memory_gb": 32.0}


def settings_of(root: Path, results: Path, **changes) -> StudySettings:
    stored = json.loads(StudyLayout(root).manifest.read_text())["settings"]
    return StudySettings.from_dict({**stored, "results": str(results), **changes})


def export(root: Path, results: Path, units: list[str], **changes) -> StudySettings:
    """The records of `units` of the study directory `root` into `results`, as the study writes them."""
    settings = settings_of(root, results, **changes)
    layout = StudyLayout(root)
    records.write_manifest(settings, results)
    for key in units:
        records.write_record(settings, layout, root / key)
    return settings


def set_machine(root: Path, keys: list[str], machine: dict) -> None:
    for key in keys:
        done = root / key / "done.json"
        done.write_text(json.dumps({**json.loads(done.read_text()), "machine": machine, "commit": "b" * 40,
                                    "peak_rss_mb": 2048.0}))


def without_provenance(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("provenance", "settings")}


def test_records_of_two_machines_merged_give_the_report_of_one_study(tmp_path):
    study = make_study(tmp_path / "study")
    whole = json.loads(write_report(study).with_name("summary.json").read_text())
    bases = [f"base/seed-{s}" for s in (0, 1, 2)]
    grpo, mt_grpo = ([f"cells/{a}/seed-{s}" for s in (0, 1, 2)] for a in ("grpo", "mt_grpo"))
    set_machine(study, grpo, MACHINE_A)
    set_machine(study, mt_grpo, MACHINE_B)
    # machine A ran the base evaluations and grpo, machine B mt_grpo: disjoint record files, merged as git would
    export(study, tmp_path / "a", bases + grpo)
    export(study, tmp_path / "b", mt_grpo)
    merged = tmp_path / "merged"
    shutil.copytree(tmp_path / "a", merged)
    shutil.copytree(tmp_path / "b", merged, dirs_exist_ok=True)
    assert sorted(p.relative_to(merged).as_posix() for p in records.record_files(merged)) == sorted(
        f"{k}.json" for k in bases + grpo + mt_grpo)

    report = write_report(merged).read_text()  # a results directory alone, as `rlvr analyze DIR` reads it
    again = json.loads((merged / "summary.json").read_text())
    assert without_provenance(again) == without_provenance(whole)
    assert "6 of 6 cells finished" in report
    table = report.split("## Provenance and cost")[1]
    assert "| mt_grpo/seed-1 | bbbbbbbbbb | Other CPU @ 2.0GHz, 8 cores | 7.5 | 2.0 |" in table
    assert "| base/seed-0 | n/a | n/a | 1.0 |" in table
    assert "The units ran on 2 machines" in table and "Nothing is left" in table
    assert again["provenance"]["mt_grpo/seed-2"]["machine"] == MACHINE_B
    (merged / "report.md").unlink()
    assert CliRunner().invoke(app, ["analyze", str(merged)]).exit_code == 0  # a results directory is a study to it
    assert (merged / "report.md").read_text() == report

    # the study directory of machine A, with the merged records: the same numbers, its own units first
    manifest = json.loads(StudyLayout(study).manifest.read_text())
    manifest["settings"]["results"] = str(merged)
    StudyLayout(study).manifest.write_text(json.dumps(manifest))
    for key in mt_grpo:
        shutil.rmtree(study / key)
    write_report(study)
    assert without_provenance(json.loads((study / "summary.json").read_text())) == without_provenance(whole)


def test_a_record_of_another_configuration_is_named_not_mixed(tmp_path):
    study = make_study(tmp_path / "study", seeds=(0,))
    results = tmp_path / "results"
    settings = export(study, results, ["base/seed-0", "cells/grpo/seed-0", "cells/mt_grpo/seed-0"])
    records.check_records(settings, results)  # the same configuration: accepted

    changed = settings_of(study, results, algo_options={"mt_grpo": {"credit": {"coef": 0.7}}})
    with pytest.raises(StudyError, match=r"1 committed record\(s\) in .* another configuration") as err:
        records.check_records(changed, results)
    assert "cells/mt_grpo/seed-0.json:\n      training.credit.coef: 0.5 -> 0.7" in str(err.value)
    assert "another --results directory" in str(err.value)

    budget = settings_of(study, results, training={**settings.training, "max_steps": 5})
    with pytest.raises(StudyError, match=r"2 committed record\(s\)") as err:
        records.check_records(budget, results)
    assert str(err.value).count("study.training.max_steps: 4 -> 5") == 2  # the cells: the base did not train
    assert "base/seed-0" not in str(err.value)
    evaluation = settings_of(study, results, evaluation={**settings.to_dict()["evaluation"], "rollouts": 4})
    with pytest.raises(StudyError, match=r"3 committed record\(s\)") as err:
        records.check_records(evaluation, results)
    assert str(err.value).count("study.evaluation.rollouts: 2 -> 4") == 3

    # an algorithm this command does not run: only its budget is compared (its options are its record's own)
    records.check_records(settings_of(study, results, algos=["grpo"], algo_options={}), results)
    # a record that cannot be read says which and what to do
    (results / "cells/grpo/seed-0.json").write_text("{")
    with pytest.raises(StudyError, match=r"record .*grpo/seed-0.json cannot be read .*restore it from git"):
        records.check_records(settings, results)


def test_recorded_units_are_done_and_a_selection_runs_only_its_units(tmp_path):
    study = make_study(tmp_path / "study", seeds=(0, 1))
    results = tmp_path / "results"
    settings = export(study, results, ["base/seed-0", "cells/grpo/seed-0", "cells/mt_grpo/seed-1"])
    fresh = StudyLayout(tmp_path / "fresh-clone")  # no study directory: only the committed records
    assert runner.pending(settings, fresh) == ([1], [("mt_grpo", 0, 0), ("grpo", 1, 0)])
    assert runner.pending(settings, fresh, only={"grpo/seed-1", "base/seed-0"}) == ([], [("grpo", 1, 0)])
    with pytest.raises(StudyError, match=r"--cells grpo/seed-7: not units of this study's grid; its units are "
                                         r"base/seed-0, base/seed-1, grpo/seed-0, mt_grpo/seed-0, grpo/seed-1"):
        runner.check_selection(settings, {"grpo/seed-7"})


def test_what_is_left_is_estimated_from_the_measured_cells(tmp_path):
    study = make_study(tmp_path / "study", seeds=(0, 1))
    layout = StudyLayout(study)
    shutil.rmtree(layout.cell("mt_grpo", 1))
    shutil.rmtree(layout.base(1))
    write_cell(layout, "grpo", 1, 0.5, replicate=1)  # measured too: grpo's mean stays 450 s
    manifest = json.loads(layout.manifest.read_text())
    manifest["settings"]["seeds"] = [0, 1, 2]
    layout.manifest.write_text(json.dumps(manifest))
    report = write_report(study).read_text()
    # left: base 1 and 2 (60 s each), grpo/seed-2 (450 s), mt_grpo/seed-1 and /seed-2 (450 s each): 1,470 s
    assert ("**Left: 5 unit(s)** (base/seed-1, base/seed-2, mt_grpo/seed-1, grpo/seed-2, mt_grpo/seed-2); about "
            "0.4 h") in report
    left = json.loads((study / "summary.json").read_text())["left"]
    assert left["estimated_s"] == pytest.approx(1470.0)


def test_records_carry_the_heldout_learning_curve(tmp_path):
    """A fresh clone's report (the records alone) has the curve the study directory's report has."""
    root, results = tmp_path / "study", tmp_path / "results"
    write_curve(make_study(root, at_steps=[2]))
    cells = [f"cells/{a}/seed-{s}" for a in ("grpo", "mt_grpo") for s in (0, 1, 2)]
    export(root, results, ["base/seed-0", "base/seed-1", "base/seed-2", *cells])
    assert json.loads((results / "cells/grpo/seed-1.json").read_text())["heldout_curve"]["2"]["exact_match"][
        "mean"] == 0.2
    _, recorded, _ = records.read_records(results)
    assert {c.heldout_curve[2]["exact_match"].mean for c in recorded if c.algo == "grpo"} == {0.1, 0.2, 0.3}
    here = write_report(root).read_text().split("## Held-out learning curve")[1].split("##")[0]
    shutil.rmtree(root)
    assert write_report(results).read_text().split("## Held-out learning curve")[1].split("##")[0] == here


def test_records_carry_the_examples_split_by_field(tmp_path):
    """[report] split_by: a fresh clone's report (the records alone) splits the per-example pairings as the study
    directory's report does."""
    root, results = tmp_path / "study", tmp_path / "results"
    split_study(root, "target_in_training")
    export(root, results, ["base/seed-0", "cells/grpo/seed-0", "cells/mt_grpo/seed-0"])
    bases, _, _ = records.read_records(results)
    assert bases[0].groups[""] == {"0": "True", "1": "True", "2": "True", "3": "False", "4": "False"}
    here = write_report(root).read_text().split("Split by `target_in_training`")[1].split("##")[0]
    shutil.rmtree(root)
    assert write_report(results).read_text().split("Split by `target_in_training`")[1].split("##")[0] == here


def test_new_units_start_from_the_weights_the_committed_units_started_from(tmp_path):
    """check_starting_weights: the same sha256 is said, another is refused naming the units and how to fix it
    (unless accepted), a model without a local checkpoint is said to be unchecked, old records without one are
    left out."""
    results = tmp_path / "results"
    for key, sha in (("base/seed-0", "a" * 64), ("cells/grpo/seed-0", "a" * 64), ("cells/gigpo/seed-0", None)):
        path = records.record_path(results, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "provenance": {"model_sha256": sha} if sha else {}}))
    assert records.starting_weights(results) == {"a" * 64: ["base/seed-0", "cells/grpo/seed-0"]}
    assert records.check_starting_weights(results, "sft/final", "a" * 64) == (
        "starting weights sha256 aaaaaaaaaaaaaaaa...: the same as the 2 committed unit(s) started from")
    with pytest.raises(StudyError, match=r"the starting weights sft/final \(sha256 bbbbbbbbbbbbbbbb\.\.\.\) are not "
                                         r"those 2 of the 2 committed unit\(s\) in .*results started from: "
                                         r"aaaaaaaaaaaaaaaa\.\.\. \(2 unit\(s\): base/seed-0, cells/grpo/seed-0\)") as err:
        records.check_starting_weights(results, "sft/final", "b" * 64)
    assert "python -m rlvr.weights check RECORD DIR" in str(err.value) and "--accept-weights" in str(err.value)
    accepted = records.check_starting_weights(results, "sft/final", "b" * 64, accept=True)
    assert accepted.endswith("accepted (--accept-weights): the report names both starting points")
    assert records.check_starting_weights(results, "HuggingFaceTB/SmolLM2-135M", None).startswith(
        "starting weights not checked: HuggingFaceTB/SmolLM2-135M is no local safetensors checkpoint")
    assert records.check_starting_weights(tmp_path / "none", "sft/final", "b" * 64) is None


def test_a_study_of_another_training_budget_takes_the_base_evaluations_of_the_same_model(tmp_path):
    """--bases-from: base records of the same model and evaluation are copied with their provenance and count as
    done; another evaluation or other starting weights are refused, naming what differs."""
    study = make_study(tmp_path / "study", seeds=(0, 1))
    for seed in (0, 1):
        done = StudyLayout(study).done(study / f"base/seed-{seed}")
        done.write_text(json.dumps({**json.loads(done.read_text()), "model_sha256": "a" * 64, "command": "first"}))
    first = tmp_path / "first"
    export(study, first, ["base/seed-0", "base/seed-1", "cells/grpo/seed-0"])
    second = tmp_path / "second"  # the same grid, trained with dynamic sampling
    stored = json.loads(StudyLayout(study).manifest.read_text())["settings"]
    settings = settings_of(study, second, training={"max_steps": 4, "batch_size": 16, "temperature": 0.7,
                                                    "max_tokens_per_turn": 32, "filter_groups": True},
                           evaluation={**stored["evaluation"], "at_steps": [2]})  # another learning curve
    assert records.take_bases(settings, first, [0, 1], "a" * 64, write=False) == ["base/seed-0", "base/seed-1"]
    assert not second.exists()
    assert records.take_bases(settings, first, [1, 2], "a" * 64) == ["base/seed-1"]  # first has no seed 2
    copied = json.loads((second / "base/seed-1.json").read_text())
    assert copied["taken_from"] == str(first) and copied["provenance"]["command"] == "first"
    assert copied["after"] == json.loads((first / "base/seed-1.json").read_text())["after"]
    records.check_records(settings, second)  # a base record holds for another training budget
    assert runner.pending(settings, StudyLayout(tmp_path / "fresh"))[0] == [0]
    assert list(records.read_records(second)[0]) == [1]
    assert records.take_bases(settings, first, [0, 1], "a" * 64) == ["base/seed-0"]  # seed 1 is there already

    other_eval = settings_of(study, tmp_path / "third",  # the evaluation samples at the training temperature
                             training={**settings.training, "temperature": 1.0})
    with pytest.raises(StudyError, match=r"(?s)--bases-from .*first: 2 base record\(s\) there evaluated something else"
                                         r".*\n      study.evaluation.temperature: 0.7 -> 1.0") as err:
        records.take_bases(other_eval, first, [0, 1], "a" * 64)
    assert "leave out --bases-from" in str(err.value) and not (tmp_path / "third").exists()
    with pytest.raises(StudyError, match=r"seed-0.json: starting weights sha256 aaaaaaaaaaaaaaaa\.\.\., this "
                                         r"study's bbbbbbbbbbbbbbbb\.\.\. \(smollm2-135m\)"):
        records.take_bases(settings_of(study, tmp_path / "fourth"), first, [0], "b" * 64)

    with pytest.raises(StudyError, match=r"copies base records into this study's results directory: give --results"):
        runner.take_bases(dataclasses.replace(settings, results=None), first)
    with pytest.raises(StudyError, match=r"--bases-from .*study: no study results there \(no .*results.json\)"):
        runner.take_bases(settings, study)
