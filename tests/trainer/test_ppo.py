"""PPO with a critic end to end on CPU, against a real `rlvr serve` of tiny-random (the module's own fp32 server:
training changes its weights) and the two-turn choice environment."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

import pytest
import torch
from choice_env import load_environment
from learning_check import StopOnceLearned, assert_learned
from safetensors.torch import load_file
from test_training import read_jsonl, sigkill_while_step_3_trains, step_records
from train_script import ppo_config as config
from transformers import TrainerCallback

from rlvr.trainer.checkpoint import check_resume, read_run_state
from rlvr.trainer.critic import ValueSample
from rlvr.trainer.ppo import PPOTrainer
from rlvr.trainer.run import run_training

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "train_script.py"


def test_ppo_raises_the_turn_reward_and_logs_the_critic(training_server, tmp_path):
    # lr 5e-2 as the MT-GRPO test (a random-weight policy needs large steps); cross-level GAE exercises the
    # turn-level and token-level parts at once. PPO learns this task more slowly and less surely than MT-GRPO:
    # tiny-random's critic cannot tell the two turns' states apart (both end in the same chat-template tokens),
    # so after whitening every sampled turn-1 token is pushed up and every turn-2 token down, and the two pulls
    # on the shared first-token distribution fight. At 16 rollouts x 8 steps the reward had not risen in CI and
    # in 4 of 6 runs here; at 32 rollouts it reached 1.0 by steps 5-15 in 10 of 10 runs of 16 steps. The run stops
    # once it has learned (learning_check), within 20 steps.
    cfg = config(str(tmp_path), 20, learning_rate=5e-2, gae="cross_level", turn_weight=0.5, batch_size=32)
    run_training(load_environment(), "tiny-random", cfg, server_url=training_server.url,
                 callbacks=[StopOnceLearned()])
    records = step_records(tmp_path)
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    assert_learned([r["turn/1/reward"] for r in records])
    for key in ("critic/value_loss", "critic/clip_fraction", "critic/grad_norm", "critic/old_value_mean",
                "critic/return_mean", "reward/kl", "train/clipped", "turn/1/advantage_mean", "turn/2/advantage_std",
                "turn/1/value_mean", "turn/1/turn_advantage_mean", "timing/generation_s", "timing/credit_s",
                "timing/critic_s", "time/step_s"):
        assert key in records[0], key
    assert any("critic/explained_variance" in r for r in records)
    assert records[0]["reward/kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before any update
    assert records[-1]["critic/value_loss"] < records[0]["critic/value_loss"]
    assert (tmp_path / "final" / "model.safetensors").is_file()
    logged = read_jsonl(tmp_path / "rollouts.jsonl")[0]["rollouts"][0]
    assert len(logged["turn_advantages"]) == len(logged["turn_rewards"])


def test_credit_on_real_rollouts_and_critic_warmup(training_server, tmp_path):
    """make_samples on rollouts from the server: environment tokens get neither advantage nor value loss, the
    credit does not depend on packing, and a warm-up step trains the critic but not the policy."""
    cfg = config(str(tmp_path), 1, critic_warmup_steps=1, gae="multi_turn")
    trainer = PPOTrainer("tiny-random", load_environment(), cfg, server_url=training_server.url)
    try:
        generated = trainer.rollouts.generate(trainer.env, trainer.batch_example_rows(0), cfg.rollouts_per_example)
        rollouts, per_rollout = trainer.make_samples(generated.rollouts)
        samples = [s for r in per_rollout for s in r.samples]
        assert samples and all(isinstance(s, ValueSample) for s in samples)
        for s in samples:
            assert s.value_mask == s.loss_mask
            assert all(a == 0.0 and ret == 0.0 for a, ret, m in zip(s.advantages, s.returns, s.loss_mask, strict=True)
                       if not m)
        trained = [a for s in samples for a, m in zip(s.advantages, s.loss_mask, strict=True) if m]
        assert abs(mean(trained)) < 1e-6 and any(a != 0 for a in trained)  # whitened over the batch
        assert all(len(r.advantages) == len(r.turns) for r in rollouts)
        assert trainer.critic.values(samples[:1], max_samples=1, max_tokens=None)[0] == pytest.approx(
            samples[0].old_values, abs=1e-5)

        packed = per_token_credit(per_rollout)
        trainer.args.pack_trajectories = False  # the same rollouts, one sample per turn
        unpacked = per_token_credit(trainer.make_samples(generated.rollouts)[1])
        trainer.args.pack_trajectories = True
        assert sum(r.packed for r in per_rollout) > 0 and packed.keys() == unpacked.keys()
        assert all(packed[k] == pytest.approx(unpacked[k], abs=1e-4) for k in packed)

        policy = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        critic = {k: v.clone() for k, v in trainer.critic.model.state_dict().items()}
        trainer.train()
        assert all(torch.equal(v, trainer.model.state_dict()[k]) for k, v in policy.items())
        assert not all(torch.equal(v, trainer.critic.model.state_dict()[k]) for k, v in critic.items())
    finally:
        trainer.close()
    (record,) = step_records(tmp_path)
    assert record["critic/warmup"] == 1.0 and record["critic/value_loss"] > 0


def per_token_credit(per_rollout) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """(rollout, turn) -> the (advantage, return) of each trained token of that turn, in order."""
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for i, r in enumerate(per_rollout):
        for s in r.samples:
            for a, ret, k in zip(s.advantages, s.returns, s.turn_index, strict=True):
                if k >= 0:
                    out.setdefault((i, k), []).extend((a, ret))
    return out


class CriticAtStart(TrainerCallback):
    """The critic's weights when training (re)starts, after a checkpoint was loaded."""

    def __init__(self):
        self.trainer = None
        self.weights = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.weights = {k: v.detach().clone() for k, v in self.trainer.critic.model.state_dict().items()}


