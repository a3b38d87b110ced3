"""One optimizer step of the real trainer on a fixed batch (no vLLM server: `fixed_batch.FixedBatchTrainer`):
accumulation over micro-batches (DeepSpeed on its CPU accelerator), bf16 master weights, non-finite steps, and what
a weight sync sends and when."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from fixed_batch import FixedBatchTrainer, fixed_batch_config, random_samples
from transformers import AutoModelForCausalLM

from rlvr.models import resolve
from rlvr.trainer.batching import Sample
from rlvr.trainer.rollout_client import send_over_nccl

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "deepspeed_step.py"


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return AutoModelForCausalLM.from_pretrained(resolve("tiny-random"), dtype=torch.float32)


def weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone() for k, v in trainer.accelerator.unwrap_model(trainer.model).state_dict().items()}


def step_record(run_dir: Path) -> dict:
    return next(r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_makes_one_optimizer_step_per_training_step_and_skips_a_nan_one(tiny_model, stage):
    # DeepSpeed's own CPU accelerator (gloo), one rank, ZeRO-2 and ZeRO-3 (the shipped GPU configs' stages): the
    # DeepSpeed engine, its ZeRO optimizer and accelerate's DeepSpeed wrapper are the real ones; only the device is a
    # CPU. The script also checks that the weights sent before step 0 are the initial ones, whole (ZeRO-3 gathers).
    env = {**os.environ, "ACCELERATE_USE_DEEPSPEED": "true", "DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    result = subprocess.run([sys.executable, str(SCRIPT), "--micro-batch-size", "2", "--stage", str(stage)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # Three micro-batches, one optimizer step (before the fix: one engine.step() per micro-batch, 3).
    assert out["ds_steps_one_micro_batch"] == 1 and out["ds_steps_split"] == 1
    lr = 1e-3
    assert out["max_change"] == pytest.approx(lr, rel=0.01)  # Adam's first step moves a weight by ~lr
    # The same update as one micro-batch holding the same samples, up to float32 summation order (before the fix:
    # three Adam steps on partial gradients, 4e-3 apart).
    assert out["max_difference"] < 0.01 * lr
    # A NaN sampling logprob on a trained token: DeepSpeed's ZeRO optimizer skips the step, the trainer counts it.
    assert out["nan_skipped_steps"] == 1 and out["nan_max_change"] == 0.0


def test_bf16_trains_float32_master_weights_with_bf16_compute(tiny, tmp_path):
    # The review's case: lr 1e-6, full fine-tuning, bf16. bf16 weights (8 mantissa bits) round most such steps away.
    cfg = fixed_batch_config(tmp_path, bf16=True, use_cpu=True, learning_rate=1e-6)
    trainer = FixedBatchTrainer("tiny-random", cfg, random_samples(tiny, 4))
    compute_dtypes = set()
    proj = trainer.model.model.layers[0].self_attn.q_proj
    proj.register_forward_hook(lambda module, inputs, output: compute_dtypes.add(output.dtype))
    before = weights(trainer)
    trainer.train()
    policy = trainer.accelerator.unwrap_model(trainer.model)
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    assert compute_dtypes == {torch.bfloat16}  # autocast: the matmuls ran in bf16
    after = weights(trainer)
    changed = sum(int((after[k] != before[k]).sum()) for k in before) / sum(v.numel() for v in before.values())
    assert changed > 0.9, changed  # bf16 master weights: ~2% (measured in review)


def test_a_nan_on_an_untrained_token_changes_nothing_and_on_a_trained_one_skips_the_step(tiny, tmp_path):
    samples = random_samples(tiny, 4)
    s = samples[1]
    # Token 6 of sample 1 is not trained (an environment token, say) while the other samples' token 6 is, so its
    # position is in the micro-batch's loss: there it carries garbage, a NaN sampling logprob and an infinite advantage.
    mask = [0 if t == 6 else m for t, m in enumerate(s.loss_mask)]
    clean = Sample(s.input_ids, mask, s.behavior_logprobs, s.advantages, s.turn_index)
    garbage = Sample(s.input_ids, mask, [float("nan") if t == 6 else x for t, x in enumerate(s.behavior_logprobs)],
                     [float("inf") if t == 6 else x for t, x in enumerate(s.advantages)], s.turn_index)
    runs = {}
    for name, sample in (("clean", clean), ("garbage", garbage)):
        batch = [samples[0], sample, *samples[2:]]
        trainer = FixedBatchTrainer("tiny-random", fixed_batch_config(tmp_path / name, micro_batch_size=2), batch)
        trainer.train()
        runs[name] = weights(trainer)
    for k in runs["clean"]:
        torch.testing.assert_close(runs["garbage"][k], runs["clean"][k], rtol=0, atol=0)  # masked by a select

    poisoned = Sample(s.input_ids, s.loss_mask, s.behavior_logprobs[:-1] + [float("nan")], s.advantages, s.turn_index)
    trainer = FixedBatchTrainer("tiny-random", fixed_batch_config(tmp_path / "nan", micro_batch_size=2, max_steps=2),
                                [samples[0], poisoned, *samples[2:]])
    before = weights(trainer)
    trainer.train()
    after = weights(trainer)
    assert all(torch.equal(after[k], before[k]) for k in before)  # no weight (and no Adam moment) moved
    records = [json.loads(x) for x in (tmp_path / "nan" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [r["train/skipped_step"] for r in steps] == [1.0, 1.0]
    assert steps[-1]["train/skipped_steps_total"] == 2.0 and trainer.skipped_steps == 2


def test_samples_of_zero_advantage_are_skipped_without_changing_the_update(tiny, tmp_path):
    """A group that all won or all lost has advantage 0 on every token: with beta = 0 its samples' gradient is
    exactly zero, so skipping them (skip_zero_advantage) must leave the update as it was while forwarding fewer
    tokens. SGD, so that the weights' change is the gradient itself (Adam would magnify rounding noise on
    near-zero gradients); two steps, so that the second forward sees weights the first step moved."""
    samples = random_samples(tiny, 8)
    for i in (1, 2, 5, 6):  # half the batch: two all-zero pairs, so whole micro-batches drop out
        s = samples[i]
        samples[i] = Sample(s.input_ids, s.loss_mask, s.behavior_logprobs, [0.0] * len(s), s.turn_index)
    runs, forwarded = {}, {}
    for skip in (False, True):
        cfg = fixed_batch_config(tmp_path / str(skip), micro_batch_size=2, max_steps=2, optim="sgd",
                                 skip_zero_advantage=skip)
        trainer = FixedBatchTrainer("tiny-random", cfg, samples)
        trainer.train()
        runs[skip] = weights(trainer)
        records = [json.loads(x) for x in (tmp_path / str(skip) / "metrics.jsonl").read_text().splitlines()]
        forwarded[skip] = [r["tokens/training_per_s"] * r["timing/training_s"] for r in records if "loss" in r]
    initial = AutoModelForCausalLM.from_pretrained(resolve("tiny-random"), dtype=torch.float32).state_dict()
    assert any(not torch.equal(runs[True][k], initial[k]) for k in initial)  # it did train
    for k in runs[False]:
        torch.testing.assert_close(runs[True][k], runs[False][k], rtol=1e-5, atol=1e-7)
    assert forwarded[True] == pytest.approx([4 * 12, 4 * 12]) and forwarded[False] == pytest.approx([8 * 12, 8 * 12])

    # a KL term has a gradient on every token: then nothing is skipped
    trainer = FixedBatchTrainer("tiny-random", fixed_batch_config(tmp_path / "kl", beta=0.1), samples)
    assert trainer.forwarded_samples(samples) == samples


class NCCLClientStandIn:
    """The calls verifiers' VLLMClient receives during a weight update (NCCL itself needs GPUs)."""

    def __init__(self):
        self.updates: list[list[tuple[str, torch.Tensor]]] = [[]]
        self.background_polls = 0

    def update_named_param(self, name, tensor):
        self.updates[-1].append((name, tensor.detach().clone()))

    def reset_prefix_cache(self):
        self.updates.append([])

    def get_num_background_tasks(self):
        self.background_polls += 1
        return 0


