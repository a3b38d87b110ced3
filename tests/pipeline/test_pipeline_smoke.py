"""The shipped ALFWorld pipeline end to end at the smallest scale: tiny-random, 8 generated games, one step per
training stage, one game per evaluation, seed 0 only. Every stage runs its real command (studies with their own
vLLM server, collect, merge, value-guided search, held-out evaluations); a second invocation runs nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long]  # `make test-long`: about 25 min, too long for `make test`

ROOT = Path(__file__).resolve().parents[2]
SMALLEST = {"model": "tiny-random", "seeds": "0", "train_games": "8", "collect_games": "1", "eval_games": "1",
            "sft_steps": "1", "rl_steps": "1", "oreo_steps": "1"}
RL_CELLS = ("grpo", "gigpo", "mt_grpo_k", "ppo_bi_level", "rs", "oreo")


def pipeline(out: Path, *extra: str) -> subprocess.CompletedProcess:
    sets = [arg for name, value in SMALLEST.items() for arg in ("--set", f"{name}={value}")]
    command = [sys.executable, "-m", "rlvr.cli", "pipeline", "configs/pipelines/alfworld_cpu.toml", "--out", str(out),
               *sets, *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
           "COLUMNS": "200"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2600)


@pytest.mark.timeout(2700)  # five vLLM server starts and eight studies' evaluations: ~25 min on 2 loaded cores
def test_alfworld_pipeline_runs_every_stage_and_resumes_as_done(tiny_model, tmp_path):
    out = tmp_path / "pipeline"
    first = pipeline(out)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    expert = [json.loads(line) for line in (out / "expert" / "predictions.jsonl").read_text().splitlines()]
    assert len(expert) == 8 and all(r["reward"] == 1.0 for r in expert)  # the planner wins every game
    sft = json.loads((out / "sft" / "summary.json").read_text())
    assert "sft" in sft["algorithms"] and (out / "sft/cells/sft/seed-0/train/final/model.safetensors").is_file()
    assert len((out / "collect" / "predictions.jsonl").read_text().splitlines()) == 4  # 1 game x 4 rollouts
    assert len((out / "mixed" / "predictions.jsonl").read_text().splitlines()) == 12
    for cell in RL_CELLS:
        assert (out / "rl/cells" / cell / "seed-0/done.json").is_file(), cell
    rl = json.loads((out / "rl" / "study.json").read_text())
    assert rl["settings"]["model"] == str(out / "sft/cells/sft/seed-0/train/final")  # every cell starts from SFT
    report = (out / "rl" / "report.md").read_text()
    assert all(cell in report for cell in RL_CELLS) and "rlvr collect" not in report  # merged data: no collect cmd
    for unit in ("sft/base/seed-0", "sft/cells/sft/seed-0", *(f"rl/cells/{c}/seed-0" for c in RL_CELLS)):
        for held_out in ("eval", "eval-valid_seen"):  # valid_unseen, and the studies' [evaluation.sets]
            assert "won" in json.loads((out / unit / held_out / "summary.json").read_text()), (unit, held_out)
    assert "## Held-out set valid_seen" in report
    for result, split in (("search/seed-0", None), ("search_valid_seen/seed-0", "valid_seen")):
        assert "won" in json.loads((out / result / "summary.json").read_text())
        metadata = json.loads((out / result / "metadata.json").read_text())
        assert metadata["env_args"].get("eval_split") == split and metadata["env_args"]["max_turns"] == 10
        assert metadata["search"]["mode"] == "best_of_k"
        record = json.loads((out / result / "pipeline_stage.json").read_text())
        assert record["command"].startswith("rlvr evaluate --env vf-alfworld --model ")
        assert record["command"].endswith(f"-o {out / result}") and record["wall_s"] > 0
    markers = sorted(p.parent.relative_to(out).as_posix() for p in out.rglob("pipeline_stage.json"))
    assert markers == ["collect", "expert", "mixed", "rl", "search/seed-0", "search_valid_seen/seed-0", "sft"]
    second = pipeline(out)
    assert second.returncode == 0, second.stdout[-3000:]
    assert second.stdout.count("done, skipped") == len(markers) and "done in" not in second.stdout
