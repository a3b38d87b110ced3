"""From per-turn advantages to per-token ones, and the packed token view of one multi-turn rollout.

A rollout's steps are verifiers trajectory steps (dicts): step["tokens"] holds the token ids the server returned
for that turn ("prompt_ids", "completion_ids", optional "completion_mask" and "completion_logprobs") and
step["advantage"] the turn's advantage. When every step's prompt ids start with the previous step's prompt ids
followed by its completion ids, the whole rollout is one token sequence: the last prompt plus the last completion,
in which the tokens between two completions are the environment's (tool results, chat-template glue) and are
masked out of the loss. When a chat template re-renders the history (strips reasoning, re-tokenises a previous
turn differently), the prefix breaks and the trainer has to fall back to one sample per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
class TokenView:
    """One rollout as one sequence. All lists have the same length.

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
    """The steps of a rollout do not extend each other token by token; `reason` says where and why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def prefix_mismatch(steps: Sequence[Mapping]) -> str | None:
    """None when the rollout's steps form one token sequence, else the reason they do not."""
    if not steps:
        return "the rollout has no steps (no assistant turn was generated)"
    previous: list[int] | None = None
    for k, step in enumerate(steps):
        tokens = step.get("tokens")
        if not tokens or tokens.get("prompt_ids") is None or tokens.get("completion_ids") is None:
            return (
                f"step {k} has no token ids; the rollout server must return them "
                "(vLLM: return_token_ids, which `rlvr serve` enables)"
            )
        prompt = list(tokens["prompt_ids"])
        if previous is not None:
            if len(prompt) < len(previous):
                return (
                    f"step {k}: its prompt has {len(prompt)} tokens, fewer than the {len(previous)} of step {k - 1}'s "
                    "prompt + completion: the history was truncated or re-rendered shorter"
                )
            for pos, (want, got) in enumerate(zip(previous, prompt, strict=False)):
                if want != got:
                    return (
                        f"step {k}: prompt token {pos} is {got} where step {k - 1}'s prompt + completion has {want}: "
                        "the chat template re-renders earlier turns (e.g. drops reasoning or re-tokenises the "
                        "previous completion), so this history is not one token sequence"
                    )
        previous = prompt + list(tokens["completion_ids"])
    return None


def build_token_view(steps: Sequence[Mapping]) -> TokenView:
    """Pack a prefix-consistent rollout into one sequence with env tokens masked and per-token advantages.

    Raises NotPrefixConsistent (with the reason) when the steps do not extend each other, and ValueError when a
    step has no advantage yet (score the group with TurnRubric first).
    """
    reason = prefix_mismatch(steps)
    if reason is not None:
        raise NotPrefixConsistent(reason)
    input_ids: list[int] = []
    loss_mask: list[int] = []
    advantages: list[float] = []
    logprobs: list[float] = []
    turn_index: list[int] = []
    for k, step in enumerate(steps):
        if step.get("advantage") is None:
            raise ValueError(f"build_token_view: step {k} has no advantage; score the group (TurnRubric) first")
        tokens = step["tokens"]
        completion = list(tokens["completion_ids"])
        mask = list(tokens.get("completion_mask") or [1] * len(completion))
        lps = list(tokens.get("completion_logprobs") or [0.0] * len(completion))
        if len(mask) != len(completion) or len(lps) != len(completion):
            raise ValueError(
                f"build_token_view: step {k} has {len(completion)} completion ids but {len(mask)} mask entries "
                f"and {len(lps)} logprobs"
            )
        # The new part of this step's prompt: the first prompt, or the environment's reply to the previous turn.
        env_part = list(tokens["prompt_ids"])[len(input_ids) :]
        input_ids += env_part + completion
        loss_mask += [0] * len(env_part) + [int(m) for m in mask]
        advantages += [0.0] * len(env_part) + [float(step["advantage"]) * int(m) for m in mask]
        logprobs += [0.0] * len(env_part) + [float(lp) * int(m) for lp, m in zip(lps, mask, strict=True)]
        turn_index += [-1] * len(env_part) + [k if m else -1 for m in mask]
    return TokenView(input_ids, loss_mask, advantages, logprobs, turn_index)