def test_nccl_sync_sends_every_weight_before_step_zero_and_after_each_step(tiny, tmp_path):
    client = NCCLClientStandIn()
    cfg = fixed_batch_config(tmp_path, max_steps=2)
    trainer = FixedBatchTrainer("tiny-random", cfg, random_samples(tiny, 4),
                                transport=partial(send_over_nccl, client, poll_s=0.0))
    initial = weights(trainer)
    trainer.train()
    first, second, pending = client.updates
    assert pending == [] and client.background_polls == 2  # each update ends with a cache reset and a wait
    # Step 0 sends the initial weights (verifiers' update_vllm skipped it: the server kept whatever it had).
    assert {name for name, _ in first} == set(initial)  # lm_head included although it is tied
    assert all(torch.equal(t.float(), initial[name]) for name, t in first)
    # Before step 1: the weights after one optimizer step.
    assert any(not torch.equal(t.float(), initial[name]) for name, t in second)


def test_sequences_are_limited_on_the_environment_and_overlong_prompts_are_left_out(tiny, tmp_path):
    import verifiers as vf
    from choice_env import answer_reward
    from datasets import Dataset

    def env(questions):
        return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": q, "answer": ""} for q in questions]),
                                rubric=vf.Rubric(funcs=[answer_reward]))

    short, long = [f"Say a word ({i})." for i in range(4)], ["word " * 80] * 2
    mixed = env(short + long)
    cfg = fixed_batch_config(tmp_path, max_seq_len=64, algo="grpo")
    trainer = FixedBatchTrainer("tiny-random", cfg, random_samples(tiny, 2), env=mixed)
    assert mixed.max_seq_len == 64  # verifiers cuts each turn's token ids to it: no sample is longer
    assert sorted(trainer.dataset["question"]) == sorted(short)
    with pytest.raises(ValueError, match="every training prompt is longer than 64 tokens"):
        FixedBatchTrainer("tiny-random", cfg, [], env=env(long))
    cfg = fixed_batch_config(tmp_path, max_seq_len=256, max_prompt_len=16, algo="grpo")
    with pytest.raises(ValueError, match="longer than 16 tokens .* raise max_prompt_len"):
        FixedBatchTrainer("tiny-random", cfg, [], env=env(short))


