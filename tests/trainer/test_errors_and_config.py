"""Clear errors (what, where, how to fix) and the outcome-only fallback for rubrics that are not turn-aware."""

from __future__ import annotations

import json
import os
from statistics import mean, stdev

import pytest
import verifiers as vf
from choice_env import answer_reward, load_environment
from datasets import Dataset
from train_script import config
from transformers import AutoTokenizer

from rlvr.trainer import ConfigError, MTGRPOConfig, MTGRPOTrainer, ServerError
from rlvr.trainer.rollout_client import check_server


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=12, rollouts_per_example=8), "not a multiple of rollouts_per_example=8"),
    (dict(batch_size=16, rollouts_per_example=8, micro_batch_size=5), r"micro_batch_size \* processes"),
    (dict(batch_size=16, rollouts_per_example=1), "at least 2"),
    (dict(loss_type="ppo"), "loss_type=.ppo. is not one of"),
    (dict(num_iterations=2, save_steps=3), "multiple of num_iterations=2"),
    (dict(weight_sync="nccl"), "needs CUDA"),
    (dict(algo="mtgrpo"), "algo='mtgrpo' is not a group-credit estimator"),
    (dict(algo="grpo", credit={"coef": 1.0}), r"credit parameter\(s\) \['coef'\] do not apply to algo='grpo'"),
    (dict(micro_batch_tokens=1), "micro_batch_tokens=1 must be >= 2"),
])
def test_config_errors_say_what_to_change(tmp_path, kwargs, message):
    base = dict(output_dir=str(tmp_path), batch_size=16, rollouts_per_example=8, micro_batch_size=8,
                report_to="none")
    with pytest.raises(ConfigError, match=message):
        MTGRPOConfig(**{**base, **kwargs})


def test_config_maps_max_tokens_per_turn_into_sampling_args(tmp_path):
    cfg = config(str(tmp_path), 1, max_tokens_per_turn=7)
    assert cfg.sampling_args["max_tokens"] == 7
    assert cfg.sampling_args["extra_body"]["return_token_ids"] is True


def test_unreachable_server_prints_the_command_that_starts_one(tmp_path, tiny_model):
    with pytest.raises(ServerError, match=r"(?s)unreachable.*rlvr serve --model tiny-random --port 9"):
        MTGRPOTrainer("tiny-random", load_environment(), config(str(tmp_path), 1),
                      server_url="http://127.0.0.1:9")


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


def plain_env() -> vf.Environment:
    """A plain verifiers environment: one turn, a vf.Rubric that scores only the whole rollout."""
    dataset = Dataset.from_list([{"question": f"Say a word ({i}).", "answer": ""} for i in range(4)])
    return vf.SingleTurnEnv(dataset=dataset, rubric=vf.Rubric(funcs=[answer_reward]))


def test_a_plain_rubric_trains_with_std_normalised_outcome_grpo(training_server, tmp_path):
    cfg = config(str(tmp_path), 1, algo="grpo", num_logged_rollouts=16)
    env = plain_env()
    trainer = MTGRPOTrainer("tiny-random", env, cfg, server_url=training_server.url)
    assert env.score_rollouts  # the trainer left the environment as it found it
    trainer.make_batch(0)
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


def test_a_turn_level_algorithm_on_a_plain_rubric_says_what_is_missing(tmp_path):
    with pytest.raises(ConfigError, match=r"(?s)algo='mt_grpo' assigns credit per turn.*gives no turn rewards.*"
                                          r"algo='grpo'.*TurnRubric\(turn_rewards="):
        MTGRPOTrainer.preflight(plain_env(), config(str(tmp_path), 1, algo="mt_grpo"))


def test_credit_settings_merge_with_the_environments_defaults(tmp_path):
    from rlvr.trainer.mt_grpo import credit_params

    env = load_environment(credit={"unreached": "zero", "coef": 2.0})
    assert credit_params(env, config(str(tmp_path), 1, algo="mt_grpo_k", credit={"alpha": 0.5})) == \
        {"unreached": "zero", "alpha": 0.5}  # the environment's coef is not mt_grpo_k's, its unreached is kept
    assert credit_params(env, config(str(tmp_path), 1, algo="mt_grpo")) == {"coef": 2.0}
    with pytest.raises(ConfigError, match="sets 1.0 but the environment's TurnRubric declares 2.0"):
        credit_params(env, config(str(tmp_path), 1, algo="mt_grpo", credit={"coef": 1.0}))


def test_wandb_without_a_key_runs_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = config(str(tmp_path), 1, report_to="wandb")
    assert cfg.report_to == ["wandb"]
    assert os.environ["WANDB_MODE"] == "offline"  # transformers' WandbCallback then logs locally
