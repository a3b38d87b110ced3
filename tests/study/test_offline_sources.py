"""A study with an offline recipe keeps the `rlvr collect` command that made its dataset (the dataset lives
outside the study directory), and that command, parsed by the real CLI, asks for the same collection."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest
import typer

from rlvr.cli import app
from rlvr.offline.collect import CollectSettings, check_settings, read_settings
from rlvr.study.layout import StudyLayout
from rlvr.study.runner import Manifest
from rlvr.study.settings import StudySettings

COLLECTED = CollectSettings(env="vf-triviaqa-search", model="smollm2-135m",
                            env_args={"protocol": "search", "max_turns": 2, "note": "it's quoted"},
                            num_examples=12, rollouts_per_example=8, temperature=0.7, max_tokens=32)


def parse_collect(command: str) -> dict:
    """The parameters `rlvr collect` would run with, from its command line (click's parser, nothing runs)."""
    words = shlex.split(command)
    assert words[:2] == ["rlvr", "collect"]
    group = typer.main.get_command(app)
    collect = group.commands["collect"]
    return collect.make_context("collect", words[2:]).params


@pytest.mark.parametrize("dtype", [None, "float32"])
def test_the_collect_command_round_trips_through_the_cli(tmp_path, dtype):
    collected = dataclasses.replace(COLLECTED, dtype=dtype)
    out = tmp_path / "my collect"  # a space: the command must quote it
    params = parse_collect(collected.command(out))
    assert params["out"] == out and json.loads(params["env_args"]) == collected.env_args
    for name in ("env", "model", "num_examples", "rollouts_per_example", "split", "temperature", "max_tokens",
                 "segmentation", "seed", "dtype"):
        assert params[name] == getattr(collected, name), name


def test_a_collection_resumes_only_in_its_dtype(tmp_path):
    from rlvr.trajectories import TrajectoryError

    check_settings(tmp_path, COLLECTED)  # collected before --dtype existed, or without it: vLLM's choice
    check_settings(tmp_path, COLLECTED)
    with pytest.raises(TrajectoryError, match=r"other settings \(dtype: saved None, now 'float32'\)"):
        check_settings(tmp_path, dataclasses.replace(COLLECTED, dtype="float32"))


def test_the_manifest_keeps_how_each_offline_dataset_was_made(tmp_path):
    collected = tmp_path / "collect"
    collected.mkdir()
    check_settings(collected, COLLECTED)  # what `rlvr collect` writes first: collect.json
    assert read_settings(collected) == COLLECTED and read_settings(tmp_path) is None

    settings = StudySettings(env="vf-triviaqa-search", model="smollm2-135m", algos=["grpo", "oreo"], seeds=[0],
                             training={"max_steps": 2}, offline_datasets={"oreo": str(collected)})
    layout = StudyLayout(tmp_path / "study")
    layout.root.mkdir()
    Manifest.open(layout, settings, "rlvr study ...")
    stored = json.loads(layout.manifest.read_text())["offline_sources"]
    assert stored == {"oreo": COLLECTED.command(collected)}

    # the dataset directory is gone on another machine: a later invocation keeps what was recorded
    (collected / "collect.json").unlink()
    Manifest.open(layout, dataclasses.replace(settings, algos=["grpo", "oreo"]), "rlvr study ... again")
    assert json.loads(layout.manifest.read_text())["offline_sources"] == stored


def test_a_missing_offline_dataset_fails_before_anything_runs(tmp_path):
    from rlvr.study.runner import run_study
    from rlvr.study.settings import StudyError

    missing = tmp_path / "collect"
    settings = StudySettings(env="vf-triviaqa-search", model="smollm2-135m", algos=["grpo", "oreo"], seeds=[0],
                             training={"max_steps": 2}, offline_datasets={"oreo": str(missing)})
    out = tmp_path / "study"
    with pytest.raises(StudyError, match=r"oreo trains on .*collect, which cannot be read: no trajectories at .*"
                                         r"Make it first with `rlvr collect --env vf-triviaqa-search"):
        run_study(settings, out)
    assert not out.exists()  # nothing written, no server started
