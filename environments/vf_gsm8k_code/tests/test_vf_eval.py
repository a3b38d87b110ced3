"""The installed package under verifiers' own CLI: vf-install, and vf-eval against a real `rlvr serve`."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_vf_install_then_load_by_name(vf_install):
    vf_install("vf-gsm8k-code")
    code = (
        "import verifiers as vf\n"
        "env = vf.load_environment('vf-gsm8k-code', num_train_examples=2, num_eval_examples=2)\n"
        "print(type(env).__name__, env.max_turns)"
    )
    check = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.strip().splitlines()[-1] == "CodeXMLEnv 2"


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path, vf_eval):
    _, rows = vf_eval("vf-gsm8k-code", tiny_server, tmp_path, num_examples=3, rollouts=1,
                      env_args={"num_eval_examples": 3})
    for row in rows:
        assert row["reward"] == row["correct_answer_reward"]
        assert row["reward"] in (0.0, 0.1, 1.0)
        # at most one turn can run code with max_turns=2: 0 or 0.35 per verl-tool's formula
        assert row["turn_reward"] == pytest.approx(row["code_execution_reward"])
        assert row["code_execution_reward"] in (0.0, pytest.approx(0.35))
        assert 1 <= row["num_turns"] <= 2
        assert row["completion"][0]["role"] == "assistant"
        assert float(row["answer"]) == float(row["answer"])  # a numeric gold answer reached the rollout
