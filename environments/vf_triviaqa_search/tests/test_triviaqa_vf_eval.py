"""The installed package under verifiers' own CLI, against a real `rlvr serve` of the tiny random model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path):
    env_args = json.dumps({"index_cache_dir": str(tmp_path / "index")})
    command = [
        str(BIN / "vf-eval"), "vf-triviaqa-search", "-m", tiny_server.model, "-b", tiny_server.base_url,
        "-n", "5", "-r", "2", "-t", "48", "-a", env_args, "-s",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PRIME_API_KEY": "unused"}
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # vf-eval saves under ./outputs/evals/<env>--<model>/<run id>/ when run outside the repo.
    (run_dir,) = (tmp_path / "outputs" / "evals" / f"vf-triviaqa-search--{tiny_server.model}").iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["num_examples"] == 5 and metadata["rollouts_per_example"] == 2
    assert len(rows) == 10 and len({r["example_id"] for r in rows}) == 5
    for row in rows:
        # The saved reward is the weighted outcome of the paper's rubric; turn rewards are kept as metrics.
        outcome = (
            0.5 * row["answer_contains_alias"] + 1.0 * row["exact_match"]
            + 0.2 * row["xml_format_reward"] + 0.2 * row["xml_tag_reward"]
        )  # fmt: skip
        assert row["reward"] == pytest.approx(outcome)
        assert 0.0 <= row["tool_execution_reward"] <= 1.0 and 0.0 <= row["answer_in_first_search_result"] <= 1.0
        assert row["turn_reward"] == pytest.approx(
            0.2 * row["tool_execution_reward"] + 0.5 * row["answer_in_first_search_result"]
        )
        assert 1 <= row["num_turns"] <= 2
        assert row["completion"][0]["role"] == "assistant"
