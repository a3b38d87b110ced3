"""SFT replay: a supervised term on demonstrations beside the policy gradient, so that RL on new goals keeps what
the SFT stage taught.

The objective is InstructGPT's PPO-ptx (arXiv 2203.02155, Eq. 2: the RL objective + gamma * E_{x ~ D}[log pi(x)]),
as OpenRLHF's `ptx_coef` adds it to the actor loss; here D is the SFT stage's own trajectory dataset (its
successful trajectories, the assistant tokens only, as `rlvr.offline.sft` trains them) instead of pretraining text.
Why: from a warm-started agent, RL on other goals trades the goals SFT memorised for the new ones (issue 39's
12-step WebShop study: +0.24 on never-seen targets, -0.11 on memorised ones); a KL term to the SFT model only
restrains the drift on the RL batch's own states, the replay term pulls the policy back on the demonstrations.

Each optimizer step adds gamma x (mean negative log-likelihood over the assistant tokens of `sft_replay_batch`
demonstrations) to the loss. The NLL is at temperature 1 (the SFT stage's objective, not the sampler's tempered
distribution). Which demonstrations a step replays is a pure function of (seed, step, process), so a resumed run
replays what the uninterrupted one would.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.trainer.policy import token_logprobs


@dataclass(frozen=True)
class ReplaySet:
    """The demonstrations as token rows: input_ids and the mask of their assistant (trained) tokens."""

    source: str
    input_ids: list[list[int]]
    action_mask: list[list[int]]
    too_long: int  # demonstrations left out for being longer than max_seq_len

    def __len__(self) -> int:
        return len(self.input_ids)


def load_replay(path: str | Path, tokenizer, min_reward: float | None, max_length: int) -> ReplaySet:
    """The successful trajectories (reward >= min_reward) of a dataset `rlvr.trajectories` reads, tokenized
    as the SFT recipe tokenizes them. TrajectoryError (naming the path) when none is usable."""
    from rlvr.trajectories import TrajectoryError, load_trajectories, successful, token_dataset

    try:
        kept = successful(load_trajectories(path, "turn"), min_reward)
        tokens, too_long = token_dataset(kept, tokenizer, max_length)
    except TrajectoryError as err:
        raise TrajectoryError(f"sft_replay={path}: {err}") from err
    return ReplaySet(str(path), tokens["input_ids"], tokens["action_mask"], too_long)


def replay_indices(size: int, count: int, seed: int, step: int, process: int = 0) -> list[int]:
    """The demonstrations one process replays at one step: `count` distinct rows of `size` (all of them, shuffled,
    when count >= size), drawn from a generator seeded by (seed, step, process) alone."""
    rng = random.Random(f"sft-replay/{seed}/{step}/{process}")
    return rng.sample(range(size), min(count, size))


def replay_nll(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor,
               chunk_tokens: int) -> tuple[torch.Tensor, int]:
    """The summed negative log-likelihood of the assistant tokens (action_mask: 1 on each such token) of a padded
    micro-batch, and their number. Position p predicts token p + 1, as in the policy's loss."""
    trained = action_mask[:, 1:].bool()
    keep = trained.any(0).nonzero().squeeze(-1)
    if keep.numel() == 0:
        return input_ids.new_zeros((), dtype=torch.float32), 0
    logprobs, _ = token_logprobs(model, input_ids, attention_mask, keep, 1.0, chunk_tokens)
    mask = trained[:, keep]
    return -torch.where(mask, logprobs, 0.0).sum(), int(mask.sum())
