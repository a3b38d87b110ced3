"""The installed package under verifiers' own CLI (vf-install, vf-eval) against a real `rlvr serve` (tiny-random)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_vf_install_then_load_by_name(vf_install, tmp_path):
    vf_install("vf-alfworld")
    code = ("import verifiers as vf; env = vf.load_environment('vf-alfworld', num_train_examples=2, "
            "num_eval_examples=2); print(type(env).__name__, len(env.dataset), len(env.eval_dataset))")  # fmt: skip
    check = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "RLVR_HOME": str(tmp_path), "HF_DATASETS_OFFLINE": "1"})  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.strip().splitlines()[-1] == "AlfWorldEnv 2 2"
    assert list((tmp_path / "alfworld").glob("games-v*/valid_unseen/*/trial_rlvr_00001/game.tw-pddl"))


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path, vf_eval):
    """4 generated games (offline, into cache_dir), each played twice by the tiny random model."""
    _, rows = vf_eval("vf-alfworld", tiny_server, tmp_path, num_examples=4, rollouts=2,
                      env_args={"max_turns": 3, "num_train_examples": 2, "num_eval_examples": 4,
                                "cache_dir": str(tmp_path / "games")})  # fmt: skip
    for row in rows:
        assert row["reward"] == row["won"] and row["won"] in (0.0, 1.0)
        assert 0.0 <= row["final_progress"] <= 1.0 and row["turn_reward"] == pytest.approx(row["subgoal_progress"])
        assert 1 <= row["num_turns"] <= 3 and row["reward_errors"] == 0.0
        assert row["prompt"][-1]["content"].startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert row["completion"][0]["role"] == "assistant"
