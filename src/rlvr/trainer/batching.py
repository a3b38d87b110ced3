"""From scored rollouts to training samples and micro-batches. Pure functions.

A `Rollout` record carries each turn's token ids (`TurnTokens`) and, after credit assignment, one advantage per turn.
When each turn's prompt ids extend the previous turn's prompt + completion ids, the whole rollout is one sequence:
the model's tokens are trained with their turn's advantage and the environment's tokens in between are masked. This
forwards every token once instead of once per later turn. When the history is not token-prefix-consistent (the chat
template re-tokenised a previous turn differently, or a turn has no tokens), each turn becomes its own sample, as in
verifiers' Orchestrator. The token view itself is rlvr.credit's (`build_token_view`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rlvr.credit import build_token_view, prefix_mismatch
from rlvr.rollouts import Rollout


@dataclass(frozen=True)
class Sample:
    """One training sequence. Index i of every list describes token i of `input_ids`."""

    input_ids: list[int]
    loss_mask: list[int]  # 1 where the policy generated the token and it is trained
    behavior_logprobs: list[float]  # the sampler's logprob of token i (0.0 where masked)
    advantages: list[float]  # the advantage of token i's turn (0.0 where masked)
    turn_index: list[int]  # the assistant turn token i belongs to (-1: prompt or environment token)
    # (rollout index in the batch, sample index in the rollout) when the trainer logs this sample's per-token credit
    # (token_log.py); keyword-only so that subclasses may add positional fields
    log_key: tuple[int, int] | None = field(default=None, kw_only=True)
    # the policy version that sampled token i (the oldest it may be: Turn.weight_versions); -1 where the token is
    # not the policy's or the server did not tag it
    versions: list[int] | None = field(default=None, kw_only=True)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class RolloutSamples:
    samples: list[Sample]
    packed: bool
    trajectory_tokens: int  # length of the rollout's full token history (last prompt + completion)
    reason: str | None = None  # why it was not packed


def _sample(turns, advantages, versions: list[int], first_turn: int = 0) -> Sample:
    view = build_token_view(turns, advantages, first_turn)
    return Sample(view.input_ids, view.loss_mask, view.logprobs, view.advantages, view.turn_index,
                  versions=[versions[k] if k >= 0 else -1 for k in view.turn_index])


def rollout_samples(rollout: Rollout, pack: bool = True) -> RolloutSamples:
    """One packed sample when the rollout is token-prefix-consistent, else one sample per turn with token ids."""
    if rollout.advantages is None:
        raise ValueError(f"rollout of example {rollout.example_id} has no advantages: assign credit before batching")
    turns = [t.tokens for t in rollout.turns]
    indexed = [(k, t) for k, t in enumerate(turns) if t is not None]
    if not indexed:
        return RolloutSamples([], packed=False, trajectory_tokens=0, reason="no turn has token ids")
    last = indexed[-1][1]
    trajectory_tokens = len(last.prompt_ids) + len(last.completion_ids)
    versions = [t.weight_versions[0] if t.weight_versions is not None else -1 for t in rollout.turns]
    reason = prefix_mismatch(turns) if pack else "packing disabled"
    if reason is None:
        sample = _sample(turns, rollout.advantages, versions)
        return RolloutSamples([sample], packed=True, trajectory_tokens=len(sample))
    # one turn is consistent
    samples = [_sample([t], [rollout.advantages[k]], versions, first_turn=k) for k, t in indexed]
    return RolloutSamples(samples, packed=False, trajectory_tokens=trajectory_tokens, reason=reason)


def trained_samples(rollouts: Sequence[Rollout], samples: Sequence[RolloutSamples],
                    mask_truncated: bool = False) -> list[Sample]:
    """The samples that enter the loss. With `mask_truncated` (DAPO's overlong filtering, arXiv 2503.14476,
    Sec. 3.4), a truncated rollout's samples leave the loss; the rollout still counted in its group's credit."""
    return [s for r, rs in zip(rollouts, samples, strict=True) if not (mask_truncated and r.truncated)
            for s in rs.samples]


def moving_samples(samples: Sequence[Sample]) -> list[Sample]:
    """The samples that can move the policy when the loss has no KL term (beta = 0): those with a trained token of
    non-zero advantage. Every policy loss in loss.py is a ratio term times the token's advantage, so a token of
    advantage 0 has loss 0 and gradient 0 whatever the ratio; leaving such samples out of the forward and backward
    passes changes no gradient as long as the loss keeps the whole batch's token count as its denominator. Logged
    samples (`log_key`) are no exception: token_credit.jsonl then has their advantages (0) and the sampler's logprobs
    but not the trainer's (null), which the update did not use. Keeping them would forward every sample of the small
    batches of a CPU run, where the default logs 2 groups and a batch often has 2."""
    return [s for s in samples if any(a != 0.0 for a, m in zip(s.advantages, s.loss_mask, strict=True) if m)]


def _micro_batches(samples: list[Sample], max_samples: int | None, max_tokens: int | None) -> list[list[Sample]]:
    """Consecutive samples (longest first) fill a micro-batch while it keeps at most `max_samples` samples and at
    most `max_tokens` padded tokens (samples x longest length). A sample longer than the budget goes alone."""
    batches: list[list[Sample]] = []
    for sample in sorted(samples, key=len, reverse=True):
        current = batches[-1] if batches else None
        fits = current is not None
        if fits and max_samples is not None:
            fits = len(current) < max_samples
        if fits and max_tokens is not None:
            fits = (len(current) + 1) * len(current[0]) <= max_tokens  # sorted: current[0] is the longest
        if fits:
            current.append(sample)
        else:
            batches.append([sample])
    return batches


def split_batch(
    samples: Sequence[Sample], num_processes: int, pad_token_id: int, *,
    max_samples: int | None = None, max_tokens: int | None = None,
) -> list[list[list[Sample]]]:
    """Split samples over processes (balanced by tokens), then into micro-batches by a sample count and/or a padded
    token budget. Returns [process][micro-batch][sample].

    Every process gets the same number of micro-batches (DDP all-reduces once per backward, so unequal counts would
    hang); a short process is topped up with a two-token (one target), fully masked filler sample.
    """
    if max_samples is None and max_tokens is None:
        raise ValueError("split_batch: give max_samples, max_tokens or both")
    loads = [0] * num_processes
    per_process: list[list[Sample]] = [[] for _ in range(num_processes)]
    # Longest-processing-time-first greedy: each sample goes to the least-loaded process.
    for sample in sorted(samples, key=len, reverse=True):
        rank = min(range(num_processes), key=lambda r: (loads[r], r))
        per_process[rank].append(sample)
        loads[rank] += len(sample)
    micro = [_micro_batches(p, max_samples, max_tokens) for p in per_process]
    count = max(max(len(m) for m in micro), 1)
    filler = Sample([pad_token_id] * 2, [0, 0], [0.0, 0.0], [0.0, 0.0], [-1, -1])
    return [m + [[filler]] * (count - len(m)) for m in micro]
