"""Training configurations: `OnPolicyConfig` (what every on-policy recipe shares) and `MTGRPOConfig` (group credit).

Everything verifiers' `RLConfig` knows (batch sizes, sampling, LoRA, server host/port) keeps its meaning;
`OnPolicyConfig` adds the loss, rollout and run options shared by the on-policy recipes, and each recipe's config
adds its algorithm. Defaults are chosen so that the same config runs on a 2-core CPU (fp32, no liger, no wandb key
needed) and on GPUs (set `bf16=True`). Every check runs when the configuration is built, before any server starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from verifiers.rl.trainer import RLConfig

from rlvr.credit import ESTIMATORS, estimator_parameters

LOSS_TYPES = ("ppo_clip", "masked_is")
WEIGHT_SYNC = ("auto", "nccl", "cpu")


class ConfigError(ValueError):
    """A training configuration that cannot run, with what to change."""


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass
class OnPolicyConfig(RLConfig):
    trainer: ClassVar[str]  # "module:Class" of the recipe that trains with this configuration
    # --- loss ---
    loss_type: Literal["ppo_clip", "masked_is"] = field(
        default="ppo_clip",
        metadata={"help": "ppo_clip: PPO clipped surrogate (GRPO/DAPO); masked_is: verifiers' masked IS loss."},
    )
    epsilon_low: float = field(default=0.2, metadata={"help": "PPO clip: ratio floor is 1 - epsilon_low."})
    epsilon_high: float = field(default=0.2, metadata={"help": "PPO clip: ratio ceiling is 1 + epsilon_high."})
    beta: float = field(default=0.0, metadata={"help": "KL penalty coefficient to the reference model (0 = off)."})
    num_iterations: int = field(
        default=1, metadata={"help": "Optimizer steps per generated batch (the MT-GRPO paper uses 2)."}
    )

    # --- rollouts ---
    max_tokens_per_turn: int | None = field(
        default=None, metadata={"help": "Generation limit per assistant turn (default: RLConfig.max_tokens)."}
    )
    micro_batch_tokens: int | None = field(
        default=None,
        metadata={"help": "Token budget of a micro-batch (padded tokens): micro-batches are filled up to it instead "
                  "of holding micro_batch_size samples. None: micro_batch_size samples each."},
    )
    pack_trajectories: bool = field(
        default=True,
        metadata={"help": "One sample per rollout when its history is token-prefix-consistent (else per step)."},
    )
    weight_sync: Literal["auto", "nccl", "cpu"] = field(
        default="auto", metadata={"help": "auto: nccl when CUDA is available, the CPU transport otherwise."}
    )
    verify_weight_sync: bool = field(
        default=False,
        metadata={"help": "After each sync, compare the server's logprobs with the trainer's on one sequence "
                  "and log sync/max_abs_logprob_diff (one extra request and forward pass)."},
    )
    num_logged_rollouts: int = field(
        default=2, metadata={"help": "Rollouts per step written to rollouts.jsonl in the run directory."}
    )
    progress: bool = field(default=True, metadata={"help": "Show a rich progress display."})

    # --- CPU-friendly defaults of inherited fields (RLConfig assumes GPUs, wandb and no resume) ---
    use_liger: bool = False
    bf16: bool = False
    save_only_model: bool = False  # full resume needs optimizer, scheduler and RNG states
    report_to: str | list[str] | None = "wandb"
    dataloader_num_workers: int = 0

    def __post_init__(self):
        self._validate()
        if self.max_tokens_per_turn is not None:
            self.max_tokens = self.max_tokens_per_turn
        if self.report_to in ("wandb", ["wandb"]) and not os.environ.get("WANDB_API_KEY"):
            os.environ.setdefault("WANDB_MODE", "offline")  # no key: keep the run local, sync later
        super().__post_init__()

    def _validate(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss_type={self.loss_type!r} is not one of {LOSS_TYPES}")
        if self.weight_sync not in WEIGHT_SYNC:
            raise ConfigError(f"weight_sync={self.weight_sync!r} is not one of {WEIGHT_SYNC}")
        if self.weight_sync == "nccl" and not _cuda_available():
            raise ConfigError("weight_sync='nccl' needs CUDA, which this machine lacks: use weight_sync='cpu' or 'auto'")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 2:
            raise ConfigError(f"micro_batch_tokens={self.micro_batch_tokens} must be >= 2 (or None)")
        if not (0 <= self.epsilon_low < 1 and self.epsilon_high >= 0):
            raise ConfigError(f"epsilon_low={self.epsilon_low}, epsilon_high={self.epsilon_high}: "
                              "need 0 <= epsilon_low < 1 and epsilon_high >= 0")
        if self.beta < 0:
            raise ConfigError(f"beta={self.beta} must be >= 0")
        if self.num_iterations < 1:
            raise ConfigError(f"num_iterations={self.num_iterations} must be >= 1")
        if self.rollouts_per_example < 2:
            raise ConfigError(f"rollouts_per_example={self.rollouts_per_example}: GRPO compares rollouts of "
                              "the same prompt, so it needs at least 2")
        if self.batch_size % self.rollouts_per_example:
            raise ConfigError(f"batch_size={self.batch_size} is not a multiple of rollouts_per_example="
                              f"{self.rollouts_per_example}: every prompt needs a full group. Try batch_size="
                              f"{max(1, self.batch_size // self.rollouts_per_example) * self.rollouts_per_example}")
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if self.batch_size % (self.micro_batch_size * world):
            raise ConfigError(f"batch_size={self.batch_size} is not a multiple of micro_batch_size * processes = "
                              f"{self.micro_batch_size} * {world}: change batch_size or micro_batch_size")
        if self.save_strategy == "steps" and self.save_steps and int(self.save_steps) % self.num_iterations:
            raise ConfigError(f"save_steps={self.save_steps} must be a multiple of num_iterations="
                              f"{self.num_iterations}: a checkpoint between two passes over one batch could "
                              "not resume that batch")


@dataclass
class MTGRPOConfig(OnPolicyConfig):
    """Critic-free group credit: one of the `rlvr.credit` estimators, run on each group of rollouts of a prompt."""

    trainer: ClassVar[str] = "rlvr.trainer.mt_grpo:MTGRPOTrainer"

    algo: str = field(
        default="mt_grpo",
        metadata={"help": f"Credit estimator (rlvr.credit.ESTIMATORS): {', '.join(ESTIMATORS)}."},
    )
    credit: dict = field(
        default_factory=dict,
        metadata={"help": "The estimator's parameters by their own names (e.g. coef, gamma, alpha, unreached, norm); "
                  "merged with the environment's TurnRubric credit defaults, a conflict being an error."},
    )

    def _validate(self) -> None:
        super()._validate()
        if self.algo not in ESTIMATORS:
            raise ConfigError(f"algo={self.algo!r} is not a group-credit estimator; choose one of {sorted(ESTIMATORS)}")
        unknown = sorted(set(self.credit) - set(estimator_parameters(self.algo)))
        if unknown:
            raise ConfigError(f"credit parameter(s) {unknown} do not apply to algo={self.algo!r}; it takes "
                              f"{sorted(estimator_parameters(self.algo))}")
