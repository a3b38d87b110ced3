"""`rlvr study` on a verifiers v1 environment: the study's own server gets vLLM's token route
(rlvr.evaluation.server_flags; without it the bridge's first request fails), and its base evaluation and its one
cell (one MT-GRPO step, its held-out evaluation) run through the bridge. The smallest study there is: one cell,
one step, two held-out episodes (the bridge's train and evaluate paths are tested in test_bridge.py against the
session server; this checks that a study puts them together)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rlvr.cli import app

pytestmark = pytest.mark.slow

STUDY_TOML = """
env = "v1:v1-calculator"
model = "tiny-random"
algos = ["mt_grpo"]
seeds = [0]
server_args = ["--kv-cache-gb", "0.5"]

[env_args.taskset]
num_tasks = 4

[training]
max_steps = 1
batch_size = 4
rollouts_per_example = 2
micro_batch_size = 4
max_tokens_per_turn = 4
max_seq_len = 512
progress = false

[evaluation]
examples = 2
rollouts = 1
"""


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(2400)  # a server start, a training step and two evaluations on a machine others may load
def test_a_study_on_a_v1_environment(tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(STUDY_TOML)
    study = tmp_path / "study"
    result = CliRunner().invoke(app, ["study", "--config", str(config), "--out", str(study)])
    assert result.exit_code == 0, f"{result.output[-4000:]}\n{result.exception!r}"
    unit = study / "cells" / "mt_grpo" / "seed-0"
    assert [r["step"] for r in read_jsonl(unit / "train" / "metrics.jsonl") if "loss" in r] == [1]
    for evaluation in (study / "base" / "seed-0" / "eval", unit / "eval"):
        rows = read_jsonl(evaluation / "results.jsonl")
        assert len(rows) == 2 and all(r["error"] is None and len(r["turn_rewards"]) >= 1 for r in rows)
