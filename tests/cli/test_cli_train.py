"""`rlvr train` for 2 steps with tiny-random, from a --config TOML with --set and --env-args overrides, against the
session's `training_server` (which training runs share: each pushes its weights before its first batch), then
`rlvr analyze` on the run directory."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_png, ok, read_jsonl

pytestmark = pytest.mark.slow

CONFIG = """\
env = "vf-triviaqa-search"
model = "tiny-random"
algo = "grpo_mr"

[env_args]
protocol = "search"
num_train_examples = 8
num_eval_examples = 2
max_turns = 3

[training]
max_steps = 50
batch_size = 8
rollouts_per_example = 4
micro_batch_size = 4
max_tokens_per_turn = 4
max_seq_len = 512
learning_rate = 1e-3
use_lora = false
save_steps = 2
logging_steps = 1
report_to = "none"
progress = false
seed = 0
"""


@pytest.fixture(scope="module")
def training_run(training_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    config = root / "tiny.toml"
    config.write_text(CONFIG)
    run_dir = root / "run"
    result = ok("train", "--config", config, "--set", "max_steps=2", "--set", "temperature=0.9",
                "--set", "credit.norm=none",
                "--env-args", '{"max_turns": 2}', "--server", training_server.url, "--run-dir", run_dir)
    return run_dir, result


def test_train_writes_the_run_directory(training_run):
    run_dir, result = training_run
    assert result.says(f"run directory: {run_dir}"), result
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"] == "tiny-random"
    # TOML env_args, then --env-args on top; the algorithm stays out of the environment's arguments
    assert config["env_args"] == {"protocol": "search", "num_train_examples": 8, "num_eval_examples": 2,
                                  "max_turns": 2}
    training = config["training"]
    assert training["max_steps"] == 2 and training["temperature"] == 0.9  # --set beats the TOML
    assert training["algo"] == "grpo_mr" and training["credit"] == {"norm": "none"}  # the TOML's algo, --set credit
    assert (training["batch_size"], training["rollouts_per_example"], training["use_lora"]) == (8, 4, False)

    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        assert 0.0 <= record["reward"] <= 1.0
        assert "turn/1/reward" in record and record["batch/samples"] >= 1
    assert (run_dir / "rollouts.jsonl").is_file()
    assert (run_dir / "checkpoint-2" / "rlvr_state.json").is_file()
    assert {"config.json", "model.safetensors"} <= {p.name for p in (run_dir / "final").iterdir()}


def test_analyze_training_run(training_run):
    run_dir, _ = training_run
    ok("analyze", run_dir)
    text = (run_dir / "analysis.md").read_text()
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    assert f"## Training run `{run_dir}`" in text
    assert "2 steps." in text  # the trainer's closing summary line is not a step
    assert f"| reward | {steps[0]['reward']:.3f} | {steps[1]['reward']:.3f} |" in text
    assert "| turn/1/reward |" in text
    assert "![reward_curve](reward_curve.png)" in text
    assert_png(run_dir / "reward_curve.png")
