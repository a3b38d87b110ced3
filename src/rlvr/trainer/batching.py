"""From scored rollouts to training samples: packed trajectories, or one sample per step. Pure functions.

A rollout's steps carry the server's token ids (`step["tokens"]`: prompt_ids, completion_ids,
completion_logprobs) and the advantage its rubric wrote (`step["advantage"]`). When each step's prompt ids
extend the previous step's prompt + completion ids, the whole rollout is one sequence: the model's tokens are
trained with their turn's advantage and the environment's tokens in between are masked. This forwards every
token once instead of once per later turn. When the history is not token-prefix-consistent (the chat template
re-tokenised a previous turn differently, or a step has no tokens), each step becomes its own sample, as in
verifiers' Orchestrator. The token view itself is rlvr.credit's (`build_token_view`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.credit import build_token_view, prefix_mismatch


@dataclass(frozen=True)
class Sample:
    """One training sequence. Index i of every list describes token i of `input_ids`."""

    input_ids: list[int]
    loss_mask: list[int]  # 1 where the policy generated the token and it is trained
    behavior_logprobs: list[float]  # the sampler's logprob of token i (0.0 where masked)
    advantages: list[float]  # the advantage of token i's turn (0.0 where masked)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class RolloutSamples:
    samples: list[Sample]
    packed: bool
    trajectory_tokens: int  # length of the rollout's full token history (last prompt + completion)
    reason: str | None = None  # why it was not packed


def _sample(steps: Sequence[dict[str, Any]]) -> Sample:
    view = build_token_view(steps)
    return Sample(view.input_ids, view.loss_mask, view.logprobs, view.advantages)


def rollout_samples(steps: Sequence[dict[str, Any]], pack: bool = True) -> RolloutSamples:
    """One packed sample when the rollout is token-prefix-consistent (rlvr.credit.build_token_view), else one
    sample per step that has token ids."""
    with_tokens = [s for s in steps if s.get("tokens") is not None]
    if not with_tokens:
        return RolloutSamples([], packed=False, trajectory_tokens=0, reason="no step has token ids")
    last = with_tokens[-1]["tokens"]
    trajectory_tokens = len(last["prompt_ids"]) + len(last["completion_ids"])
    reason = prefix_mismatch(steps) if pack else "packing disabled"
    if reason is None:
        sample = _sample(steps)
        return RolloutSamples([sample], packed=True, trajectory_tokens=len(sample))
    samples = [_sample([step]) for step in with_tokens]  # one step alone is always consistent
    return RolloutSamples(samples, packed=False, trajectory_tokens=trajectory_tokens, reason=reason)


def distribute(
    samples: Sequence[Sample], num_processes: int, micro_batch_size: int, pad_token_id: int
) -> list[list[list[Sample]]]:
    """Split samples over processes (balanced by tokens), then into micro-batches of similar lengths.

    Every process gets the same number of micro-batches (DDP all-reduces once per backward, so unequal
    counts would hang); a short process is topped up with a two-token (one target), fully masked filler sample.
    """
    loads = [0] * num_processes
    per_process: list[list[Sample]] = [[] for _ in range(num_processes)]
    # Longest-processing-time-first greedy: each sample goes to the least-loaded process.
    for sample in sorted(samples, key=len, reverse=True):
        rank = min(range(num_processes), key=lambda r: (loads[r], r))
        per_process[rank].append(sample)
        loads[rank] += len(sample)
    counts = [-(-len(p) // micro_batch_size) for p in per_process]
    num_micro = max(max(counts), 1)
    filler = Sample([pad_token_id] * 2, [0, 0], [0.0, 0.0], [0.0, 0.0])
    result = []
    for proc_samples in per_process:
        micro = [proc_samples[i: i + micro_batch_size] for i in range(0, len(proc_samples), micro_batch_size)]
        micro += [[filler]] * (num_micro - len(micro))
        result.append(micro)
    return result
