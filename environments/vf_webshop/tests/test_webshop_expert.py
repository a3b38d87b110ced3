"""The scripted expert as a trajectory dataset (python -m vf_webshop.expert): the SFT / OREO data of the pipeline."""

from __future__ import annotations

import json

import pytest
from vf_webshop import load_environment
from vf_webshop.expert import export_expert_dataset, main

from rlvr.trajectories import load_trajectories


def test_expert_dataset_buys_every_goal_and_reads_as_trajectories(tmp_path):
    env = load_environment(num_train_examples=4, num_eval_examples=2, max_turns=8)
    out = export_expert_dataset(env, tmp_path / "expert", split="train")
    trajectories = load_trajectories(out, segmentation="turn")
    assert len(trajectories) == 4 and [t.reward for t in trajectories] == [1.0] * 4
    goals = [json.loads(r["info"])["goal"]["instruction_text"] for r in env.get_dataset(4)]
    for trajectory, goal in zip(trajectories, goals, strict=True):
        assert goal in trajectory.prompt[-1]["content"]  # the environment's own first page
        replies = [m["content"] for m in trajectory.completion if m["role"] == "assistant"]
        assert replies[0].startswith("search[") and replies[-1] == "click[Buy Now]"
        assert len(trajectory.steps) == len(replies) == len(trajectory.turn_rewards)
        assert trajectory.completion[-1]["content"].startswith("Thank you for shopping with us!")
        assert trajectory.metrics["success"] == 1.0


def test_expert_plays_the_same_under_a_history_window(tmp_path, capsys):
    """The history window changes the prompts, not what the expert does or earns (it plans on the shop itself)."""
    args = {"num_train_examples": 3, "num_eval_examples": 3, "max_turns": 8}
    main([str(tmp_path / "whole"), "--split", "eval", "--env-args", json.dumps(args)])
    main([str(tmp_path / "window"), "--split", "eval", "--env-args", json.dumps({**args, "history_turns": 1})])
    assert "3 expert trajectories (3 at reward 1.0" in capsys.readouterr().out
    whole, window = (load_trajectories(tmp_path / d, segmentation="turn") for d in ("whole", "window"))
    assert [t.completion for t in whole] == [t.completion for t in window]
    assert [t.turn_rewards for t in whole] == [t.turn_rewards for t in window]


def test_expert_that_cannot_finish_within_max_turns_is_kept_with_its_reward(tmp_path):
    """Two turns cannot search, open and buy: the trajectories are written with reward 0 (SFT's min_reward
    leaves them out), not dropped or failed."""
    env = load_environment(num_train_examples=2, num_eval_examples=2, max_turns=2)
    trajectories = load_trajectories(export_expert_dataset(env, tmp_path / "short"), segmentation="turn")
    assert len(trajectories) == 2 and all(t.reward == 0.0 and len(t.steps) == 2 for t in trajectories)


def test_expert_command_names_bad_env_args(tmp_path, capsys):
    for bad, says in (("{max_turns: 8}", "--env-args is not valid JSON"), ("[8]", "must be a JSON object")):
        with pytest.raises(SystemExit) as exit_info:
            main([str(tmp_path / "out"), "--env-args", bad])
        assert exit_info.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
