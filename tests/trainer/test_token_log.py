"""token_credit.jsonl: the pure record builder on hand-made rollouts, a real training step whose rollouts come from a
stand-in that samples with the trainer's own weights (no server), and short real runs against `rlvr serve` (slow)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from choice_env import load_environment
from hypothesis import given, settings
from hypothesis import strategies as st
from test_training import read_jsonl
from train_script import config, ppo_config
from transformers import AutoTokenizer, TrainerState

from rlvr.credit import TurnTokens
from rlvr.rollouts import Rollout, Turn
from rlvr.trainer import token_log
from rlvr.trainer.batching import rollout_samples
from rlvr.trainer.config import ConfigError
from rlvr.trainer.metrics import JsonlMetricsCallback
from rlvr.trainer.mt_grpo import MTGRPOTrainer
from rlvr.trainer.ppo import PPOTrainer
from rlvr.trainer.rollout_client import GeneratedBatch
from rlvr.trainer.run import run_training

# fp32 trainer and a stand-in that scores its samples with the same weights: the same forward, up to the order of
# float32 sums between a batch of one and a padded micro-batch.
SAME_WEIGHTS = 1e-4
# fp32 vLLM server against the fp32 trainer (test_training.SYNC_TOLERANCE; measured ~1e-6 before training)
ON_POLICY = 1e-3
# The run directory's files and the fields they held before token_credit.jsonl existed (no change to them).
ROLLOUTS_FIELDS = {"example_id", "reward", "truncated", "prompt", "completion", "turn_rewards", "turn_advantages",
                   "packed", "not_packed_because", "error"}
SAMPLE_FIELDS = {"packed", "tokens", "token_ids", "turn_index", "trained", "advantage", "behavior_logprob", "logprob",
                 "value", "start"}
RECORD_FIELDS = {"format", "step", "batch_index", "group", "member", "example_id", "algo", "reward", "metrics",
                 "turn_rewards", "turn_reward_parts", "turn_advantages", "truncated", "error", "prompt", "completion",
                 "samples"}


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


# ------------------------------------------------------------------ token pieces
@pytest.mark.parametrize("text", [
    "Hello world", "  two leading spaces", "naïve café", "数学の問題を解く", "emoji 🤖🧠 and 👩‍👩‍👧",
    "<|im_start|>user\nhi<|im_end|>\n", "tab\tand\nnewline", "",
])
def test_pieces_concatenate_to_the_decoded_text(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = token_log.token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert "\ufffd" not in "".join(pieces)


def test_a_character_split_over_byte_tokens_goes_to_the_token_that_completes_it(tokenizer):
    ids = tokenizer("🤖", add_special_tokens=False)["input_ids"]
    assert len(ids) > 1  # byte-level BPE: the emoji's 4 bytes are several tokens in this vocabulary
    assert token_log.token_pieces(tokenizer, ids) == [""] * (len(ids) - 1) + ["🤖"]


def test_pieces_from_a_start_use_the_tokens_before_as_context(tokenizer):
    ids = tokenizer("Answer: the fox jumps", add_special_tokens=False)["input_ids"]
    whole = token_log.token_pieces(tokenizer, ids)
    assert token_log.token_pieces(tokenizer, ids, start=2) == whole[2:]


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=30))
def test_pieces_of_any_text_concatenate_to_its_decoding(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = token_log.token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


@pytest.fixture(scope="module")
def byte_tokens(tokenizer) -> list[int]:
    """The byte-level alphabet: tokens of one byte, which split characters and make invalid UTF-8."""
    return [i for i in range(tokenizer.vocab_size) if len(tokenizer.convert_ids_to_tokens(i)) == 1]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_pieces_of_any_token_ids_concatenate_to_their_decoding(tokenizer, byte_tokens, data):
    ids = data.draw(st.lists(st.one_of(st.sampled_from(byte_tokens), st.integers(0, tokenizer.vocab_size - 1)),
                             max_size=16))
    pieces = token_log.token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


# ------------------------------------------------------------------ the record
def turn(prompt, completion, logprobs, reward, parts=None, mask=None) -> Turn:
    tokens = TurnTokens(tuple(prompt), tuple(completion), tuple(logprobs), tuple(mask or [1] * len(completion)))
    return Turn(reward=reward, reward_parts=parts or {"choice_reward": reward}, tool_result=True, state_key=None,
                tokens=tokens)


def two_turn_rollout(tokenizer, advantages=(0.5, -1.0), consistent=True, outcome=1.0) -> Rollout:
    """A prompt, a 3-token answer, an environment reply and a 2-token answer (the history re-rendered differently
    at turn 2 when not `consistent`)."""
    prompt = tokenizer("<|im_start|>user\nPick a word.<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    first = tokenizer(" apple pie tonight", add_special_tokens=False)["input_ids"][:3]
    reply = tokenizer("<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    second = tokenizer(" done now", add_special_tokens=False)["input_ids"][:2]
    assert len(first) == 3 and len(second) == 2
    history = prompt + first + reply if consistent else prompt + [first[0]] + reply
    return Rollout(
        example_id=7, task="default", prompt=[{"role": "user", "content": "Pick a word."}],
        completion=[{"role": "assistant", "content": " apple pie"}, {"role": "user", "content": "ok"},
                    {"role": "assistant", "content": " done"}],
        answer="", outcome=outcome, metrics={"choice_reward": 1.0, "answer_reward": outcome},
        turns=(turn(prompt, first, [-1.0, -2.0, -3.0], 1.0), turn(history, second, [-0.5, -0.25], 0.0)),
        advantages=tuple(advantages),
    )


def test_a_packed_rollout_record_has_each_token_with_its_turn_advantage(tokenizer):
    rollout = two_turn_rollout(tokenizer)
    samples = rollout_samples(rollout)
    assert samples.packed
    sample = samples.samples[0]
    prompt_len = len(rollout.turns[0].tokens.prompt_ids)
    logprobs = [None if not m else -0.1 * t for t, m in enumerate(sample.loss_mask)]
    record = token_log.token_credit_record(step=4, batch_index=2, index=9, rollouts_per_example=8, algo="mt_grpo",
                                           rollout=rollout, samples=samples, tokenizer=tokenizer, logprobs=[logprobs])
    line = record.to_json()
    assert set(line) == RECORD_FIELDS and line["format"] == token_log.FORMAT
    assert (line["step"], line["batch_index"], line["group"], line["member"]) == (4, 2, 1, 1)
    assert line["turn_advantages"] == [0.5, -1.0] and line["turn_rewards"] == [1.0, 0.0]
    assert line["turn_reward_parts"] == [{"choice_reward": 1.0}, {"choice_reward": 0.0}]
    [logged] = line["samples"]
    assert set(logged) == SAMPLE_FIELDS
    assert logged["start"] == prompt_len and logged["packed"]
    assert logged["token_ids"] == sample.input_ids[prompt_len:]
    assert logged["advantage"] == sample.advantages[prompt_len:]
    assert logged["trained"] == sample.loss_mask[prompt_len:]
    assert logged["turn_index"] == [0, 0, 0] + [-1] * (len(sample) - prompt_len - 5) + [1, 1]
    # the generated tokens and their logprobs; the environment's reply has none
    assert [x for x in logged["behavior_logprob"] if x is not None] == [-1.0, -2.0, -3.0, -0.5, -0.25]
    assert logged["logprob"] == logprobs[prompt_len:] and logged["value"] is None
    assert "".join(logged["tokens"]) == tokenizer.decode(sample.input_ids[prompt_len:])
    json.dumps(line, allow_nan=False)  # strict JSON


def test_per_turn_samples_start_at_their_turn_and_non_finite_numbers_are_null(tokenizer):
    rollout = two_turn_rollout(tokenizer, advantages=(math.nan, 2.0), consistent=False, outcome=math.inf)
    samples = rollout_samples(rollout)
    assert not samples.packed and len(samples.samples) == 2
    values = [[float(t) for t in range(len(s))] for s in samples.samples]
    values[1][-1] = math.nan
    line = token_log.token_credit_record(step=0, batch_index=0, index=0, rollouts_per_example=2, algo="ppo",
                                         rollout=rollout, samples=samples, tokenizer=tokenizer,
                                         values=values).to_json()
    json.dumps(line, allow_nan=False)
    first, second = line["samples"]
    assert first["start"] == len(rollout.turns[0].tokens.prompt_ids)
    assert second["start"] == len(rollout.turns[1].tokens.prompt_ids)
    assert first["advantage"] == [None, None, None] and second["advantage"] == [2.0, 2.0]
    assert line["reward"] is None and line["turn_advantages"] == [None, 2.0]
    assert first["value"] == [float(t) for t in range(first["start"], first["start"] + 3)]
    assert second["value"][-1] is None and second["value"][0] == float(second["start"])
    assert first["logprob"] == [None] * 3  # nothing recorded


def test_a_rollout_left_out_of_the_loss_has_no_trained_token(tokenizer):
    rollout = two_turn_rollout(tokenizer)
    samples = rollout_samples(rollout)
    line = token_log.token_credit_record(step=0, batch_index=0, index=0, rollouts_per_example=2, algo="grpo",
                                         rollout=rollout, samples=samples, tokenizer=tokenizer, in_loss=False,
                                         logprobs=[[0.0] * len(samples.samples[0])]).to_json()
    [logged] = line["samples"]
    assert set(logged["trained"]) == {0} and set(logged["advantage"]) == {0.0} and set(logged["logprob"]) == {None}
    assert sum(x is not None for x in logged["behavior_logprob"]) == 5  # still what the sampler said


def test_logged_rollouts_are_the_first_groups_marked_by_index(tokenizer):
    assert token_log.logged_rollouts(16, 8, 1) == 8 and token_log.logged_rollouts(16, 8, 5) == 16
    assert token_log.logged_rollouts(16, 8, 0) == 0
    per_rollout = [rollout_samples(two_turn_rollout(tokenizer, consistent=i % 2 == 0)) for i in range(3)]
    marked = token_log.with_log_keys(per_rollout, 2)
    assert [[s.log_key for s in r.samples] for r in marked] == [[(0, 0)], [(1, 0), (1, 1)], [None]]
    assert [s.input_ids for r in marked for s in r.samples] == [s.input_ids for r in per_rollout for s in r.samples]


def test_a_negative_group_count_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="num_logged_token_groups=-1 must be >= 0"):
        config(str(tmp_path), 1, num_logged_token_groups=-1)


# ------------------------------------------------------------------ a real training step, rollouts from a stand-in
class OwnPolicySampler:
    """Stands in for the rollout server: two-turn rollouts of random tokens, each scored by the trainer's current
    weights (so the behaviour logprobs are the trainer's), with random turn rewards."""

    url = "http://stand-in"

    def __init__(self, trainer, tokenizer):
        self.trainer = trainer
        self.tokenizer = tokenizer
        self.rng = random.Random(0)

    def update_weights(self, named_tensors, policy_version: int) -> None:
        pass

    def close(self) -> None:
        pass

    def scored(self, ids: list[int]) -> list[float]:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:], device=model.device)[:, None])[:, 0].tolist()

    def rollout(self, row) -> Rollout:
        prompt = list(self.tokenizer.apply_chat_template(row["prompt"], tokenize=True, add_generation_prompt=True,
                                                         return_dict=False))
        first = [self.rng.randrange(1000, 20000) for _ in range(3)]
        reply = self.tokenizer("<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
        second = [self.rng.randrange(1000, 20000) for _ in range(2)]
        history = prompt + first + reply
        own = self.scored(history + second)
        rewards = [float(self.rng.random() < 0.5), float(self.rng.random() < 0.5)]
        return Rollout(
            example_id=row["example_id"], task="default", prompt=row["prompt"],
            completion=[{"role": "assistant", "content": self.tokenizer.decode(first)}],
            answer="", outcome=rewards[1], metrics={"choice_reward": rewards[0], "answer_reward": rewards[1]},
            turns=(turn(prompt, first, own[len(prompt) - 1 : len(prompt) + 2], rewards[0]),
                   turn(history, second, own[len(history) - 1 :], 0.0)),
        )

    def generate(self, env, rows, rollouts_per_example: int, **kwargs) -> GeneratedBatch:
        return GeneratedBatch([self.rollout(row) for row in rows for _ in range(rollouts_per_example)], 0.0, 0.0)


class StandInMTGRPO(MTGRPOTrainer):
    def connect(self, server_url, model_name, tokenizer):
        return OwnPolicySampler(self, tokenizer)


class StandInPPO(PPOTrainer):
    def connect(self, server_url, model_name, tokenizer):
        return OwnPolicySampler(self, tokenizer)


def check_lines(lines: list[dict], batches: int, groups: int, rollouts_per_example: int, algo: str,
                tolerance: float) -> None:
    """What every run's token_credit.jsonl must hold: N groups x rollouts per batch, trained tokens carrying their
    turn's advantage (MT-GRPO) or the critic's value (PPO), the trainer's logprobs next to the sampler's."""
    assert len(lines) == batches * groups * rollouts_per_example
    assert [(r["batch_index"], r["group"], r["member"]) for r in lines] == [
        (b, g, m) for b in range(batches) for g in range(groups) for m in range(rollouts_per_example)]
    for line in lines:
        json.dumps(line, allow_nan=False)
        assert set(line) >= RECORD_FIELDS and line["format"] == token_log.FORMAT and line["algo"] == algo
        assert len(line["turn_advantages"]) == len(line["turn_rewards"]) == len(line["turn_reward_parts"])
        assert line["samples"]
        for sample in line["samples"]:
            assert set(sample) >= SAMPLE_FIELDS
            n = len(sample["token_ids"])
            for key in ("tokens", "turn_index", "trained", "advantage", "behavior_logprob", "logprob"):
                assert len(sample[key]) == n, key
            trained = [t for t in range(n) if sample["trained"][t]]
            assert trained and all(sample["turn_index"][t] >= 0 for t in trained)
            assert all(sample["advantage"][t] == 0.0 for t in range(n) if not sample["trained"][t])
            if algo != "ppo" and all(sample["advantage"][t] == 0.0 for t in trained):
                # not forwarded (skip_zero_advantage, beta = 0): no trainer logprobs, the sampler's are kept
                assert all(sample["logprob"][t] is None and sample["behavior_logprob"][t] is not None for t in trained)
            else:
                for t in trained:
                    assert abs(sample["logprob"][t] - sample["behavior_logprob"][t]) < tolerance, (t, sample)
            if algo == "ppo":
                assert sample["value"] is not None and len(sample["value"]) == n
                assert all(isinstance(v, float) for v in sample["value"])
            else:
                assert sample["value"] is None
                for t in trained:  # MT-GRPO: each trained token of turn k carries turn k's advantage
                    assert sample["advantage"][t] == pytest.approx(line["turn_advantages"][sample["turn_index"][t]])


def check_other_logs(run_dir: Path, batches: int) -> None:
    """rollouts.jsonl and metrics.jsonl keep their fields."""
    rollouts = read_jsonl(run_dir / "rollouts.jsonl")
    assert [r["batch_index"] for r in rollouts] == list(range(batches))
    assert set(rollouts[0]) == {"step", "batch_index", "example_ids", "rollouts"}
    assert set(rollouts[0]["rollouts"][0]) == ROLLOUTS_FIELDS
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    assert len(steps) == batches and all({"reward", "turn/1/reward", "train/mismatch_kl"} <= set(r) for r in steps)


@pytest.mark.parametrize("trainer_class, make_config, algo", [
    (StandInMTGRPO, config, "mt_grpo"), (StandInPPO, ppo_config, "ppo"),
])
def test_a_training_step_logs_the_first_groups_with_the_trainers_logprobs(tmp_path, tiny_model, trainer_class,
                                                                          make_config, algo):
    cfg = make_config(str(tmp_path), 2, num_logged_token_groups=1, micro_batch_size=4)
    trainer = trainer_class("tiny-random", load_environment(), cfg, server_url="http://stand-in")
    trainer.train()
    lines = read_jsonl(tmp_path / token_log.FILE)
    check_lines(lines, batches=2, groups=1, rollouts_per_example=8, algo=algo, tolerance=SAME_WEIGHTS)
    assert [r["step"] for r in lines] == [0] * 8 + [1] * 8  # the step each batch was generated at
    assert all(len(r["samples"]) == 1 and r["samples"][0]["packed"] for r in lines)  # prefix-consistent history
    check_other_logs(tmp_path, batches=2)
    [sink] = [c for c in trainer.callback_handler.callbacks if isinstance(c, JsonlMetricsCallback)]
    assert tmp_path / token_log.FILE in sink.batch_logs  # truncated like rollouts.jsonl when a run resumes


def test_a_resume_drops_the_token_credit_of_the_batches_it_generates_again(tmp_path):
    path = tmp_path / token_log.FILE
    path.write_text("".join(json.dumps({"step": s, "batch_index": s}) + "\n" for s in range(4)) + '{"step": 9')
    state = TrainerState(global_step=2)
    state.is_world_process_zero = True
    JsonlMetricsCallback(tmp_path / "metrics.jsonl", [path]).on_train_begin(None, state, None)
    assert [r["step"] for r in read_jsonl(path)] == [0, 1]  # batch 2 is generated again; the cut line is dropped


def test_no_groups_no_file(tmp_path, tiny_model):
    cfg = config(str(tmp_path), 1, num_logged_token_groups=0)
    StandInMTGRPO("tiny-random", load_environment(), cfg, server_url="http://stand-in").train()
    assert not (tmp_path / token_log.FILE).exists()
    check_other_logs(tmp_path, batches=1)


# ------------------------------------------------------------------ real runs against `rlvr serve`
@pytest.mark.slow
def test_a_real_mt_grpo_run_logs_token_credit(mt_grpo_run):
    """conftest's shared run (train_script.py: 2 steps, num_logged_token_groups at its default, 2); rlvr view's
    real-run test opens the same directory."""
    check_lines(read_jsonl(mt_grpo_run / token_log.FILE), batches=2, groups=2, rollouts_per_example=8, algo="mt_grpo",
                tolerance=ON_POLICY)
    check_other_logs(mt_grpo_run, batches=2)


@pytest.mark.slow
def test_a_real_ppo_run_logs_token_credit(training_server, tmp_path):
    cfg = ppo_config(str(tmp_path), 2, num_logged_token_groups=2)
    run_training(load_environment(), "tiny-random", cfg, server_url=training_server.url)
    check_lines(read_jsonl(tmp_path / token_log.FILE), batches=2, groups=2, rollouts_per_example=8, algo="ppo",
                tolerance=ON_POLICY)
    check_other_logs(tmp_path, batches=2)
