"""The `rlvr demo` pipeline with short settings on tiny-random: evaluate, train 2 MT-GRPO steps, sync the final
weights, evaluate again, report. It starts its own server (the final weights are loaded into it), hence slow."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import assert_png, read_jsonl

from rlvr.demo import DemoSettings, run_demo

pytestmark = pytest.mark.slow


def test_demo_pipeline(tiny_model, tmp_path):
    settings = DemoSettings(
        model="tiny-random", steps=2, batch_size=8, rollouts_per_example=4, eval_examples=2, eval_rollouts=1,
        max_tokens_per_turn=8,
        env_args={"protocol": "search", "num_train_examples": 16, "num_eval_examples": 2, "max_turns": 2},
    )
    report = run_demo(settings, tmp_path)
    assert report == tmp_path / "report.md"
    text = report.read_text()
    assert text.startswith("# rlvr demo: MT-GRPO on vf-triviaqa-search with tiny-random")
    # the task's outcome leads, beside the turn reward (issue 44)
    verdict = re.search(r"^Exact match [\d.]+ -> [\d.]+ \(.+\); turn reward \(the search turn\) [\d.]+ -> [\d.]+ \(.+\)\.$",
                        text, re.MULTILINE)
    assert verdict, text
    assert "| metric | before | after | change |\n|---|---|---|---|\n| exact_match |" in text
    for metric in ("answered", "reward", "turn_reward", "tool_execution_reward", "turn/1/reward"):
        assert re.search(rf"^\| {metric} \| [-\d.]+ ± [\d.]+ \| [-\d.]+ ± [\d.]+ \| [-+]\d\.\d+ \|$", text, re.MULTILINE), metric
    assert "![demo](demo.png)" in text and "| training |" in text
    assert_png(tmp_path / "demo.png")

    for name in ("eval_before", "eval_after"):
        rows = read_jsonl(tmp_path / name / "results.jsonl")
        assert len(rows) == 2, name
        assert json.loads((tmp_path / name / "metadata.json").read_text())["num_examples"] == 2
        # scored: the trainer turns the environment's own scoring off while it trains
        assert all("turn_reward" in r and r["turn_rewards"] for r in rows), name
    steps = [r for r in read_jsonl(tmp_path / "train" / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert (tmp_path / "train" / "final" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "settings.json").read_text())["steps"] == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert 0.0 <= summary["after"]["answered"]["mean"] <= 1.0 and summary["before"]["exact_match"]["n"] == 2
