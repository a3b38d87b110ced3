"""PPO with a learned critic and turn-level GAE (RAGEN's multi-turn PPO) as a recipe on the shared on-policy trainer.

Per generated batch (`make_samples`, main process):
    rollouts -> training samples (packed trajectories or one per turn, `batching.rollout_samples`)
    -> the critic's value of every token, and (kl_reward_coef > 0) the reference policy's log-probabilities
    -> per rollout: rewards on tokens (turn rewards on each turn's last token, the outcome on the last one, minus
       kl_reward_coef * KL on every assistant token) -> `rlvr.credit.estimate(gae, ...)`: per-token advantages and
       the critic's targets -> whitened over the batch's assistant tokens (verl's masked_whiten)
    -> `ValueSample`s: the policy's samples with per-token advantages, plus returns, old values and the value mask.
Per optimizer step (`training_step`): the policy's PPO-clip loss (OnPolicyTrainer), then one critic step on the same
micro-batches. `num_iterations` passes over one batch are PPO's epochs. During the first `critic_warmup_steps`
steps only the critic learns (RAGEN/verl `critic_warmup`): the actor's gradients are dropped before its optimizer
step (its forward still runs, so its metrics are logged).

Metrics beyond OnPolicyTrainer's: critic/value_loss, critic/clip_fraction, critic/explained_variance (of the targets
by the values the batch was made with), critic/grad_norm, reward/kl (mean k1 per assistant token), timing/credit_s
and timing/critic_s; per turn k (1-based): turn/k/advantage_mean|std|absmean over rollouts of the turn's mean token
advantage (what `Rollout.advantages` holds here), turn/k/value_mean (value at the turn's first token),
turn/k/turn_advantage_mean (bi_level, cross_level).

Sources: RAGEN (RAGEN-AI/RAGEN, quanwei0/RAGEN: ragen/trainer/agent_trainer.py, core_algos.py,
ragen/workers/critic/dp_critic.py) on verl 1e47e41 (apply_kl_penalty, compute_value_loss). Where rlvr departs from
them, and why: src/rlvr/credit/README.md, "GAE for multi-turn PPO".
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from accelerate.utils import DistributedType

from rlvr.credit import GAE_ESTIMATORS, estimate, token_rewards, whiten
from rlvr.credit.gae import RETURNS, TURN_RETURNS
from rlvr.rollouts import Rollout, turn_name
from rlvr.trainer.batching import RolloutSamples, Sample, rollout_samples, split_batch
from rlvr.trainer.config import ConfigError, OnPolicyConfig
from rlvr.trainer.critic import Critic, ValueSample, explained_variance, lora_config, padded
from rlvr.trainer.on_policy import OnPolicyTrainer, TrainBatch
from rlvr.trainer.policy import frozen_reference, reference_logprobs
from rlvr.trainer.rollout_client import GeneratedBatch

CRITIC_DIR = "critic"


@dataclass
class PPOConfig(OnPolicyConfig):
    """PPO with a critic. Defaults follow RAGEN's WebShop runs (config/base.yaml, webshop_1.5b_train.yaml,
    train_ppo_main.sh's USE_BASE) on verl's PPO defaults (critic lr 1e-5, value clip 0.5, grad clip 1.0)."""

    trainer: ClassVar[str] = "rlvr.trainer.ppo:PPOTrainer"

    # --- credit: GAE (rlvr.credit.gae) ---
    gae: str = field(
        default="multi_turn", metadata={"help": f"GAE estimator (rlvr.credit.gae): {', '.join(GAE_ESTIMATORS)}."})
    gamma: float = field(default=1.0, metadata={"help": "Token-level discount (RAGEN: 1.0)."})
    lam: float = field(default=1.0, metadata={"help": "Token-level GAE lambda (RAGEN: 1.0)."})
    turn_gamma: float = field(
        default=0.95, metadata={"help": "Turn-level discount of bi_level / cross_level (RAGEN's high_level_gamma)."})
    turn_lam: float = field(
        default=0.95, metadata={"help": "Turn-level lambda of bi_level / cross_level (RAGEN's high_level_lam)."})
    turn_weight: float = field(default=0.0, metadata={"help": "cross_level: A = (1 - w) A_token + w A_turn."})
    returns: str = field(
        default="gae", metadata={"help": "Critic targets: 'gae' (A + V) or 'monte_carlo' (discounted reward-to-go), "
                                 "or for bi_level / cross_level 'turn_gae' / 'turn_monte_carlo': the same with "
                                 "turn_gamma, turn_lam across turn boundaries, so a fitted critic leaves the turn TD "
                                 "errors unbiased (rlvr.credit.gae.turn_returns)."})
    whiten_advantages: bool = field(
        default=True, metadata={"help": "Whiten advantages over the batch's assistant tokens (verl)."})
    kl_reward_coef: float = field(
        default=0.001,
        metadata={"help": "KL(pi_old || pi_ref) per token as a reward penalty (RAGEN: 0.001; 0 = off). `beta` puts "
                  "a KL term in the loss instead."})
    # --- the critic ---
    critic_model: str | None = field(
        default=None, metadata={"help": "Base model of the critic (default: the policy's model)."})
    critic_learning_rate: float = field(default=1e-5, metadata={"help": "The critic's AdamW learning rate."})
    critic_weight_decay: float = field(default=0.01, metadata={"help": "The critic's AdamW weight decay."})
    critic_max_grad_norm: float = field(default=1.0, metadata={"help": "The critic's gradient clipping norm."})
    critic_use_lora: bool = field(
        default=False,
        metadata={"help": "Train the critic as a LoRA adapter (the policy's lora_rank, lora_alpha, lora_dropout, "
                  "lora_target_modules) plus its value head."})
    value_clip: float = field(
        default=0.5, metadata={"help": "Value clipping range around the old values (verl's cliprange_value)."})
    critic_warmup_steps: int = field(
        default=0, metadata={"help": "Optimizer steps at the start in which only the critic learns."})
    value_loss_on_env_tokens: bool = field(
        default=False,
        metadata={"help": "gae='token' only: also fit the values of environment tokens after the first assistant "
                  "token (RAGEN's critic.mask_obs=false)."})

    def _validate(self) -> None:
        super()._validate()
        if self.filter_groups_by == "advantage":
            raise ConfigError("filter_groups_by='advantage' reads a group's advantages at generation, but PPO's come "
                              "from its critic at training time: use filter_groups_by='outcome'")
        if self.gae not in GAE_ESTIMATORS:
            raise ConfigError(f"gae={self.gae!r} is not one of {GAE_ESTIMATORS}")
        if self.returns not in RETURNS:
            raise ConfigError(f"returns={self.returns!r} is not one of {RETURNS}")
        if self.returns in TURN_RETURNS and self.gae not in ("bi_level", "cross_level"):
            raise ConfigError(f"returns={self.returns!r} follows the turn level of gae='bi_level' / 'cross_level' "
                              f"(gae={self.gae!r} has none): use returns='gae' or 'monte_carlo'")
        for name in ("gamma", "lam", "turn_gamma", "turn_lam", "turn_weight"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name}={getattr(self, name)} must be in [0, 1]")
        if self.turn_weight and self.gae != "cross_level":
            raise ConfigError(f"turn_weight={self.turn_weight} applies to gae='cross_level' only (gae={self.gae!r})")
        if self.kl_reward_coef < 0:
            raise ConfigError(f"kl_reward_coef={self.kl_reward_coef} must be >= 0")
        if self.value_clip <= 0 or self.critic_learning_rate <= 0 or self.critic_max_grad_norm <= 0:
            raise ConfigError("value_clip, critic_learning_rate and critic_max_grad_norm must be > 0")
        if self.critic_warmup_steps < 0:
            raise ConfigError(f"critic_warmup_steps={self.critic_warmup_steps} must be >= 0")
        if self.gae == "token" and not self.pack_trajectories:
            raise ConfigError("gae='token' runs GAE through the environment's tokens of a packed trajectory: "
                              "set pack_trajectories=true, or use gae='multi_turn'")
        if self.value_loss_on_env_tokens and self.gae != "token":
            raise ConfigError(f"value_loss_on_env_tokens needs gae='token' (gae={self.gae!r} has no targets on "
                              "environment tokens)")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("PPO trains its critic in one process: launch with --num-processes 1 (one training "
                              "device; the rollout server runs apart)")


@dataclass(frozen=True)
class Trajectory:
    """One rollout's samples seen as one sequence (their lists concatenated), with what the estimator needs."""

    rollout: Rollout
    samples: list[Sample]
    turn_index: list[int]  # the samples' turn_index lists, concatenated
    values: list[float]  # the critic's value of the state before each token
    kl: list[float]  # log pi_old - log pi_ref on assistant tokens (k1), 0 elsewhere

    def rewards(self, kl_coef: float) -> list[float]:
        return token_rewards(self.turn_index, self.rollout.turn_rewards, self.rollout.outcome,
                             [kl_coef * x for x in self.kl])

    def per_sample(self, values: list[float]) -> list[list[float]]:
        """Cut a per-position list of the whole sequence back into one list per sample."""
        out, start = [], 0
        for s in self.samples:
            out.append(values[start : start + len(s)])
            start += len(s)
        return out


