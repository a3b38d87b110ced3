"""The installed package under verifiers' own CLI (vf-install, vf-eval) against a real `rlvr serve` (tiny-random)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_vf_install_finds_the_package(vf_install):
    vf_install("vf-musique")
    check = subprocess.run(
        [sys.executable, "-c", "import vf_musique, verifiers as vf; print(type(vf.load_environment('vf-musique')).__name__)"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.strip().splitlines()[-1] == "MusiqueEnv"


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path, vf_eval):
    _, rows = vf_eval("vf-musique", tiny_server, tmp_path, num_examples=3, rollouts=1,
                      env_args={"max_turns": 3, "num_eval_examples": 3})
    for row in rows:
        # The saved reward is the hop-weighted outcome alone; the other metrics have weight 0.
        assert row["reward"] == pytest.approx(row["hop_weighted_reward"])
        for name in ("exact_match", "token_f1", "retrieval_recall", "retrieval_precision",
                     "citation_precision", "citation_recall", "new_supporting_retrieved"):  # fmt: skip
            assert 0.0 <= row[name] <= 1.0, name
        # Summed over turns, the turn reward is turn_weight x the retrieval recall.
        assert row["turn_reward"] == pytest.approx(0.5 * row["new_supporting_retrieved"])
        assert row["new_supporting_retrieved"] == pytest.approx(row["retrieval_recall"])
        assert 1 <= row["num_turns"] <= 3
        assert row["completion"][0]["role"] == "assistant"
