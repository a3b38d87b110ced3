"""SFT replay (rlvr.trainer.replay): which demonstrations a step replays, their NLL against a hand computation from
the full logits of the real tiny-random model, loading a dataset written by rlvr's own writer, clear errors, and
the term training a policy toward the demonstrations against a real `rlvr serve`."""

from __future__ import annotations

import json

import pytest
import torch
from choice_env import load_environment
from hypothesis import given, settings
from hypothesis import strategies as st
from train_script import config
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.trainer import run_training
from rlvr.trainer.config import ConfigError, MTGRPOConfig
from rlvr.trainer.replay import load_replay, replay_indices, replay_nll
from rlvr.trajectories import TrajectoryError, from_record, write_dataset

PROMPT = [{"role": "system", "content": "Play the game."}, {"role": "user", "content": "Round 0: pick a word."}]
COMPLETION = [{"role": "assistant", "content": "apple"}, {"role": "user", "content": "Good. Another."},
              {"role": "assistant", "content": "banana"}]


def demonstration(reward: float, completion=COMPLETION) -> dict:
    return {"example_id": 0, "prompt": PROMPT, "completion": completion, "reward": reward}


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


@given(size=st.integers(1, 50), count=st.integers(1, 60), seed=st.integers(0, 3), step=st.integers(0, 100),
       process=st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_a_step_replays_distinct_rows_chosen_by_seed_step_and_process_alone(size, count, seed, step, process):
    rows = replay_indices(size, count, seed, step, process)
    assert len(rows) == min(size, count) == len(set(rows))
    assert all(0 <= r < size for r in rows)
    assert rows == replay_indices(size, count, seed, step, process)  # a resumed run replays the same rows


def test_steps_and_processes_replay_different_rows():
    draws = {tuple(replay_indices(1000, 4, 0, step, process)) for step in range(20) for process in range(2)}
    assert len(draws) == 40


def test_the_nll_is_the_assistant_tokens_negative_log_likelihood_at_temperature_1(tiny_model):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    input_ids = torch.tensor([[5, 9, 17, 23, 8, 41], [7, 3, 12, 0, 0, 0]])
    attention_mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    action_mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]])  # tokens 17, 23, 41 and 3, 12
    nll, tokens = replay_nll(model, input_ids, attention_mask, action_mask, chunk_tokens=2)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=input_ids, attention_mask=attention_mask).logits.float(), -1)
    by_hand = -sum(logp[b, t - 1, input_ids[b, t]] for b, t in [(0, 2), (0, 3), (0, 5), (1, 1), (1, 2)])
    assert tokens == 5
    assert nll.item() == pytest.approx(by_hand.item(), rel=1e-5)
    nll.backward()  # the term trains the policy
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_only_successful_demonstrations_are_replayed_with_their_assistant_tokens(tmp_path, tokenizer):
    records = [demonstration(1.0), demonstration(0.0, [{"role": "assistant", "content": "cherry"}]),
               demonstration(1.0, [{"role": "assistant", "content": "x " * 400}])]
    write_dataset([from_record(r, f"row {n}", "turn") for n, r in enumerate(records)], tmp_path / "dataset")
    replay = load_replay(tmp_path / "dataset", tokenizer, min_reward=1.0, max_length=128)
    assert len(replay) == 1 and replay.too_long == 1  # the failure is not replayed, the long one does not fit
    text = tokenizer.decode([t for t, m in zip(replay.input_ids[0], replay.action_mask[0], strict=True) if m])
    assert "apple" in text and "banana" in text and "Good. Another." not in text and "pick a word" not in text
    everything = load_replay(tmp_path / "dataset", tokenizer, min_reward=None, max_length=2048)
    assert len(everything) == 3


def test_a_dataset_without_a_usable_demonstration_is_named(tmp_path, tokenizer):
    path = tmp_path / "failures.jsonl"
    path.write_text(json.dumps(demonstration(0.0)) + "\n")
    with pytest.raises(TrajectoryError, match=r"sft_replay=.*failures.jsonl: no trajectory has reward >= 1.0"):
        load_replay(path, tokenizer, min_reward=1.0, max_length=2048)
    with pytest.raises(TrajectoryError, match=r"sft_replay=.*missing: no trajectories at"):
        load_replay(tmp_path / "missing", tokenizer, min_reward=1.0, max_length=2048)


@pytest.mark.parametrize("option", [{"sft_replay_coef": 0.0}, {"sft_replay_batch": 0}])
def test_a_replay_without_weight_or_rows_is_refused(tmp_path, option):
    with pytest.raises(ConfigError, match="both must be positive"):
        MTGRPOConfig(output_dir=str(tmp_path), sft_replay="demos", report_to="none", **option)


@pytest.mark.slow
def test_the_replay_term_trains_the_policy_toward_the_demonstrations(training_server, tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(demonstration(1.0)) + "\n" for _ in range(4)))
    run_dir = tmp_path / "run"
    cfg = config(str(run_dir), 3, batch_size=4, rollouts_per_example=2, micro_batch_size=4, sft_replay=str(demos),
                 sft_replay_coef=5.0, sft_replay_batch=2)
    run_training(load_environment(), "tiny-random", cfg, server_url=training_server.url)
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    nll = [s["train/replay_nll"] for s in steps if "train/replay_nll" in s]
    assert len(nll) == 3 and all(s.get("train/replay_tokens", 0) > 0 for s in steps if "train/replay_nll" in s)
    # the random model learns the demonstrated words (measured: 10.63, 9.74, 9.22 nats a token)
    assert nll[2] < nll[0] - 0.5