def value_mask(turn_index: list[int], on_env_tokens: bool) -> list[int]:
    """Assistant tokens; with `on_env_tokens`, every token from the first assistant token on (RAGEN's
    fill_after_first_one, there applied to right padding too)."""
    if not on_env_tokens:
        return [int(k >= 0) for k in turn_index]
    first = next((t for t, k in enumerate(turn_index) if k >= 0), len(turn_index))
    return [int(t >= first) for t in range(len(turn_index))]


class PPOTrainer(OnPolicyTrainer):
    algo = "ppo"

    def __init__(self, model, env, args: PPOConfig, **kwargs):
        self.label = f"ppo/{args.gae}"
        super().__init__(model, env, args, **kwargs)
        policy = self.accelerator.unwrap_model(self.model)
        if args.kl_reward_coef > 0 and self.ref_model is None and not args.use_lora:
            # as OnPolicyTrainer's reference for a KL in the loss; under LoRA: the policy with its adapter disabled
            self.ref_model = frozen_reference(policy, torch.bfloat16 if args.bf16 else None).to(self.args.device)
        if args.critic_warmup_steps and self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            raise ConfigError("critic_warmup_steps under DeepSpeed: its engine steps the actor inside backward, so "
                              "the warm-up cannot hold the actor back; set critic_warmup_steps=0 or train without "
                              "DeepSpeed")
        from rlvr.models import resolve

        lora = None
        if args.critic_use_lora:
            lora = lora_config(args.lora_rank, args.lora_alpha, args.lora_dropout, args.lora_target_modules)
        self.critic = Critic(
            resolve(args.critic_model or (model if isinstance(model, str) else policy.config._name_or_path)),
            bf16=args.bf16, device=self.args.device, pad_token_id=self.processing_class.pad_token_id,
            learning_rate=args.critic_learning_rate, weight_decay=args.critic_weight_decay,
            max_grad_norm=args.critic_max_grad_norm, value_clip=args.value_clip, lora=lora,
            gradient_checkpointing=args.gradient_checkpointing,
        )
        self._credit_metrics: dict[str, float] = {}  # written by make_samples, read by make_batch

    # ---------------------------------------------------------------- credit
    def make_samples(self, rollouts: list[Rollout]) -> tuple[list[Rollout], list[RolloutSamples]]:
        args = self.args
        start = time.perf_counter()
        layouts = [rollout_samples(dataclasses.replace(r, advantages=(0.0,) * len(r.turns)),
                                   pack=args.pack_trajectories) for r in rollouts]
        unpacked = [(r.example_id, s.reason) for r, s in zip(rollouts, layouts, strict=True) if len(s.samples) > 1]
        if args.gae == "token" and unpacked:
            raise RuntimeError(
                f"gae='token' needs each rollout as one token sequence, but {len(unpacked)} rollout(s) are not "
                f"token-prefix-consistent (e.g. example {unpacked[0][0]}: {unpacked[0][1]}); set token_prompts=true "
                "(each turn prompted with the sampled token ids) or use gae='multi_turn'")
        trajectories = self.trajectories(rollouts, layouts)
        estimates = [
            estimate(args.gae, t.rewards(args.kl_reward_coef), t.values, t.turn_index, gamma=args.gamma,
                     lam=args.lam, turn_gamma=args.turn_gamma, turn_lam=args.turn_lam, turn_weight=args.turn_weight,
                     returns=args.returns)
            for t in trajectories
        ]
        advantages = [e.advantages for e in estimates]
        if args.whiten_advantages and sum(k >= 0 for t in trajectories for k in t.turn_index) >= 2:
            advantages = whiten(advantages, [t.turn_index for t in trajectories])
        per_rollout = [
            dataclasses.replace(layout, samples=[
                ValueSample(s.input_ids, s.loss_mask, s.behavior_logprobs, a, s.turn_index, returns=ret,
                            old_values=v, value_mask=value_mask(s.turn_index, args.value_loss_on_env_tokens),
                            versions=s.versions)
                for s, a, ret, v in zip(t.samples, t.per_sample(adv), t.per_sample(e.returns), t.per_sample(t.values),
                                        strict=True)
            ])
            for layout, t, e, adv in zip(layouts, trajectories, estimates, advantages, strict=True)
        ]
        scored = [dataclasses.replace(t.rollout, advantages=turn_means(adv, t.turn_index, len(t.rollout.turns)))
                  for t, adv in zip(trajectories, advantages, strict=True)]
        self._credit_metrics = {**credit_metrics(trajectories, estimates, args.kl_reward_coef),
                                "timing/credit_s": time.perf_counter() - start}
        return scored, per_rollout

    def trajectories(self, rollouts: list[Rollout], layouts: list[RolloutSamples]) -> list[Trajectory]:
        """The critic's values (and the KL to the reference) of every sample, gathered per rollout."""
        args = self.args
        samples = [s for layout in layouts for s in layout.samples]
        values = iter(self.critic.values(samples, max_samples=args.micro_batch_size,
                                         max_tokens=args.micro_batch_tokens))
        kls = iter(self.sampler_kl(samples) if args.kl_reward_coef > 0 else [[0.0] * len(s) for s in samples])
        out = []
        for r, layout in zip(rollouts, layouts, strict=True):
            parts = [(next(values), next(kls)) for _ in layout.samples]
            out.append(Trajectory(r, layout.samples, turn_index=[k for s in layout.samples for k in s.turn_index],
                                  values=[v for p in parts for v in p[0]], kl=[x for p in parts for x in p[1]]))
        return out

    def sampler_kl(self, samples: list[Sample]) -> list[list[float]]:
        """Per token, log pi_old - log pi_ref on trained tokens (verl's kl_penalty="kl", k1, as RAGEN uses in
        apply_kl_penalty): pi_old is the sampler's log-probability returned with the rollout."""
        model = self.accelerator.unwrap_model(self.model)
        out: dict[int, list[float]] = {}
        pad = self.processing_class.pad_token_id
        for micro in split_batch(samples, 1, pad, max_samples=self.args.micro_batch_size,
                                 max_tokens=self.args.micro_batch_tokens)[0]:
            # only positions whose next token is trained need the LM head (as OnPolicyTrainer.training_step)
            keep = sorted({t - 1 for s in micro for t, m in enumerate(s.loss_mask) if m})
            if not keep:  # nothing trained in this micro-batch (the sampler masked every token)
                out.update({id(s): [0.0] * len(s) for s in micro})
                continue
            input_ids, attention_mask = padded(micro, pad, self.args.device)
            column = {t + 1: c for c, t in enumerate(keep)}  # token t -> its column in `ref`
            ref = reference_logprobs(model, self.ref_model, input_ids, attention_mask,
                                     torch.tensor(keep, device=input_ids.device), self.args.temperature)
            for s, row in zip(micro, ref.float().tolist(), strict=True):
                out[id(s)] = [s.behavior_logprobs[t] - row[column[t]] if m else 0.0
                              for t, m in enumerate(s.loss_mask)]
        return [out[id(s)] for s in samples]

    def token_values(self, sample: Sample) -> list[float] | None:
        """The values GAE used (the batch's old values; split_batch's filler has none)."""
        return sample.old_values if isinstance(sample, ValueSample) else None

    def forwarded_samples(self, trained: list[Sample]) -> list[Sample]:
        return trained  # the critic's update goes through the same micro-batches and trains on every sample

    def make_batch(self, batch_index: int, generated: GeneratedBatch) -> TrainBatch:
        batch = super().make_batch(batch_index, generated)
        return dataclasses.replace(batch, metrics={**batch.metrics, **self._credit_metrics})

    # ---------------------------------------------------------------- one optimizer step
    def training_step(self, model, inputs=None, num_items_in_batch=None) -> torch.Tensor:
        loss = super().training_step(model, inputs, num_items_in_batch)  # the policy (and the batch, at iteration 0)
        warming_up = self.state.global_step < self.args.critic_warmup_steps
        if warming_up:
            model.zero_grad(set_to_none=True)  # the optimizer skips parameters without gradients: no actor update
        batch = self._batch
        value_tokens = sum(sum(s.value_mask) for p in batch.microbatches for m in p for s in m
                           if isinstance(s, ValueSample))
        start = time.perf_counter()
        stats = self.critic.update(batch.microbatches[self.accelerator.process_index], value_tokens)
        if self.accelerator.is_main_process:
            self.log_metrics("train", {**stats, "critic/warmup": float(warming_up),
                                       "timing/critic_s": time.perf_counter() - start})
        return loss

    # ---------------------------------------------------------------- checkpoints
    def save_extra_state(self, checkpoint_dir: Path) -> None:
        if self.accelerator.is_main_process:
            self.critic.save(Path(checkpoint_dir) / CRITIC_DIR)

    def load_extra_state(self, checkpoint_dir: Path) -> None:
        self.critic.load(Path(checkpoint_dir) / CRITIC_DIR)


