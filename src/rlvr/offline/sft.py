"""Supervised fine-tuning on successful trajectories: the paper's SFT baseline (on expert trajectories) and its
rejection-sampling baseline (on the policy's own successful ones; STaR / RAFT / ReST-EM), with TRL's SFTTrainer.

Only the assistant's tokens are trained: the trajectories are tokenized by rlvr.trajectories (the same
action marks OREO uses) and handed to TRL as `input_ids` + `assistant_masks`, from which TRL builds the labels
(-100 elsewhere). Defaults follow the released OREO scripts (train_oreo_sft.sh: lr 2e-5, 3 epochs, batch 128,
micro-batch 8, max length 2048, cosine schedule); the paper's rejection sampling uses lr 5e-6 and 1 epoch (math).

With `use_lora = true` TRL trains a LoRA adapter (peft) on the frozen base instead, with the on-policy trainer's
option names (lora_rank, lora_alpha, ...; rlvr.trainer.config.causal_lm_lora), and final/ holds the adapter alone
(adapter_model.safetensors + adapter_config.json, a few MB): `--model final/` anywhere in rlvr serves and trains its
merge into the base that adapter_config.json names (rlvr.models.merged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from trl import SFTConfig, SFTTrainer

from rlvr.models import base_reference
from rlvr.offline.recipe import OfflineOptions, OfflineRecipe
from rlvr.trainer.config import causal_lm_lora
from rlvr.trainer.policy import load_policy
from rlvr.trajectories import Trajectory, successful, token_dataset


@dataclass
class SFTRecipeConfig(OfflineOptions, SFTConfig):
    trainer: ClassVar[str] = "rlvr.offline.sft:SFTRecipe"

    min_reward: float | None = field(
        default=1.0, metadata={"help": "Train on trajectories with reward >= min_reward (None: all of them)."})
    learning_rate: float = 2e-5
    num_train_epochs: float = 3.0
    micro_batch_size: int = 8
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.03
    logging_steps: float = 1
    save_steps: float = 50
    bf16: bool = False
    gradient_checkpointing: bool = False
    report_to: str | list[str] | None = "none"
    # LoRA: the fields and defaults of verifiers' RLConfig (the on-policy trainer's), off by default
    use_lora: bool = field(default=False, metadata={"help": "Train a LoRA adapter; final/ is then the adapter."})
    lora_rank: int = field(default=8, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (the update is scaled by alpha / rank)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | str | None = field(
        default=None, metadata={"help": "LoRA target modules (None: every linear layer but the LM head)."})
    lora_modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "Modules trained in full beside the adapter (saved with it)."})
    lora_use_rslora: bool = field(default=False, metadata={"help": "rsLoRA scaling (alpha / sqrt(rank))."})

    def __post_init__(self):
        self.offline_setup()
        super().__post_init__()


class SFTRecipe(OfflineRecipe, SFTTrainer):
    label = "sft"

    def __init__(self, model, trajectories: list[Trajectory], args: SFTRecipeConfig):
        policy, tokenizer = load_policy(model, bf16=args.bf16, lora=args.use_lora)
        # what the adapter names as its base: the name given (a registered one merges anywhere, offline)
        self.base_model = base_reference(model) if isinstance(model, str) else policy.config._name_or_path
        kept = successful(trajectories, args.min_reward)
        tokens, self.too_long = token_dataset(kept, tokenizer, args.max_length)
        dataset = tokens.rename_column("action_mask", "assistant_masks").select_columns(["input_ids",
                                                                                          "assistant_masks"])
        super().__init__(model=policy, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=causal_lm_lora(args) if args.use_lora else None)
        self.setup_offline(args, kept, len(dataset))

    def save_outputs(self, run_dir) -> None:
        if self.args.use_lora:  # peft records the resolved path (this machine's cache): name the base portably
            for config in self.model.peft_config.values():
                config.base_model_name_or_path = self.base_model
        self.save_final(self.model, run_dir / "final")
