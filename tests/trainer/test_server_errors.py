"""Errors and fallbacks that need a rollout server: a different tokenizer, missing token ids, and the
outcome-only GRPO of a plain verifiers rubric (its advantages checked against the formula)."""

from __future__ import annotations

import json
from statistics import mean, stdev

import pytest
from choice_env import load_environment
from test_errors_and_config import plain_env
from train_script import config
from transformers import AutoTokenizer

from rlvr.trainer import MTGRPOTrainer, ServerError
from rlvr.trainer.rollout_client import check_server

pytestmark = pytest.mark.slow


def test_a_different_tokenizer_is_refused(training_server, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert check_server(training_server.url, "tiny-random", tokenizer) == "tiny-random"
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ServerError, match="tokenises a chat differently"):
        check_server(training_server.url, "tiny-random", tokenizer)



def test_missing_token_ids_names_the_flag(training_server, tmp_path):
    cfg = config(str(tmp_path), 1)
    cfg.sampling_args["extra_body"]["return_token_ids"] = False  # the server then answers without token ids
    with pytest.raises(ServerError, match="return_token_ids"):
        MTGRPOTrainer("tiny-random", load_environment(), cfg, server_url=training_server.url)



def test_a_plain_rubric_trains_with_std_normalised_outcome_grpo(training_server, tmp_path):
    cfg = config(str(tmp_path), 1, algo="grpo", num_logged_rollouts=16)
    env = plain_env()
    trainer = MTGRPOTrainer("tiny-random", env, cfg, server_url=training_server.url)
    assert env.score_rollouts  # the trainer left the environment as it found it
    trainer.make_batch(0, trainer.generate_batch(0))
    (line,) = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    groups: dict[int, list] = {}
    for r in line["rollouts"]:
        groups.setdefault(r["example_id"], []).append(r)
    for group in groups.values():
        rewards = [r["reward"] for r in group]
        for r in group:
            # rlvr.credit grpo: (R - mean) / (sample std + 1e-4), not verifiers' mean-only R - mean
            expected = (r["reward"] - mean(rewards)) / (stdev(rewards) + 1e-4) if len(set(rewards)) > 1 else 0.0
            assert r["turn_advantages"] == pytest.approx([expected], abs=1e-6)
