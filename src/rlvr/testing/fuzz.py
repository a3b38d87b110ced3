"""Drive an environment through complete rollouts of scripted nasty outputs and check that it survives them.

    report = check_environment(env, scripts, Bounds(reward=(0, 1.9), turn_reward=(-0.2, 0.7), turn_total=(0, 0.7)))

Each group of scripts shares one prompt (a GRPO group); every rollout runs through verifiers' own
`Environment.run_rollout` with its own `ScriptedClient`, and the group is scored by `env.rubric.score_group`, as
`Environment.run_group` does (which takes one client for the whole group, hence the replication). Checked, per
rollout: no exception escapes (one that does fails the check with the script that caused it); the rollout ends
without `state["error"]` (unless its type is allowed); generation and scoring stay under their time bounds (hang
detectors, generous on purpose: not speed assertions); the outcome, every turn reward and each rollout's sum of
turn rewards are finite and within the documented ranges; no reward function raised or timed out
(`reward_errors` = 0); every per-turn advantage of every estimator in `rlvr.credit.ESTIMATORS` is finite; and,
when `probe` scripts are given, they score the same before and after the fuzz (the environment stays usable).

    python -m rlvr.testing REPORTS.jsonl SUMMARY.json   # one row per environment from RLVR_FUZZ_REPORT lines
"""

from __future__ import annotations

import asyncio
import faulthandler
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import verifiers as vf
from verifiers.utils.async_utils import NullAsyncContext

from rlvr.credit import ESTIMATORS
from rlvr.io import append_jsonl
from rlvr.rollouts import assign_advantages, from_state
from rlvr.testing.client import Reply, ScriptedClient

PROFILE_VARIABLE = "RLVR_FUZZ"  # "long": the long profile; anything else or unset: the fast one
REPORT_VARIABLE = "RLVR_FUZZ_REPORT"  # a file: each check appends its report there as one JSON line
LONG_RANDOM_SCRIPTS = 2_000
LONG_HYPOTHESIS_EXAMPLES = 500


def long_profile() -> bool:
    """Whether the long fuzz profile was asked for (RLVR_FUZZ=long): thousands of rollouts instead of a few hundred."""
    return os.environ.get(PROFILE_VARIABLE, "").strip().lower() == "long"


def random_scripts(fast: int = 0) -> int:
    """How many seeded random scripts to add to the corpus scripts: `fast`, or 2,000 in the long profile."""
    return LONG_RANDOM_SCRIPTS if long_profile() else fast


def hypothesis_examples(fast: int = 20) -> int:
    return LONG_HYPOTHESIS_EXAMPLES if long_profile() else fast


@dataclass(frozen=True)
class Bounds:
    """What an environment documents about its rewards, and how long a rollout or a group's scoring may take.

    reward:     range of the rollout reward (state["reward"])
    turn_reward: range of one turn's reward (step["reward"])
    turn_total: range of a rollout's summed turn rewards (the cap that makes turn rewards unfarmable)
    rollout_s, scoring_s: hang detectors for one rollout and for scoring one group
    allowed_errors: names of vf.Error types a rollout may end with (e.g. "SandboxError")
    """

    reward: tuple[float, float]
    turn_reward: tuple[float, float]
    turn_total: tuple[float, float]
    rollout_s: float = 30.0
    scoring_s: float = 30.0
    allowed_errors: tuple[str, ...] = ()


@dataclass
class FuzzReport:
    """What a check saw, for the record (benchmarks/results, READMEs)."""

    environment: str
    rollouts: int = 0
    groups: int = 0
    max_rollout_s: float = 0.0
    max_scoring_s: float = 0.0
    reward_range: list[float] = field(default_factory=lambda: [math.inf, -math.inf])
    turn_reward_range: list[float] = field(default_factory=lambda: [math.inf, -math.inf])
    max_turn_total: float = -math.inf
    stop_conditions: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class FuzzFailure(AssertionError):
    """An environment broke a property; the message names the property and the script that broke it."""


def _fail(what: str, script: Sequence[Reply], detail: str = "") -> FuzzFailure:
    return FuzzFailure(f"{what}\n  script: {list(script)!r}" + (f"\n  {detail}" if detail else ""))


