"""TurnRubric: per-turn rewards on verifiers trajectory steps, outcome rewards on the rollout, and turn-level
advantages (rlvr.credit) on every step, where verifiers' trainer reads them (`step["advantage"]`).

Why a RubricGroup subclass. verifiers 0.1.9.post3 wraps an environment's rubric with monitor rubrics
(`Environment.add_rubric`, called by MultiTurnEnv and ToolEnv): a plain rubric becomes the first member of a new
`RubricGroup`, whose `score_group` runs every member in turn, so `state["advantage"]` ends up written by the last
member (a monitor, 0.0) while step values keep the first member's. When the environment's rubric already *is* a
RubricGroup, `add_rubric` appends the monitors to it instead. So TurnRubric is that group: the monitors land in
`self.rubrics`, TurnRubric scores them first (their rewards join the outcome, their metrics are kept) and then
writes the rewards and advantages itself, last. Extra rollout-level rubrics (e.g. a JudgeRubric) go in
`rubrics=[...]` for the same reason; wrapping a TurnRubric in another RubricGroup would let a later member
overwrite `state["advantage"]` (step values would survive).
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from typing import Any

import verifiers as vf
from verifiers.types import State
from verifiers.utils.async_utils import maybe_await

from rlvr.credit import ESTIMATORS, compute_advantages
from rlvr.rubrics.rewards import is_tool_result as default_is_tool_result

logger = logging.getLogger(__name__)


def _func_name(func: Callable) -> str:
    """A reward function's name; a functools.partial is named after the function it wraps."""
    if isinstance(func, functools.partial):
        return _func_name(func.func)
    name = getattr(func, "__name__", None)
    if not name:
        raise ValueError(f"reward function {func!r} has no __name__; give it one (metrics are keyed by it)")
    return name


def _named(func: Callable) -> Callable:
    """verifiers keys metrics by `func.__name__`, which a partial lacks: give it its wrapped function's name."""
    if isinstance(func, functools.partial) and not hasattr(func, "__name__"):
        func.__name__ = _func_name(func)  # type: ignore[attr-defined]
    return func


