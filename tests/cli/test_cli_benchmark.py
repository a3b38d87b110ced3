"""`rlvr benchmark` over the model x retriever grid (it serves each model itself, hence slow), then
`rlvr analyze` on the grid: a table per cell and a heatmap."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_png, ok, read_jsonl

from rlvr.evaluation import mean_stderr

pytestmark = pytest.mark.slow

ENV_ARGS = {"max_turns": 2, "num_train_examples": 2, "num_eval_examples": 2}


def test_benchmark_grid_and_analysis(tiny_model, tmp_path):
    out = tmp_path / "bench"
    result = ok("benchmark", "--models", "tiny-random", "--envs", "vf-musique", "--retrievers", "bm25,golden",
                "-n", "2", "--max-tokens", "8", "--env-args", json.dumps(ENV_ARGS), "--out", out)
    assert result.says(f"2 cells -> {out}"), result

    cells = read_jsonl(out / "grid.jsonl")
    assert [(c["model"], c["env"], c["retriever"], c["n"]) for c in cells] == [
        ("tiny-random", "vf-musique", "bm25", 2), ("tiny-random", "vf-musique", "golden", 2)]
    for cell in cells:
        cell_dir = out / "tiny-random" / f"vf-musique--{cell['retriever']}"
        metadata = json.loads((cell_dir / "metadata.json").read_text())
        assert metadata["env_args"] == {**ENV_ARGS, "retriever": cell["retriever"]}
        rows = read_jsonl(cell_dir / "results.jsonl")
        assert len(rows) == 2
        stat = mean_stderr([r["reward"] for r in rows])
        assert (cell["reward"], cell["stderr"]) == pytest.approx((stat.mean, stat.stderr))
        assert "retrieval_recall" in cell  # every reward function's mean is in the grid

    ok("analyze", out)
    text = (out / "analysis.md").read_text()
    assert f"## Benchmark `{out}`" in text
    for cell in cells:
        row = f"| tiny-random | vf-musique | {cell['retriever']} | {cell['reward']:.3f} ± {cell['stderr']:.3f} | 2 |"
        assert row in text, row
    assert "## Evaluations" in text  # the cells are vf-eval result directories too
    assert "![grid](grid.png)" in text
    assert_png(out / "grid.png")