def test_sigkill_then_resume_restores_the_critic(training_server, tmp_path):
    run = tmp_path / "run"
    rollouts = sigkill_while_step_3_trains(SCRIPT, training_server.url, run, "--algo", "ppo")  # checkpoint-2 holds the critic
    checkpoint = run / "checkpoint-2"
    for name in ("model.safetensors", "optimizer.pt", "rlvr_state.json", "critic/critic.safetensors",
                 "critic/optimizer.pt"):
        assert (checkpoint / name).is_file(), name
    killed_batch = next(r for r in read_jsonl(rollouts) if r["batch_index"] == 2)

    cfg = config(str(run), 3, save_steps=2)
    callback = CriticAtStart()
    trainer = PPOTrainer("tiny-random", load_environment(), cfg, server_url=training_server.url,
                         callbacks=[callback])
    callback.trainer = trainer
    check_resume(read_run_state(checkpoint), trainer.run_state())
    initial = {k: v.clone() for k, v in trainer.critic.model.state_dict().items()}
    trainer.train(resume_from_checkpoint=str(checkpoint))

    saved = load_file(checkpoint / "critic" / "critic.safetensors")
    assert saved.keys() <= callback.weights.keys()
    assert all(torch.equal(callback.weights[k], v) for k, v in saved.items())  # the checkpoint's critic ...
    assert not all(torch.equal(initial[k], v) for k, v in saved.items())  # ... not a freshly initialised one
    steps = {float(s["step"]) for s in torch.load(checkpoint / "critic" / "optimizer.pt")["state"].values()}
    assert steps == {2.0}  # two critic updates before the checkpoint
    resumed_batch = [r for r in read_jsonl(rollouts) if r["batch_index"] == 2][-1]
    assert resumed_batch["step"] == 2 and resumed_batch["example_ids"] == killed_batch["example_ids"]
    assert [r["step"] for r in step_records(run)] == [1, 2, 3]
    assert json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3