def turn_means(advantages: list[float], turn_index: list[int], turns: int) -> tuple[float, ...]:
    """The mean token advantage of each turn (0 for a turn without trained tokens): what `Rollout.advantages`
    holds for PPO, so that per-turn metrics and rollout logs read as they do for MT-GRPO."""
    sums, counts = [0.0] * turns, [0] * turns
    for a, k in zip(advantages, turn_index, strict=True):
        if k >= 0:
            sums[k] += a
            counts[k] += 1
    return tuple(s / c if c else 0.0 for s, c in zip(sums, counts, strict=True))


def credit_metrics(trajectories: list[Trajectory], estimates, kl_reward_coef: float) -> dict[str, float]:
    """The critic's fit before this batch's update (explained variance of its targets), value and target means, the
    KL penalty, and per turn the mean value at the turn's first token and the turn-level advantage (bi-level)."""
    values, targets, kl = [], [], []
    first_values: dict[int, list[float]] = {}
    turn_adv: dict[int, list[float]] = {}
    for t, e in zip(trajectories, estimates, strict=True):
        seen = set()
        for pos, k in enumerate(t.turn_index):
            if k < 0:
                continue
            values.append(t.values[pos])
            targets.append(e.returns[pos])
            kl.append(t.kl[pos])
            if k not in seen:
                seen.add(k)
                first_values.setdefault(k, []).append(t.values[pos])
        for k, a in zip(sorted(seen), e.turn_advantages or [], strict=False):
            turn_adv.setdefault(k, []).append(a)
    metrics = {"critic/old_value_mean": _mean(values), "critic/return_mean": _mean(targets)}
    fit = explained_variance(values, targets)
    if math.isfinite(fit):  # undefined when every target is the same
        metrics["critic/explained_variance"] = fit
    if kl_reward_coef > 0:
        metrics["reward/kl"] = _mean(kl)
    for k, xs in sorted(first_values.items()):
        metrics[turn_name(k, "value_mean")] = _mean(xs)
    for k, xs in sorted(turn_adv.items()):
        metrics[turn_name(k, "turn_advantage_mean")] = _mean(xs)
    return metrics


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0
