"""PPO's critic (rlvr.trainer.critic) and configuration (rlvr.trainer.ppo.PPOConfig), without a server: the clipped
value loss against verl's (golden numbers, see tests/credit/test_gae.py for how they were made), explained variance,
the value mask, save/load of the real tiny-random critic (full and LoRA), and configuration errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rlvr.trainer import ConfigError, build_config
from rlvr.trainer.critic import Critic, ValueSample, clipped_value_loss, explained_variance, lora_config
from rlvr.trainer.ppo import PPOConfig, turn_means, value_mask

GOLDEN = json.loads((Path(__file__).parents[1] / "credit" / "ragen_gae_golden.json").read_text())


def test_clipped_value_loss_matches_verl():
    case = GOLDEN["value_loss/clip=0.2"]
    t = {k: torch.tensor(case[k], dtype=torch.float64) for k in ("vpreds", "old_values", "returns", "mask")}
    loss, clipped = clipped_value_loss(t["vpreds"], t["old_values"], t["returns"], case["cliprange_value"])
    tokens = t["mask"].sum()
    # verl's masked_mean divides by (mask.sum() + 1e-8): 2e-9 relative here
    assert float((loss * t["mask"]).sum() / tokens) == pytest.approx(case["loss"], rel=1e-8)
    assert float((clipped.double() * t["mask"]).sum() / tokens) == pytest.approx(case["clipfrac"], rel=1e-8)
    assert 0 < case["clipfrac"] < 1  # the case exercises both branches


def test_clipped_value_loss_by_hand():
    # V_old = 0, V = 1, R = 2, clip 0.2: V_clip = 0.2; max((1-2)^2, (0.2-2)^2) / 2 = 3.24 / 2 = 1.62, clipped branch
    loss, clipped = clipped_value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0]), 0.2)
    assert loss.item() == pytest.approx(1.62) and clipped.item()
    # moving towards the target inside the clip range: the plain loss, not clipped
    loss, clipped = clipped_value_loss(torch.tensor([0.1]), torch.tensor([0.0]), torch.tensor([2.0]), 0.2)
    assert loss.item() == pytest.approx(0.5 * 1.9**2) and not clipped.item()


def test_explained_variance_by_hand():
    assert explained_variance([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 1.0
    assert explained_variance([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0  # the mean only
    assert explained_variance([3.0, 2.0, 1.0], [1.0, 2.0, 3.0]) == pytest.approx(-3.0)  # Var(R - V) = 4 Var(R)
    assert math.isnan(explained_variance([0.0, 1.0], [1.0, 1.0]))


def test_value_mask_and_turn_means():
    turn_index = [-1, -1, 0, 0, -1, 1]
    assert value_mask(turn_index, on_env_tokens=False) == [0, 0, 1, 1, 0, 1]
    assert value_mask(turn_index, on_env_tokens=True) == [0, 0, 1, 1, 1, 1]  # from the first assistant token on
    assert turn_means([0.0, 0.0, 1.0, 3.0, 0.0, -1.0], turn_index, 3) == (2.0, -1.0, 0.0)


def sample(turn_index, returns, old_values, on_env_tokens=False) -> ValueSample:
    n = len(turn_index)
    return ValueSample(list(range(5, 5 + n)), [int(k >= 0) for k in turn_index], [0.0] * n, [0.0] * n,
                       turn_index, returns=returns, old_values=old_values,
                       value_mask=value_mask(turn_index, on_env_tokens))


def critic(tiny_model, lora: bool = False, **kwargs) -> Critic:
    torch.manual_seed(0)
    config = lora_config(4, 8, 0.0, None) if lora else None
    settings = dict(device="cpu", pad_token_id=2, learning_rate=1e-2, weight_decay=0.0,
                    max_grad_norm=1.0, value_clip=0.5, lora=config)
    return Critic(str(tiny_model), **{**settings, **kwargs})


def random_head(c: Critic) -> Critic:
    """The critic with a random value head (it starts at 0), for tests that need values that vary."""
    torch.manual_seed(1)
    head = c.model.get_submodule("base_model.model.score" if c.is_lora else "score")
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(0.02 * torch.randn(p.shape))  # the scale of the initialisation it replaces
    return c


def weights(c: Critic) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in c.model.state_dict().items()}


def test_environment_tokens_never_receive_value_loss(tiny_model):
    turn_index = [-1, 0, 0, -1, -1, 1, 1]
    env_targets = [0.0, 0.5, -0.5, 0.0, 0.0, 1.0, 1.0]
    wild = [100.0, 0.5, -0.5, -70.0, 55.0, 1.0, 1.0]  # different targets on prompt and environment tokens only
    after = []
    for returns in (env_targets, wild):
        c = critic(tiny_model)
        stats = c.update([[sample(turn_index, returns, returns)]], value_tokens=4)
        after.append((weights(c), stats))
    assert all(torch.equal(after[0][0][k], after[1][0][k]) for k in after[0][0])
    assert after[0][1]["critic/value_loss"] == after[1][1]["critic/value_loss"] > 0
    # with value_loss_on_env_tokens the environment targets count
    c = critic(tiny_model)
    stats = c.update([[sample(turn_index, wild, wild, on_env_tokens=True)]], value_tokens=6)
    assert stats["critic/value_loss"] > 100 * after[0][1]["critic/value_loss"]


@pytest.mark.parametrize("lora", [False, True])
def test_a_fresh_critic_predicts_zero_and_learns_from_there(tiny_model, lora):
    c = critic(tiny_model, lora=lora, value_clip=100.0)  # no clipping around the old values (0) here
    s = sample([-1, 0, 0, -1, 1], [0.0, 1.0, 1.0, 0.0, 1.0], [0.0] * 5)
    assert c.values([s], max_samples=1, max_tokens=None) == [[0.0] * 5]
    # the first step moves the head only (the backbone's gradient passes through the zero head), towards the
    # targets (1) on the assistant tokens; from the second step on the backbone (or its adapter) learns too
    backbone = {k: v for k, v in weights(c).items() if "score" not in k}
    c.update([[s]], value_tokens=3)
    (after,) = c.values([s], max_samples=1, max_tokens=None)
    assert sum(after[t] for t in (1, 2, 4)) > 0
    assert all(torch.equal(v, weights(c)[k]) for k, v in backbone.items())
    c.update([[s]], value_tokens=3)
    assert not all(torch.equal(v, weights(c)[k]) for k, v in backbone.items())


def test_values_are_read_one_position_before_the_token(tiny_model):
    c = random_head(critic(tiny_model))
    s = sample([-1, 0, 0, 0], [0.0] * 4, [0.0] * 4)
    (values,) = c.values([s], max_samples=4, max_tokens=None)
    with torch.no_grad():
        head = c.model(input_ids=torch.tensor([s.input_ids])).logits[0, :, 0].tolist()
    assert values == pytest.approx([0.0, *head[:3]], abs=1e-6)
    # a sample's values do not depend on what it is batched with (right padding, attention mask from lengths)
    longer = sample([-1, 0, 0, 0, 0, 0, 0], [0.0] * 7, [0.0] * 7)
    assert c.values([longer, s], max_samples=2, max_tokens=None)[1] == pytest.approx(values, abs=1e-5)


@pytest.mark.parametrize("lora", [False, True])
def test_save_and_load_restore_weights_and_optimizer(tiny_model, tmp_path, lora):
    trained = critic(tiny_model, lora=lora)
    s = sample([-1, 0, 0, -1, 1], [0.0, 1.0, 1.0, 0.0, 2.0], [0.0] * 5)
    for _ in range(2):
        trained.update([[s]], value_tokens=3)
    trained.save(tmp_path / "critic")
    fresh = critic(tiny_model, lora=lora)
    assert not all(torch.equal(v, weights(fresh)[k]) for k, v in weights(trained).items())
    fresh.load(tmp_path / "critic")
    assert all(torch.equal(v, weights(fresh)[k]) for k, v in weights(trained).items())
    steps = {float(state["step"]) for state in fresh.optimizer.state_dict()["state"].values()}
    assert steps == {2.0}
    # the next update is the same from the saved state as from the live one
    trained.update([[s]], value_tokens=3)
    fresh.update([[s]], value_tokens=3)
    assert all(torch.allclose(v, weights(fresh)[k]) for k, v in weights(trained).items())


def test_loading_a_checkpoint_without_a_critic_says_so(tiny_model, tmp_path):
    with pytest.raises(FileNotFoundError, match="not written by a PPO run"):
        critic(tiny_model).load(tmp_path)


BASE = dict(batch_size=4, rollouts_per_example=2, micro_batch_size=2, report_to="none")


def test_ppo_is_an_algorithm_with_a_gae_option(tmp_path):
    config = build_config("ppo", {"output_dir": str(tmp_path), **BASE, "gae": "bi_level"})
    assert isinstance(config, PPOConfig) and config.trainer == "rlvr.trainer.ppo:PPOTrainer"
    assert (config.gae, config.turn_gamma, config.turn_lam, config.kl_reward_coef) == ("bi_level", 0.95, 0.95, 0.001)


@pytest.mark.parametrize("options, message", [
    ({"gae": "bilevel"}, "gae='bilevel' is not one of"),
    ({"returns": "mc"}, "returns='mc'"),
    ({"lam": 1.5}, "lam=1.5 must be in"),
    ({"turn_weight": 0.3}, "applies to gae='cross_level'"),
    ({"kl_reward_coef": -1.0}, "kl_reward_coef=-1.0"),
    ({"value_clip": 0.0}, "value_clip"),
    ({"critic_warmup_steps": -1}, "critic_warmup_steps=-1"),
    ({"gae": "token", "pack_trajectories": False}, "set pack_trajectories=true"),
    ({"value_loss_on_env_tokens": True}, "needs gae='token'"),
])
def test_config_errors_say_what_to_change(tmp_path, options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        PPOConfig(output_dir=str(tmp_path), **BASE, **options)


def test_ppo_refuses_more_than_one_process(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="--num-processes 1"):
        PPOConfig(output_dir=str(tmp_path), **BASE)


def test_gpu_config_is_ragens_webshop_setting(tmp_path):
    """RAGEN (arXiv 2504.20073; config/webshop_1.5b_train.yaml, train_ppo_main.sh): Qwen2.5-1.5B-Instruct, 9 turns,
    300 steps, KL 0.001, gamma_H = lambda_H = 0.95, 2 goals x 16 rollouts, actor/critic lr 1e-6/1e-5."""
    from rlvr.cli.train import read_config

    data = read_config(Path(__file__).parents[2] / "configs" / "train" / "webshop_ppo_gpu.toml")
    assert (data["env"], data["model"], data["algo"]) == ("vf-webshop", "Qwen/Qwen2.5-1.5B-Instruct", "ppo")
    assert data["env_args"]["max_turns"] == 9
    training = {**data["training"], "bf16": False}  # bf16 needs CUDA to build; checked as a value above
    assert data["training"]["bf16"] is True
    config = build_config("ppo", {"output_dir": str(tmp_path), **training})
    assert (config.max_steps, config.kl_reward_coef, config.turn_gamma, config.turn_lam) == (300, 0.001, 0.95, 0.95)
    assert (config.gae, config.gamma, config.lam, config.beta) == ("bi_level", 1.0, 1.0, 0.0)
    assert (config.batch_size, config.rollouts_per_example) == (32, 16)
    assert (config.learning_rate, config.critic_learning_rate, config.value_clip) == (1e-6, 1e-5, 0.5)


@pytest.mark.parametrize("lora", [False, True])
def test_bf16_computes_in_bf16_and_keeps_trained_weights_in_float32(tiny_model, lora):
    c = random_head(critic(tiny_model, lora=lora, bf16=True))
    assert all(p.dtype == torch.float32 for p in c.parameters)  # what AdamW updates
    s = sample([-1, 0, 0, -1, 1], [0.0, 1.0, 1.0, 0.0, 2.0], [0.0] * 5)
    full = random_head(critic(tiny_model, lora=lora))
    (bf16_values,) = c.values([s], max_samples=1, max_tokens=None)
    (fp32_values,) = full.values([s], max_samples=1, max_tokens=None)
    assert bf16_values != fp32_values and bf16_values == pytest.approx(fp32_values, abs=0.05)
    assert math.isfinite(c.update([[s]], value_tokens=3)["critic/value_loss"])
