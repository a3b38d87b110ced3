"""Training configurations: `OnPolicyConfig` (what every on-policy recipe shares) and `MTGRPOConfig` (group credit).

Everything verifiers' `RLConfig` knows (batch sizes, sampling, LoRA, server host/port) keeps its meaning;
`OnPolicyConfig` adds the loss, rollout and run options shared by the on-policy recipes, and each recipe's config
adds its algorithm. Defaults are chosen so that the same config runs on a 2-core CPU (fp32, no liger, no wandb key
needed) and on GPUs (set `bf16=True`: fp32 master weights, bf16 compute). Every check runs when the configuration is
built, before any server starts: settings the trainer cannot honour are refused there, never silently ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from peft import LoraConfig
from verifiers.rl.trainer import RLConfig

from rlvr.credit import ESTIMATORS, estimator_parameters, get_estimator

LOSS_TYPES = ("ppo_clip", "masked_is", "decoupled_clip")
WEIGHT_SYNC = ("auto", "nccl", "cpu")
# Sampling settings the server applies to its logprobs (vLLM `processed_logprobs`) that the trainer's log-softmax at
# the sampling temperature cannot reproduce: the PPO ratio would compare two different distributions.
# field -> the value that leaves the distribution alone.
NEUTRAL_SAMPLING = {"top_p": 1.0, "top_k": None, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                    "frequency_penalty": 0.0}
# transformers schedulers that ignore warmup_steps (transformers.optimization.get_scheduler).
NO_WARMUP_SCHEDULERS = ("constant", "reduce_lr_on_plateau")


class ConfigError(ValueError):
    """A training configuration that cannot run, with what to change."""


def causal_lm_lora(options) -> LoraConfig:
    """The LoraConfig of a configuration's LoRA options, named as verifiers' RLConfig names them (lora_rank,
    lora_alpha, lora_dropout, lora_target_modules, lora_modules_to_save, lora_use_rslora): the on-policy configs and
    the offline SFT recipe's. No target modules: every linear layer but the LM head (RLConfig's default list)."""
    return LoraConfig(
        r=options.lora_rank, lora_alpha=options.lora_alpha, lora_dropout=options.lora_dropout,
        target_modules=options.lora_target_modules or "all-linear", modules_to_save=options.lora_modules_to_save,
        use_rslora=options.lora_use_rslora, task_type="CAUSAL_LM",
    )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass
class OnPolicyConfig(RLConfig):
    trainer: ClassVar[str]  # "module:Class" of the recipe that trains with this configuration
    # --- loss ---
    loss_type: Literal["ppo_clip", "masked_is", "decoupled_clip"] = field(
        default="ppo_clip",
        metadata={"help": "ppo_clip: PPO clipped surrogate (GRPO/DAPO) against the sampler's logprobs; masked_is: "
                  "verifiers' masked IS loss; decoupled_clip: AReaL's decoupled PPO (arXiv 2505.24298, Eq. 5), "
                  "clipped against the policy at the start of the batch's training and weighted by that policy's "
                  "ratio to the sampler's, truncated at behavior_weight_cap (for async_steps > 0)."},
    )
    behavior_weight_cap: float = field(
        default=5.0,
        metadata={"help": "decoupled_clip: the per-token weight pi_proximal / pi_behavior is truncated at this value."},
    )
    epsilon_low: float = field(default=0.2, metadata={"help": "PPO clip: ratio floor is 1 - epsilon_low."})
    epsilon_high: float = field(default=0.2, metadata={"help": "PPO clip: ratio ceiling is 1 + epsilon_high."})
    beta: float = field(default=0.0, metadata={"help": "KL penalty coefficient to the reference model (0 = off)."})
    skip_zero_advantage: bool = field(
        default=True,
        metadata={"help": "With beta = 0, leave out of the forward and backward passes the samples whose trained "
                  "tokens all have advantage 0 (a group whose rollouts all won or all lost): their gradient is "
                  "exactly zero, and the loss keeps the whole batch's token count as its denominator, so the update "
                  "is the same. The per-token statistics (train/ratio, entropy, mismatch_kl) then cover the "
                  "forwarded samples. PPO forwards every sample (its critic trains on them)."},
    )
    filter_groups: bool = field(
        default=False,
        metadata={"help": "DAPO's dynamic sampling (arXiv 2503.14476, Sec. 3.2): leave out the groups whose rollouts "
                  "all got the same outcome (no group-normalised advantage anywhere) and roll out further prompts "
                  "until the batch has batch_size / rollouts_per_example groups with outcome spread, in at most "
                  "max_generation_rounds rounds (rlvr.trainer.group_filter). A batch that finds none trains as "
                  "generated (its zero-advantage samples are skipped)."},
    )
    filter_groups_by: str = field(
        default="outcome",
        metadata={"help": "filter_groups: what a kept group's rollouts must differ in. 'outcome' (DAPO): their "
                  "outcomes; 'advantage': the recipe's credit gives some turn a non-zero advantage, so a turn-level "
                  "estimator keeps the groups whose spread is in their turn rewards (group-credit recipes only: "
                  "PPO's advantages come from its critic at training time)."},
    )
    max_generation_rounds: int = field(
        default=4,
        metadata={"help": "filter_groups: rounds of prompts rolled out for one batch at most, the first included "
                  "(verl's max_num_gen_batches); each round costs one batch's generation."},
    )
    sft_replay: str | None = field(
        default=None,
        metadata={"help": "A trajectory dataset (the SFT stage's: `rlvr collect` or the pipeline's expert stage) "
                  "replayed beside the policy gradient: each step adds sft_replay_coef x the mean negative "
                  "log-likelihood of the assistant tokens of sft_replay_batch of its successful trajectories "
                  "(InstructGPT's PPO-ptx, arXiv 2203.02155 Eq. 2; rlvr.trainer.replay), so that RL on new goals "
                  "keeps what SFT taught. None: off."},
    )
    sft_replay_coef: float = field(
        default=1.0,
        metadata={"help": "sft_replay: the weight of the replay term (gamma in InstructGPT's Eq. 2); 1 weighs a "
                  "demonstration token like a trained rollout token of advantage 1."},
    )
    sft_replay_batch: int = field(
        default=4, metadata={"help": "sft_replay: demonstrations replayed per optimizer step (per process)."})
    sft_replay_min_reward: float | None = field(
        default=1.0, metadata={"help": "sft_replay: replay the trajectories with reward >= this (None: all)."})
    num_iterations: int = field(
        default=1, metadata={"help": "Optimizer steps per generated batch (the MT-GRPO paper uses 2)."}
    )
    async_steps: int = field(
        default=0,
        metadata={"help": "Batches generated ahead while the trainer trains (rlvr.trainer.producer): no token is "
                  "trained on more than async_steps policy versions after the weights that sampled it. 0: "
                  "generate, then train, in turn (on-policy)."},
    )

    # --- rollouts ---
    max_tokens_per_turn: int | None = field(
        default=None, metadata={"help": "Generation limit per assistant turn (default: RLConfig.max_tokens)."}
    )
    micro_batch_tokens: int | None = field(
        default=16384,
        metadata={"help": "Token budget of a micro-batch (padded tokens: samples x longest): micro-batches are filled "
                  "up to it and to micro_batch_size samples, whichever comes first; a longer sample goes alone. "
                  "None: micro_batch_size samples each, however long."},
    )
    logprob_chunk_tokens: int = field(
        default=512,
        metadata={"help": "Positions whose vocabulary log-softmax is computed at once; each chunk is recomputed in "
                  "the backward pass, so logits never exist for more positions than this (memory: chunk x vocab)."},
    )
    pack_trajectories: bool = field(
        default=True,
        metadata={"help": "One sample per rollout when its history is token-prefix-consistent (else per step)."},
    )
    token_prompts: bool = field(
        default=False,
        metadata={"help": "Prompt each turn after the first with the token ids the model sampled, not a re-rendering "
                  "of its text (rlvr.token_prompts): every rollout whose environment keeps its history is then one "
                  "token sequence, which gae='token' needs. False: the server renders each turn from messages."},
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
    num_logged_token_groups: int = field(
        default=2,
        metadata={"help": "Groups per generated batch (all their rollouts) whose per-token credit is written to "
                  "token_credit.jsonl in the run directory (docs/run-files.md); 0 = none."},
    )
    progress: bool = field(default=True, metadata={"help": "Show a rich progress display."})
    seed_sampling: bool = field(
        default=True,
        metadata={"help": "Seed every rollout request from (seed, batch, example, rollout, turn) (rlvr.seeding): the "
                  "same seed samples the same rollouts. False: the server's unseeded sampling."},
    )

    # --- CPU-friendly defaults of inherited fields (RLConfig assumes GPUs, wandb and no resume) ---
    use_liger: bool = False
    bf16: bool = False
    max_prompt_len: int | None = None  # None: max_seq_len (RLConfig's 512 would drop long multi-hop prompts)
    save_only_model: bool = False  # full resume needs optimizer, scheduler and RNG states
    report_to: str | list[str] | None = "wandb"
    dataloader_num_workers: int = 0

    def __post_init__(self):
        self._validate()
        if self.max_tokens_per_turn is not None:
            self.max_tokens = self.max_tokens_per_turn
        if self.report_to in ("wandb", ["wandb"]) and not os.environ.get("WANDB_API_KEY"):
            os.environ.setdefault("WANDB_MODE", "offline")  # no key: keep the run local, sync later
        own_lora_config = self.lora_config is not None
        super().__post_init__()
        if self.use_lora and not own_lora_config:
            # RLConfig builds its LoraConfig from rank, alpha and target modules only: dropout, rsLoRA and
            # modules_to_save would be silently ignored.
            self.lora_config = causal_lm_lora(self)

    @property
    def prompt_token_limit(self) -> int:
        """The longest first prompt (tokens) a dataset row may have: rows beyond it are dropped before training."""
        return min(self.max_prompt_len or self.max_seq_len, self.max_seq_len)

    def _validate(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss_type={self.loss_type!r} is not one of {LOSS_TYPES}")
        if self.weight_sync not in WEIGHT_SYNC:
            raise ConfigError(f"weight_sync={self.weight_sync!r} is not one of {WEIGHT_SYNC}")
        if self.weight_sync == "nccl" and not _cuda_available():
            raise ConfigError("weight_sync='nccl' needs CUDA, which this machine lacks: use weight_sync='cpu' or 'auto'")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 2:
            raise ConfigError(f"micro_batch_tokens={self.micro_batch_tokens} must be >= 2 (or None)")
        if self.logprob_chunk_tokens < 1:
            raise ConfigError(f"logprob_chunk_tokens={self.logprob_chunk_tokens} must be >= 1")
        if self.max_seq_len < 2 or (self.max_prompt_len is not None and self.max_prompt_len < 1):
            raise ConfigError(f"max_seq_len={self.max_seq_len} must be >= 2 and max_prompt_len="
                              f"{self.max_prompt_len} >= 1 (or None: max_seq_len)")
        if not (0 <= self.epsilon_low < 1 and self.epsilon_high >= 0):
            raise ConfigError(f"epsilon_low={self.epsilon_low}, epsilon_high={self.epsilon_high}: "
                              "need 0 <= epsilon_low < 1 and epsilon_high >= 0")
        if self.beta < 0:
            raise ConfigError(f"beta={self.beta} must be >= 0")
        if self.num_logged_token_groups < 0:
            raise ConfigError(f"num_logged_token_groups={self.num_logged_token_groups} must be >= 0 (0: no "
                              "token_credit.jsonl)")
        if self.async_steps < 0:
            raise ConfigError(f"async_steps={self.async_steps} must be >= 0 (0: synchronous generation)")
        if self.behavior_weight_cap < 1:
            raise ConfigError(f"behavior_weight_cap={self.behavior_weight_cap} must be >= 1: a cap below 1 would "
                              "down-weight even on-policy tokens")
        if self.num_iterations < 1:
            raise ConfigError(f"num_iterations={self.num_iterations} must be >= 1")
        if self.filter_groups_by not in ("outcome", "advantage"):
            raise ConfigError(f"filter_groups_by={self.filter_groups_by!r} must be 'outcome' (DAPO: the rollouts' "
                              "outcomes differ) or 'advantage' (the recipe's credit is non-zero somewhere)")
        if self.sft_replay is not None and not (self.sft_replay_coef > 0 and self.sft_replay_batch >= 1):
            raise ConfigError(f"sft_replay={self.sft_replay!r} with sft_replay_coef={self.sft_replay_coef} and "
                              f"sft_replay_batch={self.sft_replay_batch}: both must be positive (or leave out "
                              "sft_replay to train without the replay term)")
        if self.max_generation_rounds < 1:
            raise ConfigError(f"max_generation_rounds={self.max_generation_rounds} must be >= 1 (1: filter_groups "
                              "only drops uniform groups, and rolls out no further prompts)")
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
        if self.max_steps > 0 and self.max_steps % self.num_iterations:
            raise ConfigError(f"max_steps={self.max_steps} must be a multiple of num_iterations={self.num_iterations}: "
                              "the last batch would get fewer passes than the others, and the final checkpoint "
                              "(written at max_steps) could not resume it. Try max_steps="
                              f"{self.max_steps - self.max_steps % self.num_iterations or self.num_iterations}")
        self._validate_sampling()
        self._validate_unsupported()

    def _validate_sampling(self) -> None:
        if not self.temperature > 0:
            raise ConfigError(f"temperature={self.temperature}: the policy gradient needs a sampling distribution "
                              "(greedy decoding has none, and its logprobs are not the trainer's); use temperature > 0")
        changed = {k: getattr(self, k) for k, neutral in NEUTRAL_SAMPLING.items()
                   if getattr(self, k) not in (neutral, *((-1, 0) if k == "top_k" else ()))}
        if changed:
            raise ConfigError(
                f"sampling settings {changed} change the server's logprobs (vLLM processes them into the sampled "
                "distribution) but not the trainer's, so the importance ratio would compare two different "
                f"distributions. Train with {', '.join(f'{k}={NEUTRAL_SAMPLING[k]}' for k in changed)} "
                "(temperature is supported: the trainer divides its logits by it)"
            )

    def _validate_unsupported(self) -> None:
        """Inherited settings this trainer does not implement: refused rather than ignored."""
        if self.use_liger:
            raise ConfigError("use_liger=True: rlvr computes log-probabilities with its own chunked log-softmax "
                              "(logprob_chunk_tokens), not liger's fused kernels; set use_liger=False")
        if not self.mask_env_responses:
            raise ConfigError("mask_env_responses=False: environment tokens were not sampled by the policy (no "
                              "sampling logprobs), so rlvr never trains on them; set mask_env_responses=True")
        if self.warmup_steps and str(self.lr_scheduler_type) in NO_WARMUP_SCHEDULERS:
            raise ConfigError(f"warmup_steps={self.warmup_steps} with lr_scheduler_type={self.lr_scheduler_type!r}, "
                              "which ignores warmup: use lr_scheduler_type='constant_with_warmup' (or 'linear', "
                              "'cosine'), or warmup_steps=0")
        if self.eval_strategy != "no":
            raise ConfigError(f"eval_strategy={self.eval_strategy!r}: the trainer has no evaluation loop; evaluate "
                              "checkpoints with `rlvr evaluate` and leave eval_strategy='no'")


@dataclass
class MTGRPOConfig(OnPolicyConfig):
    """Critic-free group credit: one of the `rlvr.credit` estimators, run on each group of rollouts of a prompt."""

    trainer: ClassVar[str] = "rlvr.trainer.mt_grpo:MTGRPOTrainer"

    algo: str = field(
        default="mt_grpo",
        metadata={"help": f"Credit estimator (rlvr.credit.ESTIMATORS): {', '.join(ESTIMATORS)}; or one of your own by "
                  "its import path (rlvr.credit.get_estimator)."},
    )
    credit: dict = field(
        default_factory=dict,
        metadata={"help": "The estimator's parameters by their own names (e.g. coef, gamma, alpha, unreached, norm); "
                  "merged with the environment's TurnRubric credit defaults, a conflict being an error."},
    )

    def _validate(self) -> None:
        super()._validate()
        try:
            get_estimator(self.algo)  # registered, or yours by import path
        except ValueError as err:
            raise ConfigError(f"algo={self.algo!r} is not a group-credit estimator: {err}") from err
        unknown = sorted(set(self.credit) - set(estimator_parameters(self.algo)))
        if unknown:
            raise ConfigError(f"credit parameter(s) {unknown} do not apply to algo={self.algo!r}; it takes "
                              f"{sorted(estimator_parameters(self.algo))}")
