"""The installed package under verifiers' own CLI (vf-install, vf-eval) against a real `rlvr serve` (tiny-random)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]


def test_vf_install_finds_the_package():
    # vf-install runs `uv pip install -e environments/vf_musique`: uv is in the venv's bin/.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(BIN.parent)}
    proc = subprocess.run(
        [str(BIN / "vf-install"), "vf-musique", "-p", "environments"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = subprocess.run(
        [sys.executable, "-c", "import vf_musique, verifiers as vf; print(type(vf.load_environment('vf-musique')).__name__)"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.strip().splitlines()[-1] == "MusiqueEnv"


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path):
    env_args = json.dumps({"max_turns": 3, "num_eval_examples": 3})
    command = [
        str(BIN / "vf-eval"), "vf-musique", "-m", tiny_server.model, "-b", tiny_server.base_url,
        "-n", "3", "-r", "1", "-t", "48", "-a", env_args, "-s",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PRIME_API_KEY": "unused"}
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    (run_dir,) = (tmp_path / "outputs" / "evals" / f"vf-musique--{tiny_server.model}").iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["num_examples"] == 3 and metadata["rollouts_per_example"] == 1
    assert len(rows) == 3 and len({r["example_id"] for r in rows}) == 3
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