class TurnRubric(vf.RubricGroup):
    """Turn reward functions + outcome reward functions + an advantage estimator.

    turn function:    f(turn, env_reply, answer, state, **kw) -> float, once per assistant turn, with that turn's
                      assistant message(s) and the environment's reply to it ([] after the last turn unless the
                      environment sent a final reply). Also available by name: prompt, completion, task, info,
                      parser, turn_index, step.
    outcome function: verifiers' usual signature, e.g. g(completion, answer, state, parser, **kw) (sync or async).
    is_tool_result(env_reply) -> bool decides which turn got the first tool result (MT-GRPO's split point).

    Writes: step["reward"] = sum_j w_j f_j(turn), step["extras"]["turn_rewards"] = {f_j name: value},
    step["extras"]["tool_result"]; state["reward"] = outcome (own outcome functions + other rubrics in the group);
    state["metrics"]; step["advantage"] from the estimator, and state["advantage"] = the last turn's advantage.
    With estimator="turn_return", steps whose extras carry "state_key" (set by the environment) are grouped by
    anchor state (GiGPO).
    """

    def __init__(
        self,
        turn_funcs: Sequence[Callable] | None = None,
        turn_weights: Sequence[float] | None = None,
        outcome_funcs: Sequence[Callable] | None = None,
        outcome_weights: Sequence[float] | None = None,
        estimator: str = "mt_grpo",
        estimator_params: dict[str, Any] | None = None,
        parser: vf.Parser | None = None,
        is_tool_result: Callable[[Any], bool] | None = None,
        rubrics: Sequence[vf.Rubric] | None = None,
    ):
        # vf.Rubric.__init__ rather than RubricGroup.__init__, which refuses an empty group: this group starts with
        # only the rubrics given and fills up with the monitors the environment appends.
        vf.Rubric.__init__(
            self,
            funcs=[_named(f) for f in outcome_funcs or []],
            weights=list(outcome_weights) if outcome_weights is not None else None,
            parser=parser,
        )
        self.rubrics = list(rubrics or [])
        self.turn_funcs = list(turn_funcs or [])
        self.turn_weights = list(turn_weights) if turn_weights is not None else [1.0] * len(self.turn_funcs)
        if len(self.turn_weights) != len(self.turn_funcs):
            raise ValueError(
                f"TurnRubric: {len(self.turn_weights)} turn_weights for {len(self.turn_funcs)} turn_funcs; "
                "give one weight per turn function (or none for all 1.0)"
            )
        for f in [*self.turn_funcs, *self.funcs]:
            if not callable(f):
                raise TypeError(f"TurnRubric: reward function {f!r} is not callable")
        self.turn_names = [_func_name(f) for f in self.turn_funcs]
        if estimator not in ESTIMATORS:
            raise ValueError(f"TurnRubric: unknown estimator {estimator!r}; choose one of {sorted(ESTIMATORS)}")
        self.estimator = estimator
        self.estimator_params = dict(estimator_params or {})
        # fail at construction, not mid-training, on a misspelt estimator parameter
        compute_advantages(estimator, [[0.0]], [0.0], [None], **self.estimator_params)
        self.is_tool_result = is_tool_result or default_is_tool_result

    # A RubricGroup delegates these to its first member; TurnRubric keeps its own functions.
    def add_reward_func(self, func: Callable, weight: float = 1.0):
        vf.Rubric.add_reward_func(self, _named(func), weight)

    def add_metric(self, func: Callable, weight: float = 0.0):
        vf.Rubric.add_metric(self, _named(func), weight)

    def add_class_object(self, name: str, obj: Any):
        vf.Rubric.add_class_object(self, name, obj)

    def _get_reward_func_names(self) -> list[str]:
        return [*self.turn_names, "turn_reward", *vf.Rubric._get_reward_func_names(self), *super()._get_reward_func_names()]

    def _get_reward_funcs(self) -> list:
        return [*vf.Rubric._get_reward_funcs(self), *super()._get_reward_funcs()]

    def _get_reward_weights(self) -> list[float]:
        return [*vf.Rubric._get_reward_weights(self), *super()._get_reward_weights()]

    async def score_rollout(self, state: State, score_sem: AsyncContextManager):
        """A rollout scored alone is a group of one: rewards as usual, every advantage 0."""
        await self.score_group([state], score_sem=score_sem)

    async def score_group(self, states: list[State], score_sem: AsyncContextManager):
        if not states:
            return
        # Own outcome functions with verifiers' own semantics (individual and group functions, error handling).
        # It also fills unset step values with rollout-level ones; they are all overwritten below.
        await vf.Rubric.score_group(self, states, score_sem=score_sem)
        outcome = [float(s["reward"]) for s in states]
        metrics = [dict(s["metrics"] or {}) for s in states]
        for rubric in self.rubrics:
            await rubric.score_group(states, score_sem=score_sem)
            for i, s in enumerate(states):
                outcome[i] += float(s.get("reward") or 0.0)
                for key, value in (s.get("metrics") or {}).items():
                    metrics[i][key] = metrics[i].get(key, 0.0) + value

        start = time.time()
        first_results = []
        for i, state in enumerate(states):
            first_results.append(await self._score_turns(state, metrics[i], score_sem))
        turn_rewards = [[step["reward"] for step in s["trajectory"]] for s in states]
        advantages = compute_advantages(
            self.estimator,
            turn_rewards,
            outcome,
            first_results,
            state_keys=self._state_keys(states),
            **self.estimator_params,
        )
        scoring_ms = (time.time() - start) * 1000
        for state, reward, m, adv in zip(states, outcome, metrics, advantages, strict=True):
            for step, a in zip(state["trajectory"], adv, strict=True):
                step["advantage"] = a
            state["reward"] = reward
            state["advantage"] = adv[-1] if adv else 0.0
            state["metrics"] = m
            state["timing"]["scoring_ms"] = state["timing"].get("scoring_ms", 0.0) + scoring_ms
            state["timing"]["total_ms"] = state["timing"].get("total_ms", 0.0) + scoring_ms

    async def _score_turns(self, state: State, metrics: dict[str, float], score_sem) -> int | None:
        """Score every assistant turn of one rollout; returns the index of the first turn answered by a tool result."""
        steps = state["trajectory"]
        first_result = None
        totals = dict.fromkeys(self.turn_names, 0.0)
        for k, step in enumerate(steps):
            env_reply = _env_reply(state, k)
            values = {}
            for func, name in zip(self.turn_funcs, self.turn_names, strict=True):
                values[name] = await self._call_turn_func(func, name, state, step, k, env_reply, score_sem)
                totals[name] += values[name]
            step["reward"] = sum(w * values[n] for n, w in zip(self.turn_names, self.turn_weights, strict=True))
            extras = step.get("extras") or {}
            extras["turn_rewards"] = values
            extras["tool_result"] = bool(self.is_tool_result(env_reply))
            step["extras"] = extras
            if first_result is None and extras["tool_result"]:
                first_result = k
        metrics.update(totals)
        metrics["turn_reward"] = sum(step["reward"] for step in steps)
        metrics["first_result_turn"] = -1.0 if first_result is None else float(first_result)
        return first_result

    async def _call_turn_func(self, func, name, state, step, k, env_reply, score_sem) -> float:
        available = dict(
            turn=step["completion"],
            env_reply=env_reply,
            answer=state.get("answer", ""),
            state=state,
            prompt=state["prompt"],
            completion=state.get("completion"),
            task=state.get("task"),
            info=state.get("info", {}),
            turn_index=k,
            step=step,
            **self.class_objects,
        )
        params = inspect.signature(func).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            available = {key: v for key, v in available.items() if key in params}
        # As verifiers' Rubric does for its reward functions: a function that raises scores 0.0 and is logged,
        # so one bad rollout does not abort the whole generate() call.
        try:
            async with score_sem:
                return float(await maybe_await(func, **available))
        except Exception as e:
            logger.error(f"turn reward function {name} failed on turn {k} of example {state.get('example_id')}: {e!r}")
            return 0.0

    def _state_keys(self, states: list[State]) -> list[list[Any]] | None:
        """Anchor-state keys (step["extras"]["state_key"]) for GiGPO grouping: used by "turn_return" when every step
        has one; the other estimators have no anchor grouping, so environments may set keys regardless."""
        if self.estimator != "turn_return":
            return None
        keys = [[(step.get("extras") or {}).get("state_key") for step in s["trajectory"]] for s in states]
        if all(key is not None for row in keys for key in row) and any(keys):
            return keys
        return None


def _env_reply(state: State, k: int):
    """The environment's messages between assistant turn k and turn k+1: the tail of step k+1's prompt after step k's
    prompt and completion (MultiTurnEnv.get_prompt_messages builds it that way); after the last turn, the
    environment's final reply if it sent one."""
    steps = state["trajectory"]
    step = steps[k]
    if k + 1 == len(steps):
        return state.get("final_env_response") or ([] if isinstance(step["completion"], list) else "")
    history = step["prompt"] + step["completion"]
    following = steps[k + 1]["prompt"]
    if following[: len(history)] != history:
        raise ValueError(
            f"TurnRubric: turn {k + 1}'s prompt does not start with turn {k}'s prompt and completion "
            f"(example {state.get('example_id')}), so the environment's reply to turn {k} cannot be located. "
            "Environments that rewrite the history (custom get_prompt_messages) need a TurnRubric subclass "
            "that overrides how turns are read."
        )
    return following[len(history) :]
