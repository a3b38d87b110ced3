"""OREO (Offline REasoning Optimization, arXiv 2412.16145) as a recipe on the shared trainer blocks: a policy and a
value model learned together from a fixed trajectory dataset by enforcing the soft Bellman equation.

One optimizer step (`training_step`, once per micro-batch; transformers clips, steps and schedules the policy):

    policy forward (logits only where some sequence acts) -> log pi, full log-softmax
    reference forward (frozen copy of the initial policy, no grad)    -> log pi_ref
    value model forward                                               -> V(s_t) at every position
    value loss (Eq. 8) + policy loss (Eq. 9, token- or step-level) + kl_coef * KL regulariser -> one backward
    on the last micro-batch of the step: clip, step and schedule the value model with its own optimizer

The math is in rlvr.offline.losses. The released trainer (pcl_trainer.py `fit`) runs the policy twice per batch
(once under no_grad for the value target, once for its own loss) with the same weights, since the value model's
update does not touch the policy; here one forward serves both (its log-probabilities detached for the value
target), which gives the same numbers.

Defaults are those of the released math script (train_oreo.sh) and the paper's Appendix A.3: beta 0.03, KL weight
0.01 with the exact (full-vocabulary) KL, lr 5e-6 for both models, batch 128, micro-batch 4, cosine schedule with 3%
warmup, Adam betas (0.9, 0.95), gradient clipping at 1.0, rewards used as they are (--rew_mul 1 --rew_add 0). The
paper's step-level variant uses kl_coef 0.1.

Outputs: `final/` (the policy, servable by `rlvr serve`) and `value/` (the value model, a
`AutoModelForTokenClassification` with one label whose logit at position t is V(ids[:t+1]), plus the tokenizer).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import torch
from transformers import (
    AutoConfig,
    AutoModelForTokenClassification,
    Trainer,
    TrainingArguments,
    get_scheduler,
)

from rlvr.offline.losses import exact_kl, k3_kl, kl_regularizer, logratio_to_go, policy_loss, value_loss
from rlvr.offline.recipe import OfflineOptions, OfflineRecipe
from rlvr.trainer.config import ConfigError
from rlvr.trainer.policy import frozen_reference, load_policy
from rlvr.trajectories import Trajectory, token_dataset

VALUE_DIR = "value"
VALUE_STATE = "value_optimizer.pt"


@dataclass
class OREOConfig(OfflineOptions, TrainingArguments):
    trainer: ClassVar[str] = "rlvr.offline.oreo:OREOTrainer"

    beta: float = field(default=0.03, metadata={"help": "KL-regularisation strength of the soft Bellman equation "
                                                         "(Eq. 1-9; train_oreo.sh --beta 0.03)."})
    kl_coef: float = field(default=0.01, metadata={"help": "alpha: weight of the KL regulariser in the policy loss "
                                                            "(Eq. 9; --kl_reg 0.01; the paper's step-level: 0.1)."})
    kl_estimator: Literal["exact", "k3"] = field(
        default="exact", metadata={"help": "exact: KL over the vocabulary (--unbiased_kl); k3: sampled-token estimate."})
    states: Literal["token", "step"] = field(
        default="token", metadata={"help": "token: token-level OREO (states at every action token, the released "
                                   "scripts); step: states at step starts, a whole step is one action (Sec. 4.2)."})
    value_learning_rate: float = field(default=5e-6, metadata={"help": "--critic_learning_rate."})
    reward_scale: float = field(default=1.0, metadata={"help": "R = reward * reward_scale + reward_shift (--rew_mul)."})
    reward_shift: float = field(default=0.0, metadata={"help": "--rew_add."})
    learning_rate: float = 5e-6
    num_train_epochs: float = 1.0
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.03
    adam_beta2: float = 0.95
    logging_steps: float = 1
    save_steps: float = 50
    report_to: str | list[str] | None = "none"

    def __post_init__(self):
        self.offline_setup()
        if self.beta <= 0:
            raise ConfigError(f"beta={self.beta} must be > 0 (the soft Bellman equation's KL strength)")
        if self.kl_coef < 0:
            raise ConfigError(f"kl_coef={self.kl_coef} must be >= 0")
        if self.kl_estimator not in ("exact", "k3") or self.states not in ("token", "step"):
            raise ConfigError(f"kl_estimator={self.kl_estimator!r} (exact|k3), states={self.states!r} (token|step)")
        super().__post_init__()


def load_value_model(path: str, *, bf16: bool = False, zero_head: bool = False):
    """A causal LM's body with a one-output linear head: V at every position. From the policy's checkpoint the
    head is new; the released code starts it at zero (`zero_init_value_head`), so V = 0 before training."""
    config = AutoConfig.from_pretrained(path, num_labels=1)
    config.classifier_dropout = 0.0  # transformers' token-classification head drops 10% by default
    model = AutoModelForTokenClassification.from_pretrained(path, config=config,
                                                            dtype=torch.bfloat16 if bf16 else torch.float32)
    if zero_head:
        with torch.no_grad():
            for p in model.score.parameters():
                p.zero_()
    return model


@dataclass
class OREOBatch:
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    actions: torch.Tensor  # [B, L-1] position t: token t+1 is an action
    states: torch.Tensor  # [B, L-1] position t: the prefix ids[:t+1] is a state
    rewards: torch.Tensor  # [B]


class OREOCollator:
    """Token rows -> right-padded tensors in the position layout of rlvr.offline.losses."""

    def __init__(self, pad_token_id: int, states: str, reward_scale: float, reward_shift: float):
        self.pad, self.states, self.scale, self.shift = pad_token_id, states, reward_scale, reward_shift

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        length = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), length), self.pad, dtype=torch.long)
        attention = torch.zeros((len(rows), length), dtype=torch.long)
        action = torch.zeros((len(rows), length), dtype=torch.float)
        starts = torch.zeros((len(rows), length), dtype=torch.float)
        for b, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[b, :n] = torch.tensor(row["input_ids"])
            attention[b, :n] = 1
            action[b, :n] = torch.tensor(row["action_mask"], dtype=torch.float)
            starts[b, row["step_starts"]] = 1.0
        actions = action[:, 1:]
        states = actions.clone() if self.states == "token" else starts[:, 1:] * actions
        rewards = torch.tensor([float(r["reward"]) for r in rows]) * self.scale + self.shift
        return {"input_ids": ids, "attention_mask": attention, "actions": actions, "states": states,
                "rewards": rewards}


def action_logprobs(model, batch: OREOBatch, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Full log-softmax [B, K, V] at positions `keep` and the log-probability of each next token [B, K].
    The LM head runs on those positions only (`logits_to_keep`, as rlvr.trainer.policy.token_logprobs)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=keep).logits
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    targets = batch.input_ids[:, keep + 1]
    return logprobs, logprobs.gather(-1, targets[..., None])[..., 0]


class OREOTrainer(OfflineRecipe, Trainer):
    label = "oreo"

    def __init__(self, model, trajectories: list[Trajectory], args: OREOConfig):
        policy, tokenizer = load_policy(model, bf16=args.bf16)
        self.ref_model = frozen_reference(policy)
        path = policy.config._name_or_path
        self.value_model = load_value_model(path, bf16=args.bf16, zero_head=True)
        tokens, self.too_long = token_dataset(trajectories, tokenizer, args.max_length)
        collator = OREOCollator(tokenizer.pad_token_id, args.states, args.reward_scale, args.reward_shift)
        super().__init__(model=policy, args=args, train_dataset=tokens, processing_class=tokenizer,
                         data_collator=collator)
        self.setup_offline(args, trajectories, len(tokens))
        self.ref_model.to(self.args.device)
        self.value_model.to(self.args.device)
        self.value_optimizer = torch.optim.AdamW(
            self.value_model.parameters(), lr=args.value_learning_rate, betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon, weight_decay=args.weight_decay)
        self.value_scheduler = None
        self._resumed_value_state: dict | None = None  # read at resume, applied once the scheduler exists
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}  # averaged by hf_overrides.log

    # ------------------------------------------------------------ the value model's optimizer and schedule
    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        self.value_scheduler = get_scheduler(
            self.args.lr_scheduler_type, self.value_optimizer,
            num_warmup_steps=self.args.get_warmup_steps(num_training_steps), num_training_steps=num_training_steps)
        if self._resumed_value_state is not None:
            # after the scheduler is built, as transformers restores the policy's (_load_optimizer_and_scheduler):
            # building a scheduler resets the optimizer's learning rate to the schedule's start
            self.value_optimizer.load_state_dict(self._resumed_value_state["optimizer"])
            self.value_scheduler.load_state_dict(self._resumed_value_state["scheduler"])
            self._resumed_value_state = None
        return scheduler

    def save_extra_state(self, checkpoint_dir: Path) -> None:
        self.value_model.save_pretrained(Path(checkpoint_dir) / VALUE_DIR)
        torch.save({"optimizer": self.value_optimizer.state_dict(),
                    "scheduler": self.value_scheduler.state_dict() if self.value_scheduler else None},
                   Path(checkpoint_dir) / VALUE_STATE)

    def load_extra_state(self, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        weights = load_file(str(Path(checkpoint_dir) / VALUE_DIR / "model.safetensors"))
        self.value_model.load_state_dict(weights)
        # transformers calls this before it builds the optimizers and schedulers; create_scheduler applies it
        self._resumed_value_state = torch.load(Path(checkpoint_dir) / VALUE_STATE, weights_only=True)

    # ------------------------------------------------------------ one micro-batch
    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        args = self.args
        batch = OREOBatch(**{k: v.to(args.device) for k, v in inputs.items()})
        model.train()
        self.value_model.train()
        # positions where some sequence acts: every state is one, so no loss needs the others
        keep = batch.actions.any(0).nonzero().squeeze(-1)
        actions, states = batch.actions[:, keep], batch.states[:, keep]

        logprobs, logps = action_logprobs(model, batch, keep)
        with torch.no_grad():
            ref_logprobs, ref_logps = action_logprobs(self.ref_model, batch, keep)
        values = self.value_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[..., 0]
        values = values[:, keep].float()

        v_loss = value_loss(values, logratio_to_go(logps.detach(), ref_logps, actions), states, batch.rewards,
                            args.beta)
        p_loss = policy_loss(logps, ref_logps, actions, values, states, batch.rewards, args.beta)
        per_token_kl = exact_kl(logprobs, ref_logprobs) if args.kl_estimator == "exact" else k3_kl(logps, ref_logps)
        kl = kl_regularizer(per_token_kl, actions)
        loss = (p_loss + args.kl_coef * kl + v_loss) / self.current_gradient_accumulation_steps
        self.accelerator.backward(loss)  # one graph per model: the policy's terms and the value loss are disjoint

        if self.accelerator.sync_gradients:  # the step's last micro-batch: the value model's own update
            value_grad_norm = torch.nn.utils.clip_grad_norm_(self.value_model.parameters(), args.max_grad_norm)
            self.value_optimizer.step()
            self.value_scheduler.step()
            self.value_optimizer.zero_grad(set_to_none=True)
            self._metrics["train"]["value/grad_norm"].append(float(value_grad_norm))
        with torch.no_grad():
            shown = values.masked_fill(states == 0, float("nan"))
            metrics = {
                "loss/value": v_loss.item(), "loss/policy": p_loss.item(), "kl": kl.item(),
                "value/mean": float(shown.nanmean()), "value/max": float(shown.nan_to_num(-1e9).max()),
                "value/min": float(shown.nan_to_num(1e9).min()),
                "logratio/mean": float(((logps - ref_logps) * actions).sum() / actions.sum().clamp(min=1)),
                "states_per_trajectory": float(states.sum(-1).mean()),
            }
        for k, v in metrics.items():
            self._metrics["train"][k].append(v)
        return loss.detach()

    def save_outputs(self, run_dir: Path) -> None:
        self.save_final(self.model, Path(run_dir) / "final")
        self.save_final(self.value_model, Path(run_dir) / VALUE_DIR)
