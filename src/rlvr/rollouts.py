"""Scored rollouts as explicit records.

verifiers keeps a rollout in a mutable `State` dict. rlvr reads each scored state once, right after its rubric
scored it, into a frozen `Rollout` and passes that record forward: to credit assignment (`assign_advantages`
returns new records carrying per-turn advantages), to batching (training samples), to metrics and run logs, to
evaluation summaries, and to saved trajectory datasets. Nothing downstream reads the state dict again.

Turn indices are 0-based in code (`Rollout.turns[k]`); names shown to people count turns from 1 (`turn/1/reward`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from rlvr.credit import TurnTokens, compute_advantages, get_estimator
from rlvr.serve.protocol import WEIGHT_VERSION_END_FIELD, WEIGHT_VERSION_FIELD


class CreditError(ValueError):
    """Credit cannot be assigned as asked (e.g. a turn-level estimator on an environment without turn rewards)."""


@dataclass(frozen=True)
class Turn:
    """One assistant turn of a scored rollout."""

    reward: float | None  # the turn's weighted reward (TurnRubric); None when the rubric gives no turn rewards
    reward_parts: Mapping[str, float]  # each turn function's value
    tool_result: bool  # the environment answered this turn with a tool result
    state_key: Hashable | None  # the anchor state the turn acted on (environments that have one)
    tokens: TurnTokens | None  # what the server returned; None when it returned no token ids
    # The weight versions (oldest, newest) that may have sampled the turn, as `rlvr serve` tags its answers
    # (rlvr.serve.versions; equal: exactly that version). None: the server does not tag. The trainer's rollout
    # client renumbers them as policy versions (RolloutClient.generate).
    weight_versions: tuple[int, int] | None = None


@dataclass(frozen=True)
class Rollout:
    """One scored rollout: what its rubric decided, the token ids of each turn, and (after credit) advantages."""

    example_id: int
    task: str
    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    answer: Any
    outcome: float  # state["reward"]: the rollout-level reward (TurnRubric: outcome functions only)
    metrics: Mapping[str, float]  # every reward function's value
    turns: tuple[Turn, ...]
    error: str | None = None
    truncated: bool = False
    advantages: tuple[float, ...] | None = field(default=None)  # one per turn, set by `assign_advantages`

    @property
    def turn_level(self) -> bool:
        """Whether the rubric scored each turn (TurnRubric) rather than only the whole rollout."""
        return bool(self.turns) and all(t.reward is not None for t in self.turns)

    @property
    def turn_rewards(self) -> list[float]:
        return [t.reward if t.reward is not None else 0.0 for t in self.turns]

    @property
    def turn_reward(self) -> float:
        """The rollout's summed turn rewards (the same number as TurnRubric's `turn_reward` metric)."""
        return math.fsum(self.turn_rewards)

    @property
    def first_result_turn(self) -> int | None:
        """Index of the first turn the environment answered with a tool result (MT-GRPO's split point)."""
        return next((k for k, t in enumerate(self.turns) if t.tool_result), None)

    @property
    def state_keys(self) -> list[Hashable] | None:
        keys = [t.state_key for t in self.turns]
        return keys if keys and all(k is not None for k in keys) else None


def _turn_tokens(step: Mapping[str, Any]) -> TurnTokens | None:
    tokens = step.get("tokens")
    if not tokens or tokens.get("prompt_ids") is None or tokens.get("completion_ids") is None:
        return None
    completion = tuple(int(t) for t in tokens["completion_ids"])
    mask = tokens.get("completion_mask") or [1] * len(completion)
    logprobs = tokens.get("completion_logprobs") or [0.0] * len(completion)
    return TurnTokens(tuple(int(t) for t in tokens["prompt_ids"]), completion,
                      tuple(float(x) for x in logprobs), tuple(int(m) for m in mask))


def _weight_versions(step: Mapping[str, Any]) -> tuple[int, int] | None:
    first = getattr(step.get("response"), WEIGHT_VERSION_FIELD, None)
    last = getattr(step.get("response"), WEIGHT_VERSION_END_FIELD, None)
    return None if first is None or last is None else (int(first), int(last))


def from_state(state: Mapping[str, Any]) -> Rollout:
    """Read a scored verifiers state once. Turn rewards come from TurnRubric's marks on each step
    (`step["extras"]["turn_rewards"]`); a plain verifiers rubric leaves none, and the turns have reward None."""
    turns = []
    for step in state.get("trajectory") or []:
        extras = step.get("extras") or {}
        scored = "turn_rewards" in extras
        turns.append(Turn(
            reward=float(step["reward"]) if scored else None,
            reward_parts=dict(extras.get("turn_rewards") or {}),
            tool_result=bool(extras.get("tool_result", False)),
            state_key=extras.get("state_key"),
            tokens=_turn_tokens(step),
            weight_versions=_weight_versions(step),
        ))
    error = state.get("error")
    return Rollout(
        example_id=int(state.get("example_id", 0)), task=str(state.get("task") or "default"),
        prompt=list(state.get("prompt") or []), completion=list(state.get("completion") or []),
        answer=state.get("answer", ""), outcome=float(state.get("reward") or 0.0),
        metrics={k: float(v) for k, v in (state.get("metrics") or {}).items()}, turns=tuple(turns),
        error=None if error is None else repr(error), truncated=bool(state.get("is_truncated", False)),
    )


def group_by_example(rollouts: Sequence[Rollout]) -> list[list[Rollout]]:
    """Groups of rollouts of the same prompt, in order of first appearance."""
    groups: dict[int, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[r.example_id].append(r)
    return list(groups.values())


def assign_advantages(group: Sequence[Rollout], estimator: str, params: Mapping[str, Any]) -> list[Rollout]:
    """The group's rollouts with one advantage per turn from `estimator` (rlvr.credit) run with `params`."""
    try:
        spec = get_estimator(estimator)  # registered, or yours by import path
    except ValueError as err:
        raise CreditError(str(err)) from err
    if spec.turn_level and not all(r.turn_level for r in group if r.turns):
        raise CreditError(
            f"estimator {estimator!r} assigns credit per turn and needs turn rewards, but this environment's rubric "
            "scores only whole rollouts. Use --algo grpo (outcome only), or score turns with "
            "rlvr.rubrics.TurnRubric(turn_rewards=[(function, weight), ...]) (a verifiers v1 environment: "
            "trace.info['turn_rewards'], docs/v1.md)"
        )
    keys = [r.state_keys for r in group]
    if spec.anchor_states and any(k is None for k, r in zip(keys, group, strict=True) if r.turns):
        raise CreditError(
            f"estimator {estimator!r} groups turns by anchor state, but this environment sets no "
            "step['extras']['state_key'] on its turns (a verifiers v1 environment: trace.info['state_keys']); "
            "choose another estimator, or have the environment record the state each turn acted on"
        )
    advantages = compute_advantages(
        estimator, [r.turn_rewards for r in group], [r.outcome for r in group],
        [r.first_result_turn for r in group],
        state_keys=[k or [] for k in keys] if spec.anchor_states else None, **params,
    )
    return [dataclasses.replace(r, advantages=tuple(a)) for r, a in zip(group, advantages, strict=True)]


def turn_name(k: int, what: str) -> str:
    """The metric name of turn k (0-based in code, counted from 1 for people): turn_name(0, "reward") = "turn/1/reward"."""
    return f"turn/{k + 1}/{what}"


_TURN_REWARD = re.compile(r"turn/\d+/reward")
# Scalars of a training log that are not rollout statistics (transformers' and the trainer's own).
TRAINER_SCALARS = frozenset({"loss", "grad_norm", "learning_rate", "epoch", "iteration", "step", "time"})


def is_rollout_statistic(name: str) -> bool:
    """Whether a logged name is one of `rollout_statistics`' (the rest of a training log is namespaced: train/,
    timing/, tokens/, batch/, sync/, time/, reward/std, turn/<k>/advantage_*)."""
    return bool(_TURN_REWARD.fullmatch(name)) or ("/" not in name and name not in TRAINER_SCALARS)


def _action(message: Mapping[str, Any]) -> str:
    """An assistant message as the action it took: its text (stripped) and its tool calls, if any."""
    content = message.get("content")
    text = content.strip() if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    calls = message.get("tool_calls")
    return text + json.dumps(calls, sort_keys=True, default=str) if calls else text


def repeated_turns(completion: Sequence[Mapping[str, Any]]) -> int:
    """Assistant turns that repeat the assistant turn before them verbatim: an agent stuck on one action. An
    environment answers a repeated invalid action with the same page, so a policy that takes it once tends to take
    it until the turn limit (seen on WebShop's held-out goals after RL: python -m vf_webshop.failures)."""
    actions = [_action(m) for m in completion if isinstance(m, Mapping) and m.get("role") == "assistant"]
    return sum(a == b for a, b in pairwise(actions))


def rollout_statistics(rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """Per-rollout values of every statistic, under the one naming scheme of training logs and evaluations:

    reward                 the rollout reward (TurnRubric: the outcome)
    <function name>        each reward function's value (a turn function: its sum over the rollout's turns),
                           turn_reward (the summed turn rewards), reward_errors (calls that raised or timed out)
    turn/<k>/reward        the reward of turn k (k = 1, 2, ...), over the rollouts that reached turn k
    turns                  assistant turns per rollout
    repeated_turns         assistant turns that repeat the one before them verbatim (`repeated_turns`)
    tool_result_fraction   fraction of the rollout's turns answered with a tool result (turn-level rubrics)
    errors                 1 when the rollout ended in an error
    A statistic that only some rollouts have (e.g. metrics of one environment of an EnvGroup) uses those rollouts.
    """
    stats: dict[str, list[float]] = {"reward": [r.outcome for r in rollouts]}
    for name in sorted({k for r in rollouts for k in r.metrics}):
        stats[name] = [r.metrics[name] for r in rollouts if name in r.metrics]
    turn_level = [r for r in rollouts if r.turn_level]
    for k in range(max((len(r.turns) for r in turn_level), default=0)):
        stats[turn_name(k, "reward")] = [r.turn_rewards[k] for r in turn_level if len(r.turns) > k]
    stats["turns"] = [float(len(r.turns)) for r in rollouts]
    stats["repeated_turns"] = [float(repeated_turns(r.completion)) for r in rollouts]
    if turn_level:
        stats["tool_result_fraction"] = [sum(t.tool_result for t in r.turns) / len(r.turns) for r in turn_level]
    stats["errors"] = [float(r.error is not None) for r in rollouts]
    return stats
