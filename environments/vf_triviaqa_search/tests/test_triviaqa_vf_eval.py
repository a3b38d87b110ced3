"""The installed package under verifiers' own CLI, against a real `rlvr serve` of the tiny random model."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path, vf_eval):
    _, rows = vf_eval("vf-triviaqa-search", tiny_server, tmp_path, num_examples=5, rollouts=2,
                      env_args={"index_cache_dir": str(tmp_path / "index")})
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
