"""`rlvr evaluate` and `rlvr predict` against the session's tiny-random server, and `rlvr analyze` on what they
write. The results must be readable by verifiers' own tools (vf-eval's layout) and by `datasets`."""

from __future__ import annotations

import json
import math

import pytest
from cli_helpers import TRIVIAQA_ARGS, assert_png, ok, read_jsonl, rlvr

pytestmark = pytest.mark.slow
ENV = "vf-triviaqa-search"


@pytest.fixture(scope="module")
def evaluation(tiny_server, tmp_path_factory):
    """One `rlvr evaluate` (3 examples x 2 rollouts) in vf-eval's outputs/evals/<env>--<model>/<run> layout."""
    out = tmp_path_factory.mktemp("evaluate") / "outputs" / "evals" / f"{ENV}--{tiny_server.model}" / "run0"
    result = ok("evaluate", "--env", ENV, "--endpoint", tiny_server.base_url, "-n", "3", "-r", "2",
                "--max-tokens", "8", "--env-args", json.dumps(TRIVIAQA_ARGS), "--out", out)
    return out, result


def test_evaluate_writes_vf_eval_layout(evaluation, tiny_server):
    out, _ = evaluation
    assert {p.name for p in out.iterdir()} >= {"results.jsonl", "metadata.json", "summary.json"}
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["env_id"] == ENV and metadata["model"] == tiny_server.model
    assert metadata["env_args"] == TRIVIAQA_ARGS
    assert (metadata["num_examples"], metadata["rollouts_per_example"]) == (3, 2)
    rows = read_jsonl(out / "results.jsonl")
    assert len(rows) == 6
    assert sorted({r["example_id"] for r in rows}) == [0, 1, 2]
    for row in rows:
        assert row["prompt"][0]["role"] == "system" and row["completion"][0]["role"] == "assistant"
        # one reward per assistant turn, written by TurnRubric; max_turns=2
        assert 1 <= len(row["turn_rewards"]) <= 2
        assert all(isinstance(r, float) for r in row["turn_rewards"])
    assert math.isclose(metadata["avg_reward"], sum(r["reward"] for r in rows) / 6)
    summary = json.loads((out / "summary.json").read_text())
    assert math.isclose(summary["reward"]["mean"], metadata["avg_reward"])
    assert summary["turn/1/reward"]["n"] == 6


def test_evaluate_results_read_by_verifiers_and_datasets(evaluation, tiny_server):
    from datasets import load_dataset
    from verifiers.scripts.tui import LazyRunResults, discover_results

    out, _ = evaluation
    outputs = out.parents[2]
    runs = discover_results(env_dir_path=str(outputs / "no-environments"), outputs_dir_path=str(outputs))
    (run,) = runs[ENV][tiny_server.model]
    assert run.path == out and run.load_metadata()["env_id"] == ENV
    lazy = LazyRunResults(run)
    try:
        assert lazy._count == 6  # num_examples x rollouts_per_example from metadata.json
        assert lazy._read_next_line() is not None
    finally:
        lazy.close()
    dataset = load_dataset("json", data_files=str(out / "results.jsonl"), split="train")
    assert dataset.num_rows == 6
    assert {"prompt", "completion", "reward", "turn_rewards"} <= set(dataset.column_names)
    assert "turn_advantages" not in dataset.column_names  # advantages are a training quantity, not an evaluation one


def test_evaluate_prints_the_metrics_table(evaluation):
    out, result = evaluation
    for column in ("metric", "mean", "stderr"):
        assert column in result.output
    for metric in ("reward", "turn/1/reward", "turns", "tool_execution_reward"):
        assert f" {metric} " in result.output, metric
    assert result.says(f"{ENV} x tiny-random (6 rollouts)"), result
    assert result.says(f"results: {out}"), result


def test_analyze_evaluation(evaluation):
    out, _ = evaluation
    result = ok("analyze", out)
    text = (out / "analysis.md").read_text()
    rows = read_jsonl(out / "results.jsonl")
    mean = sum(r["reward"] for r in rows) / len(rows)
    assert "## Evaluations" in text
    assert f"| {ENV} | tiny-random | 6 | {mean:.3f} ± " in text
    assert "![turn_rewards](turn_rewards.png)" in text
    assert_png(out / "turn_rewards.png")
    assert result.says(f"written: {out / 'analysis.md'}"), result


def test_predict_jsonl_and_dataset(tiny_server, tmp_path):
    from datasets import load_from_disk

    out = tmp_path / "predictions"
    # the root URL (no /v1) is accepted too
    result = ok("predict", "--env", ENV, "--endpoint", tiny_server.url, "--split", "train", "-n", "2", "-r", "2",
                "--max-tokens", "8", "--temperature", "1.0", "--env-args", json.dumps(TRIVIAQA_ARGS), "--out", out)
    assert result.says(f"4 rollouts -> {out}/predictions.jsonl"), result
    records = read_jsonl(out / "predictions.jsonl")
    assert len(records) == 4
    fields = {"example_id", "prompt", "completion", "answer", "num_turns", "turn_rewards", "reward", "metrics",
              "stop_condition", "error"}
    for record in records:
        assert set(record) == fields
        assert record["num_turns"] == len(record["turn_rewards"]) >= 1
        assert record["answer"] and isinstance(record["reward"], float)
        assert "tool_execution_reward" in record["metrics"]
        assert [m["role"] for m in record["completion"]][0] == "assistant"
    dataset = load_from_disk(str(out / "dataset"))
    assert dataset.num_rows == 4
    assert dataset["example_id"] == [r["example_id"] for r in records]
    assert [json.loads(p) for p in dataset["prompt"]] == [r["prompt"] for r in records]
    assert dataset["turn_rewards"] == [r["turn_rewards"] for r in records]


def test_predict_rejects_bad_split(tiny_server, tmp_path):
    result = rlvr("predict", "--env", ENV, "--endpoint", tiny_server.base_url, "--split", "test", "--out", tmp_path)
    assert result.exit_code == 2, result
    assert result.says("--split must be 'eval' or 'train', got 'test'"), result
