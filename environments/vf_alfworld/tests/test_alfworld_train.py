"""MT-GRPO trains on vf-alfworld: two steps of tiny-random on two generated games (3 turns, 8 tokens a turn), with
the real ALFWorld engine, the real trainer and a real `rlvr serve` (the session's `training_server`, which training
runs share: each pushes its weights before its first batch; the other shared servers keep theirs).

tiny-random writes no action, so every reward here is 0 (and the gradient too): the test checks that the turn-level
pipeline runs end to end on this environment (turn rewards, per-turn advantages, checkpoints); that MT-GRPO learns
from turn rewards is tests/trainer/test_training.py's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from vf_alfworld import load_environment

from rlvr.trainer import MTGRPOConfig, run_training

pytestmark = pytest.mark.slow
MAX_TURNS = 3


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def train(server, tmp_path: Path, game_cache: str, steps: int, rollouts: int = 4, **env_args) -> None:
    """`steps` steps on 2 generated games, `rollouts` rollouts of each per batch."""
    env = load_environment(num_train_examples=2, num_eval_examples=0, max_turns=MAX_TURNS, cache_dir=game_cache,
                           **env_args)  # fmt: skip
    config = MTGRPOConfig(
        output_dir=str(tmp_path), max_steps=steps, save_steps=steps, seed=0,
        batch_size=2 * rollouts, rollouts_per_example=rollouts, micro_batch_size=2,
        # a first prompt is ~390 tokens (few-shot exchange included), each observation adds the command list
        max_tokens_per_turn=8, max_seq_len=2048, temperature=1.0, learning_rate=1e-3,
        report_to="none", logging_steps=1, progress=False,
    )  # fmt: skip
    run_training(env, "tiny-random", config, server_url=server.url)


def test_mt_grpo_two_steps_on_generated_games(training_server, game_cache, tmp_path):
    train(training_server, tmp_path, game_cache, steps=2)

    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert math.isfinite(r["loss"]) and r["errors"] == 0.0 and r["reward_errors"] == 0.0
        assert 1.0 <= r["turns"] <= MAX_TURNS
        for k in range(1, int(r["turns"]) + 1):  # the sub-goal turn rewards reach the trainer, turn by turn
            assert 0.0 <= r[f"turn/{k}/reward"] <= 1.0 and math.isfinite(r[f"turn/{k}/advantage_std"])
        assert 0.0 <= r["won"] <= 1.0 and 0.0 <= r["final_progress"] <= 1.0 and 0.0 <= r["valid_action"] <= 1.0
        assert r["turn_reward"] == pytest.approx(r["subgoal_progress"])  # the one turn reward function
    batches = read_jsonl(tmp_path / "rollouts.jsonl")
    assert [b["batch_index"] for b in batches] == [0, 1] and all(len(b["example_ids"]) == 8 for b in batches)
    for rollout in (r for b in batches for r in b["rollouts"]):
        assert rollout["error"] == ""
        assert 1 <= len(rollout["turn_rewards"]) <= MAX_TURNS
        assert len(rollout["turn_advantages"]) == len(rollout["turn_rewards"])
        assert all(math.isfinite(a) for a in rollout["turn_advantages"])  # no 0/0 from all-equal groups
        assert all(0.0 <= t <= 1.0 for t in rollout["turn_rewards"])
        assert rollout["completion"]  # the game answered the model's turns
    assert (tmp_path / "checkpoint-2" / "trainer_state.json").is_file()
    assert (tmp_path / "final" / "adapter_model.safetensors").is_file()  # LoRA, MTGRPOConfig's default


def test_a_history_window_trains_each_turn_as_its_own_sample(training_server, game_cache, tmp_path):
    """history_turns=1: turn 3's prompt leaves turn 1 out, so it does not extend turn 2's prompt and completion token
    by token; the trainer takes each turn as its own sample (batching.rollout_samples) and still trains. 2 rollouts
    of each game (a batch of 4): the window shows in each rollout, and a group of 2 still has advantages to compute."""
    train(training_server, tmp_path, game_cache, steps=1, rollouts=2, history_turns=1)
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "loss" in r]
    assert len(records) == 1 and math.isfinite(records[0]["loss"]) and records[0]["errors"] == 0.0
    assert records[0]["batch/packed_fraction"] == 0.0
    rollouts = [r for b in read_jsonl(tmp_path / "rollouts.jsonl") for r in b["rollouts"]]
    assert rollouts  # the logged ones (num_logged_rollouts)
    for rollout in rollouts:  # tiny-random writes no action, so no game is won before the turn limit
        assert len(rollout["turn_rewards"]) == MAX_TURNS and rollout["error"] == ""
        assert rollout["packed"] is False and rollout["not_packed_because"].startswith("turn 2: ")
        assert all(math.isfinite(a) for a in rollout["turn_advantages"])
