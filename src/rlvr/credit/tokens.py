"""From per-turn advantages to per-token ones, and the packed token view of one multi-turn rollout.

A rollout's turns are `TurnTokens` records (the token ids the server returned for each assistant turn), each with
the turn's advantage. When every turn's prompt ids start with the previous turn's prompt ids followed by its
completion ids, the whole rollout is one token sequence: the last prompt plus the last completion,
in which the tokens between two completions are the environment's (tool results, chat-template glue) and are
masked out of the loss. When a chat template re-renders the history (strips reasoning, re-tokenises a previous
turn differently), the prefix breaks and the trainer has to fall back to one sample per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def expand_to_tokens(turn_advantages: Sequence[float], turn_lengths: Sequence[int]) -> list[float]:
    """Repeat each turn's advantage over that turn's tokens: the per-token advantage of the original code, where
    every completion token of a segment carries its segment's advantage (mt_grpo_env_trainer.py, _assign_advantages)."""
    if len(turn_advantages) != len(turn_lengths):
        raise ValueError(
            f"expand_to_tokens: {len(turn_advantages)} advantages for {len(turn_lengths)} turns; give one per turn"
        )
    if any(n < 0 for n in turn_lengths):
        raise ValueError(f"expand_to_tokens: turn lengths must be >= 0, got {list(turn_lengths)}")
    return [a for a, n in zip(turn_advantages, turn_lengths, strict=True) for _ in range(n)]


@dataclass(frozen=True)
class TurnTokens:
    """The token ids the server returned for one assistant turn (verifiers' `step["tokens"]`).

    prompt_ids is everything the model saw before the turn (the first prompt, earlier turns and the environment's
    replies); completion_mask (1 = trained) and completion_logprobs (the sampler's) have one entry per completion id.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_logprobs: tuple[float, ...]
    completion_mask: tuple[int, ...]

    def __post_init__(self):
        n = len(self.completion_ids)
        if len(self.completion_mask) != n or len(self.completion_logprobs) != n:
            raise ValueError(
                f"TurnTokens: {n} completion ids but {len(self.completion_mask)} mask entries and "
                f"{len(self.completion_logprobs)} logprobs; give one of each per completion id"
            )


@dataclass(frozen=True)
class TokenView:
    """One rollout (or one turn) as one sequence. All lists have the same length.

    loss_mask is 1 on tokens the policy generated (and verifiers' completion_mask kept), 0 on prompt and
    environment tokens; advantages and logprobs are 0.0 where the mask is 0; turn_index is the assistant turn a
    token belongs to, -1 for prompt and environment tokens.
    """

    input_ids: list[int]
    loss_mask: list[int]
    advantages: list[float]
    logprobs: list[float]
    turn_index: list[int]


class NotPrefixConsistent(ValueError):
    """The turns of a rollout do not extend each other token by token; `reason` says where and why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def prefix_mismatch(turns: Sequence[TurnTokens | None]) -> str | None:
    """None when the rollout's turns form one token sequence, else the reason they do not."""
    if not turns:
        return "the rollout has no assistant turn"
    previous: list[int] | None = None
    for k, turn in enumerate(turns):
        if turn is None:
            return (
                f"turn {k} has no token ids; the rollout server must return them "
                "(vLLM: return_token_ids, which `rlvr serve` enables)"
            )
        prompt = list(turn.prompt_ids)
        if previous is not None:
            if len(prompt) < len(previous):
                return (
                    f"turn {k}: its prompt has {len(prompt)} tokens, fewer than the {len(previous)} of turn {k - 1}'s "
                    "prompt + completion: the history was truncated or re-rendered shorter"
                )
            for pos, (want, got) in enumerate(zip(previous, prompt, strict=False)):
                if want != got:
                    return (
                        f"turn {k}: prompt token {pos} is {got} where turn {k - 1}'s prompt + completion has {want}: "
                        "the chat template re-renders earlier turns (e.g. drops reasoning or re-tokenises the "
                        "previous completion), so this history is not one token sequence"
                    )
        previous = prompt + list(turn.completion_ids)
    return None


def build_token_view(turns: Sequence[TurnTokens], advantages: Sequence[float], first_turn: int = 0) -> TokenView:
    """Pack a prefix-consistent rollout into one sequence, environment tokens masked, per-token advantages.

    Turn k's advantage covers exactly the tokens turn k generated (`expand_to_tokens`, with environment tokens in
    between at 0). `first_turn` numbers the turns when a single turn is packed alone. Raises NotPrefixConsistent
    (with the reason) when the turns do not extend each other.
    """
    if len(advantages) != len(turns):
        raise ValueError(f"build_token_view: {len(advantages)} advantages for {len(turns)} turns; give one per turn")
    reason = prefix_mismatch(turns)
    if reason is not None:
        raise NotPrefixConsistent(reason)
    input_ids: list[int] = []
    loss_mask: list[int] = []
    token_advantages: list[float] = []
    logprobs: list[float] = []
    turn_index: list[int] = []
    for k, (turn, advantage) in enumerate(zip(turns, advantages, strict=True)):
        # The new part of this turn's prompt: the first prompt, or the environment's reply to the previous turn.
        env_part = list(turn.prompt_ids)[len(input_ids) :]
        mask = [int(m) for m in turn.completion_mask]
        input_ids += env_part + list(turn.completion_ids)
        loss_mask += [0] * len(env_part) + mask
        token_advantages += [0.0] * len(env_part) + [float(advantage) * m for m in mask]
        logprobs += [0.0] * len(env_part) + [float(lp) * m for lp, m in zip(turn.completion_logprobs, mask, strict=True)]
        turn_index += [-1] * len(env_part) + [first_turn + k if m else -1 for m in mask]
    return TokenView(input_ids, loss_mask, token_advantages, logprobs, turn_index)