def _within(value: float, bounds: tuple[float, float]) -> bool:
    return math.isfinite(value) and bounds[0] - 1e-9 <= value <= bounds[1] + 1e-9


def _inputs(env: vf.Environment) -> list[dict[str, Any]]:
    dataset = env.eval_dataset if env.eval_dataset is not None else env.dataset
    if dataset is None or len(dataset) == 0:
        raise ValueError("check_environment: the environment has no dataset rows to build prompts from")
    return dataset.select(range(min(len(dataset), 8))).to_list()


async def _rollout(env: vf.Environment, row: dict, script: Sequence[Reply]) -> tuple[vf.State, float]:
    start = time.perf_counter()
    try:
        state = await env.run_rollout(dict(row), ScriptedClient(script), "scripted", {}, NullAsyncContext())
    except Exception as e:
        raise _fail(f"an exception escaped the rollout: {e!r}", script) from e
    return state, time.perf_counter() - start


async def _run_group(env: vf.Environment, row: dict, scripts: Sequence[Sequence[Reply]], bounds: Bounds):
    results = await asyncio.gather(*(_rollout(env, row, s) for s in scripts))
    states = [state for state, _ in results]
    start = time.perf_counter()
    try:
        await env.rubric.score_group(states, score_sem=NullAsyncContext())
    except Exception as e:
        raise _fail(f"an exception escaped scoring: {e!r}", scripts[0], f"group of {len(scripts)} scripts") from e
    return states, [seconds for _, seconds in results], time.perf_counter() - start


def _check_rollout(state: vf.State, script: Sequence[Reply], seconds: float, bounds: Bounds, report: FuzzReport):
    error = state.get("error")
    if error is not None:
        name = type(error).__name__
        report.errors[name] = report.errors.get(name, 0) + 1
        if name not in bounds.allowed_errors:
            raise _fail(f"the rollout ended with an error: {error!r}", script)
    if seconds > bounds.rollout_s:
        raise _fail(f"the rollout took {seconds:.1f} s, over its bound of {bounds.rollout_s:g} s", script)
    reward = state.get("reward")
    if reward is None or not _within(float(reward), bounds.reward):
        raise _fail(f"reward {reward!r} is outside the documented range {bounds.reward}", script)
    metrics = state.get("metrics") or {}
    if metrics.get("reward_errors", 0):
        raise _fail(f"{metrics['reward_errors']:g} reward-function call(s) raised or timed out", script)
    for name, value in metrics.items():
        if not math.isfinite(float(value)):
            raise _fail(f"metric {name} is {value!r}", script)
    turn_rewards = []
    for k, step in enumerate(state["trajectory"]):
        value = step.get("reward")
        if value is None or not _within(float(value), bounds.turn_reward):
            raise _fail(f"turn {k}'s reward {value!r} is outside the documented range {bounds.turn_reward}", script)
        turn_rewards.append(float(value))
    total = math.fsum(turn_rewards)
    if not _within(total, bounds.turn_total):
        raise _fail(f"the turn rewards sum to {total!r}, outside the documented cap {bounds.turn_total}", script,
                    f"turn rewards: {turn_rewards}")
    report.rollouts += 1
    report.max_rollout_s = max(report.max_rollout_s, seconds)
    report.reward_range = [min(report.reward_range[0], reward), max(report.reward_range[1], reward)]
    if turn_rewards:
        report.turn_reward_range = [min(report.turn_reward_range[0], *turn_rewards),
                                    max(report.turn_reward_range[1], *turn_rewards)]
    report.max_turn_total = max(report.max_turn_total, total)
    stop = str(state.get("stop_condition"))
    report.stop_conditions[stop] = report.stop_conditions.get(stop, 0) + 1


def _check_advantages(states: Sequence[vf.State], scripts: Sequence[Sequence[Reply]]) -> None:
    group = [from_state(s) for s in states]
    for name, spec in ESTIMATORS.items():
        if spec.anchor_states and any(r.state_keys is None for r in group if r.turns):
            continue  # an environment without anchor states cannot use this estimator (assign_advantages says so)
        for rollout, script in zip(assign_advantages(group, name, {}), scripts, strict=True):
            if not all(math.isfinite(a) for a in rollout.advantages or ()):
                raise _fail(f"estimator {name} gave a non-finite advantage: {rollout.advantages}", script)


