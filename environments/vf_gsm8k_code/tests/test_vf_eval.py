"""The installed package under verifiers' own CLI: vf-install, and vf-eval against a real `rlvr serve`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]


def test_vf_install_then_load_by_name():
    # vf-install runs `uv pip install -e`: uv from this venv, installing into this venv
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix}
    proc = subprocess.run(
        [str(BIN / "vf-install"), "vf-gsm8k-code", "-p", "environments"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = (
        "import verifiers as vf\n"
        "env = vf.load_environment('vf-gsm8k-code', num_train_examples=2, num_eval_examples=2)\n"
        "print(type(env).__name__, env.max_turns)"
    )
    check = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.strip().splitlines()[-1] == "CodeXMLEnv 2"


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path):
    command = [
        str(BIN / "vf-eval"), "vf-gsm8k-code", "-m", tiny_server.model, "-b", tiny_server.base_url,
        "-n", "3", "-r", "1", "-t", "48", "-a", json.dumps({"num_eval_examples": 3}), "-s",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    (run_dir,) = (tmp_path / "outputs" / "evals" / f"vf-gsm8k-code--{tiny_server.model}").iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["num_examples"] == 3 and metadata["rollouts_per_example"] == 1
    assert len(rows) == 3 and len({r["example_id"] for r in rows}) == 3
    for row in rows:
        assert row["reward"] == row["correct_answer_reward"]
        assert row["reward"] in (0.0, 0.1, 1.0)
        # at most one turn can run code with max_turns=2: 0 or 0.35 per verl-tool's formula
        assert row["turn_reward"] == pytest.approx(row["code_execution_reward"])
        assert row["code_execution_reward"] in (0.0, pytest.approx(0.35))
        assert 1 <= row["num_turns"] <= 2
        assert row["completion"][0]["role"] == "assistant"
        assert float(row["answer"]) == float(row["answer"])  # a numeric gold answer reached the rollout