def test_torch_empty_cache_steps_is_honoured(tiny, tmp_path, monkeypatch):
    # transformers empties the device cache in its own training_step, which the on-policy trainer replaces.
    import rlvr.trainer.on_policy as on_policy

    calls = []
    # a spy in place of the call: on CPU there is no device cache to observe being emptied
    monkeypatch.setattr(on_policy, "clear_device_cache", lambda: calls.append(1))
    cfg = fixed_batch_config(tmp_path, max_steps=4, torch_empty_cache_steps=2)
    FixedBatchTrainer("tiny-random", cfg, random_samples(tiny, 2)).train()
    assert len(calls) == 2  # at steps 0 and 2


def test_a_step_without_policy_signal_trains_on_the_sft_replay_term_alone(tiny, tmp_path):
    """sft_replay on a batch whose every advantage is 0: the step still updates, by exactly the replay term's
    gradient, sft_replay_coef x the mean NLL over both demonstrations' assistant tokens (accumulated over two
    micro-batches, normalised by the tokens of both). SGD, no clipping: the change is -lr x that gradient."""
    from test_replay import demonstration

    from rlvr.trainer.replay import load_replay, replay_nll

    demos = tmp_path / "demos.jsonl"
    other = [{"role": "assistant", "content": "cherry pie"}]
    demos.write_text(json.dumps(demonstration(1.0)) + "\n" + json.dumps(demonstration(1.0, other)) + "\n")
    samples = [Sample(s.input_ids, s.loss_mask, s.behavior_logprobs, [0.0] * len(s), s.turn_index)
               for s in random_samples(tiny, 8)]
    cfg = fixed_batch_config(tmp_path / "run", micro_batch_size=1, batch_size=8, optim="sgd", learning_rate=0.05,
                             max_grad_norm=1e9, sft_replay=str(demos), sft_replay_coef=0.5, sft_replay_batch=2)
    trainer = FixedBatchTrainer("tiny-random", cfg, samples)
    trainer.train()

    model = AutoModelForCausalLM.from_pretrained(resolve("tiny-random"), dtype=torch.float32)
    replay = load_replay(demos, trainer.processing_class, 1.0, cfg.max_seq_len)
    assert len(replay) == 2  # both fit the trainer's max_seq_len: the trainer replays both
    total, tokens = 0.0, 0
    for ids, mask in zip(replay.input_ids, replay.action_mask, strict=True):
        nll, n = replay_nll(model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long),
                            torch.tensor([mask]), 512)
        total, tokens = total + nll, tokens + n
    (0.5 * total / tokens).backward()
    record = step_record(tmp_path / "run")
    assert record["train/replay_nll"] == pytest.approx(total.item() / tokens, rel=1e-5)
    assert record["train/replay_tokens"] == tokens
    trained = weights(trainer)
    for name, p in model.named_parameters():
        torch.testing.assert_close(trained[name], p.detach() - 0.05 * p.grad, rtol=1e-4, atol=1e-6)
    assert any(p.grad.abs().sum() > 0 for p in model.parameters())
