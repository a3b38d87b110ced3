"""`rlvr analyze` on a training run directory written here (no server): the table holds the numbers of the first
and last step, the plot is a PNG; bad directories fail with a message."""

from __future__ import annotations

import json

from cli_helpers import assert_png, ok, rlvr

# Three steps in the trainer's metrics.jsonl layout, then the closing summary line that transformers writes.
STEPS = [
    {"step": 1, "loss": 0.1, "reward": 0.10, "turn/1/reward": 0.20, "turn/2/reward": 0.05, "exact_match": 0.0,
     "turns": 2.0, "train/entropy": 3.0, "turn/1/advantage_std": 1.0},
    {"step": 2, "loss": 0.2, "reward": 0.30, "turn/1/reward": 0.40, "turn/2/reward": 0.15, "exact_match": 0.25,
     "turns": 2.0, "train/entropy": 2.5, "turn/1/advantage_std": 1.0},
    {"step": 3, "loss": 0.3, "reward": 0.55, "turn/1/reward": 0.70, "turn/2/reward": 0.35, "exact_match": 0.5,
     "turns": 1.5, "train/entropy": 2.0, "turn/1/advantage_std": 1.0},
]
SUMMARY = {"step": 3, "train_runtime": 12.5, "train_loss": 0.2, "epoch": 1.0}


def write_run(run_dir):
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*STEPS, SUMMARY]))


def test_analyze_synthetic_training_run(tmp_path):
    run_dir = tmp_path / "runs" / "mt_grpo"
    write_run(run_dir)
    result = ok("analyze", tmp_path / "runs")
    text = (tmp_path / "runs" / "analysis.md").read_text()
    assert text.startswith("# rlvr analysis")
    assert f"## Training run `{run_dir}`" in text
    assert "3 steps." in text
    for row in ("| reward | 0.100 | 0.550 |", "| turn/1/reward | 0.200 | 0.700 |", "| turn/2/reward | 0.050 | 0.350 |",
                "| exact_match | 0.000 | 0.500 |", "| turns | 2.000 | 1.500 |"):
        assert row in text, row
    for skipped in ("| loss |", "| train_loss |", "| train/entropy |", "| turn/1/advantage_std |"):
        assert skipped not in text, skipped  # only rollout statistics are tabled
    assert "![reward_curve](mt_grpo/reward_curve.png)" in text
    assert_png(run_dir / "reward_curve.png")
    assert result.says(f"written: {tmp_path / 'runs' / 'analysis.md'}"), result


def test_analyze_two_runs_in_one_directory(tmp_path):
    for name in ("grpo", "mt_grpo"):
        write_run(tmp_path / name)
    ok("analyze", tmp_path)
    text = (tmp_path / "analysis.md").read_text()
    assert text.count("## Training run") == 2
    for name in ("grpo", "mt_grpo"):
        assert_png(tmp_path / name / "reward_curve.png")


def test_analyze_nothing_to_analyze(tmp_path):
    result = rlvr("analyze", tmp_path)
    assert result.exit_code == 2, result
    assert result.says(f"nothing to analyze under {tmp_path}: expected metrics.jsonl (training)"), result
    result = rlvr("analyze", tmp_path / "missing")
    assert result.exit_code == 2, result
    assert result.says(f"{tmp_path / 'missing'} is not a directory"), result


def test_analyze_cut_off_metrics_file(tmp_path):
    write_run(tmp_path / "run")
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "rew')
    result = rlvr("analyze", tmp_path)
    assert result.exit_code == 2, result
    assert result.says(f"{tmp_path / 'run' / 'metrics.jsonl'}:5 is not valid JSON"), result
    assert result.says("was the file cut off mid-write?"), result


def write_evaluation(eval_dir, exact_match: float, reward: float, turn_reward: float):
    """An evaluation in our layout (results.jsonl, metadata.json, summary.json) with these held-out means."""
    eval_dir.mkdir(parents=True)
    (eval_dir / "metadata.json").write_text(json.dumps({"env_id": "vf-triviaqa-search", "model": "smollm2-135m"}))
    (eval_dir / "results.jsonl").write_text(json.dumps({"example_id": 0, "reward": reward, "turn_rewards": []}) + "\n")
    summary = {"exact_match": {"mean": exact_match, "stderr": 0.045 if exact_match else 0.0, "n": 48},
               "reward": {"mean": reward, "stderr": 0.05, "n": 48},
               "turn_reward": {"mean": turn_reward, "stderr": 0.04, "n": 48}}
    (eval_dir / "summary.json").write_text(json.dumps(summary))


def test_analyze_leads_with_a_fall_of_the_held_out_outcome(tmp_path):
    """Issue 44's demo run: the turn reward rose, exact match and the outcome reward fell; the fall comes first."""
    write_evaluation(tmp_path / "demo" / "eval_before", exact_match=0.104, reward=0.479, turn_reward=0.262)
    write_evaluation(tmp_path / "demo" / "eval_after", exact_match=0.0, reward=0.375, turn_reward=0.452)
    ok("analyze", tmp_path)
    text = (tmp_path / "analysis.md").read_text()
    first, second = text.split("\n\n")[1:3]
    assert first == ("**Warning: training lowered the held-out exact match (the task's outcome) (demo/eval_after "
                     "against demo/eval_before)** from 0.104 to 0.000 (-0.104, 2.3 standard errors of the "
                     "difference).")
    assert second.startswith("**Warning: training lowered the held-out outcome reward") and "(-0.104, 1.5 " in second
    assert text.index("Warning") < text.index("## Evaluations")


def test_analyze_does_not_warn_when_the_outcome_rose(tmp_path):
    write_evaluation(tmp_path / "eval_before", exact_match=0.104, reward=0.479, turn_reward=0.262)
    write_evaluation(tmp_path / "eval_after", exact_match=0.312, reward=0.867, turn_reward=0.661)
    ok("analyze", tmp_path)
    assert "Warning" not in (tmp_path / "analysis.md").read_text()