def _signature(state: vf.State) -> tuple:
    """What a probe must reproduce: reward, turn rewards, and what the environment said."""
    replies = [m.get("content") for m in state.get("completion") or [] if isinstance(m, dict) and m.get("role") != "assistant"]
    return state.get("reward"), [s.get("reward") for s in state["trajectory"]], replies


async def _check(env, scripts, bounds, probe, group_size, report):
    rows = _inputs(env)
    probes_before = None
    if probe:
        probes_before = [_signature(s) for s in (await _run_group(env, rows[0], probe, bounds))[0]]
    watchdog = bounds.rollout_s + bounds.scoring_s + 60
    for g, start in enumerate(range(0, len(scripts), group_size)):
        group = scripts[start : start + group_size]
        faulthandler.dump_traceback_later(watchdog)  # a hang prints every thread's stack instead of dying silently
        try:
            states, seconds, scoring = await _run_group(env, rows[g % len(rows)], group, bounds)
        finally:
            faulthandler.cancel_dump_traceback_later()
        if scoring > bounds.scoring_s:
            raise _fail(f"scoring a group took {scoring:.1f} s, over its bound of {bounds.scoring_s:g} s", group[0],
                        f"the group's other scripts: {list(group[1:])!r}")
        report.max_scoring_s = max(report.max_scoring_s, scoring)
        report.groups += 1
        for state, script, s in zip(states, group, seconds, strict=True):
            _check_rollout(state, script, s, bounds, report)
        _check_advantages(states, group)
    if probe:
        after = [_signature(s) for s in (await _run_group(env, rows[0], probe, bounds))[0]]
        if after != probes_before:
            raise _fail("the probe scripts score differently after the fuzz: the environment's state was corrupted",
                        probe[0], f"before: {probes_before!r}\n  after: {after!r}")


def check_environment(
    env: vf.Environment,
    scripts: Sequence[Sequence[Reply]],
    bounds: Bounds,
    *,
    probe: Sequence[Sequence[Reply]] = (),
    group_size: int = 4,
    name: str | None = None,
) -> FuzzReport:
    """Run `scripts` through `env` in groups of `group_size` and check every property (module docstring); raises
    FuzzFailure on the first violation. `probe`: scripts whose scores must not change across the fuzz. Returns what
    was seen; with RLVR_FUZZ_REPORT=<file> the report is also appended to that file as one JSON line."""
    report = FuzzReport(environment=name or getattr(env, "env_id", None) or type(env).__name__)
    start = time.perf_counter()
    asyncio.run(_check(env, [list(s) for s in scripts], bounds, [list(p) for p in probe], group_size, report))
    report.seconds = round(time.perf_counter() - start, 2)
    if path := os.environ.get(REPORT_VARIABLE):
        append_jsonl(Path(path), asdict(report))
    return report


def summarize(reports: list[dict]) -> list[dict]:
    """The reports of one run merged per environment name (a hypothesis test appends one report per example)."""
    merged: dict[str, dict] = {}
    for r in reports:
        m = merged.setdefault(r["environment"], {
            "environment": r["environment"], "checks": 0, "rollouts": 0, "groups": 0, "seconds": 0.0,
            "max_rollout_s": 0.0, "max_scoring_s": 0.0, "reward_range": [math.inf, -math.inf],
            "turn_reward_range": [math.inf, -math.inf], "max_turn_total": -math.inf, "stop_conditions": {},
            "errors": {}})
        m["checks"] += 1
        for key in ("rollouts", "groups", "seconds"):
            m[key] += r[key]
        for key in ("max_rollout_s", "max_scoring_s", "max_turn_total"):
            m[key] = max(m[key], r[key])
        for key in ("reward_range", "turn_reward_range"):
            m[key] = [min(m[key][0], r[key][0]), max(m[key][1], r[key][1])]
        for key in ("stop_conditions", "errors"):
            for name, count in r[key].items():
                m[key][name] = m[key].get(name, 0) + count
    for m in merged.values():
        m["seconds"] = round(m["seconds"], 1)
    return sorted(merged.values(), key=lambda m: m["environment"])

