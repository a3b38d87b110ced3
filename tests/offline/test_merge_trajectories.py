"""`rlvr merge-trajectories`: expert and policy trajectories in one dataset for OREO and rejection sampling."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.trajectories import TrajectoryError, load_trajectories, merge_trajectories

PROMPT = [{"role": "user", "content": "Your task is to: put a lamp on the desk."}]
AGENT = [{"role": "assistant", "content": "go to desk 1"}, {"role": "user", "content": "You see a lamp."},
         {"role": "assistant", "content": "take lamp"}]


def write_jsonl(directory, records):
    directory.mkdir()
    (directory / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return directory


@pytest.fixture
def sources(tmp_path):
    # an expert export: no steps, no policy (as vf_alfworld.expert writes); a collection: steps and a policy
    expert = write_jsonl(tmp_path / "expert", [
        {"example_id": i, "prompt": PROMPT, "completion": AGENT, "reward": 1.0} for i in range(2)])
    collected = write_jsonl(tmp_path / "collect", [
        {"example_id": 0, "prompt": PROMPT, "completion": AGENT[:1], "reward": 0.0, "steps": [[0, 0]],
         "segmentation": "turn", "policy": "runs/sft/final", "sample_index": s} for s in range(3)])
    return expert, collected


def test_merged_directory_holds_every_trajectory_with_its_source(sources, tmp_path):
    expert, collected = sources
    merged = merge_trajectories([expert, collected], tmp_path / "mixed")
    assert len(merged) == 5
    for reader in (tmp_path / "mixed", tmp_path / "mixed" / "dataset"):  # the JSONL and the HF dataset agree
        loaded = load_trajectories(reader)  # no segmentation needed any more: every record has its steps
        assert [t.policy for t in loaded] == [str(expert)] * 2 + ["runs/sft/final"] * 3
        assert [t.reward for t in loaded] == [1.0, 1.0, 0.0, 0.0, 0.0]
        assert loaded[0].steps == ((0, 0), (2, 0)) and loaded[0].completion == AGENT
        assert [t.sample_index for t in loaded[2:]] == [0, 1, 2]
    assert json.loads((tmp_path / "mixed" / "sources.json").read_text()) == [str(expert), str(collected)]
    merge_trajectories([collected], tmp_path / "mixed")  # replaced as a whole, never appended to
    assert len(load_trajectories(tmp_path / "mixed")) == 3


def test_a_source_that_cannot_be_read_fails_and_leaves_nothing(sources, tmp_path):
    expert, _ = sources
    with pytest.raises(TrajectoryError, match="no trajectories at .*missing"):
        merge_trajectories([expert, tmp_path / "missing"], tmp_path / "mixed")
    with pytest.raises(TrajectoryError, match="nothing to merge"):
        merge_trajectories([], tmp_path / "mixed")
    assert not (tmp_path / "mixed").exists()


def test_command_line(sources, tmp_path):
    expert, collected = sources
    result = CliRunner().invoke(app, ["merge-trajectories", str(expert), str(collected), "-o", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert "5 trajectories (2 with reward >= 1) from 2 sources" in result.output
    bad = CliRunner().invoke(app, ["merge-trajectories", str(expert), "-o", str(tmp_path / "x"), "--segmentation",
                                   "word"])
    assert bad.exit_code == 2 and "--segmentation must be turn or line" in bad.output
