"""Supervised fine-tuning on successful trajectories: the paper's SFT baseline (on expert trajectories) and its
rejection-sampling baseline (on the policy's own successful ones; STaR / RAFT / ReST-EM), with TRL's SFTTrainer.

Only the assistant's tokens are trained: the trajectories are tokenized by rlvr.offline.trajectories (the same
action marks OREO uses) and handed to TRL as `input_ids` + `assistant_masks`, from which TRL builds the labels
(-100 elsewhere). Defaults follow the released OREO scripts (train_oreo_sft.sh: lr 2e-5, 3 epochs, batch 128,
micro-batch 8, max length 2048, cosine schedule); the paper's rejection sampling uses lr 5e-6 and 1 epoch (math).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from trl import SFTConfig, SFTTrainer

from rlvr.offline.recipe import OfflineOptions, OfflineRecipe, token_dataset
from rlvr.offline.trajectories import Trajectory, TrajectoryError
from rlvr.trainer.policy import load_policy


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

    def __post_init__(self):
        self.offline_setup()
        super().__post_init__()


def successful(trajectories: list[Trajectory], min_reward: float | None) -> list[Trajectory]:
    kept = [t for t in trajectories if min_reward is None or t.reward >= min_reward]
    if not kept:
        best = max(t.reward for t in trajectories)
        raise TrajectoryError(f"no trajectory has reward >= {min_reward} (the best has {best}): nothing to imitate. "
                              "Collect more, or lower min_reward")
    return kept


class SFTRecipe(OfflineRecipe, SFTTrainer):
    label = "sft"

    def __init__(self, model, trajectories: list[Trajectory], args: SFTRecipeConfig):
        policy, tokenizer = load_policy(model, bf16=args.bf16)
        kept = successful(trajectories, args.min_reward)
        tokens, self.too_long = token_dataset(kept, tokenizer, args.max_length)
        dataset = tokens.rename_column("action_mask", "assistant_masks").select_columns(["input_ids",
                                                                                          "assistant_masks"])
        super().__init__(model=policy, args=args, train_dataset=dataset, processing_class=tokenizer)
        self.setup_offline(args, kept, len(dataset))

    def save_outputs(self, run_dir) -> None:
        self.save_final(self.model, run_dir / "final")
