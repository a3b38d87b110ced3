"""vf-credit-suite: the LLM tier of rlvr's credit-assignment suite (issue 28).

Each diagnostic task of `rlvr.suite.tasks` (a delayed consequence, a misleading turn reward, a long horizon,
repeated states, long environment replies, policy-controlled stopping) as a verifiers multi-turn environment: the
model reads one short observation per turn and answers with one action word (the protocol: rlvr.suite.protocol,
shared with the v1 port; env.py adapts it to MultiTurnEnv). Scored by TurnRubric: the
task's per-turn reward on each turn, the task's outcome as the rollout reward. Recipe:
task (rlvr.suite.tasks) -> seeded rows -> CreditSuiteEnv + TurnRubric.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import verifiers as vf
from datasets import Dataset

from rlvr.rubrics import TurnRubric
from rlvr.suite.protocol import observation, parse_action
from rlvr.suite.tasks import BUILDERS, Task, get_task
from vf_credit_suite.env import EXTRAS, CreditSuiteEnv, is_result_reply

__all__ = ["CREDIT_DEFAULTS", "CreditSuiteEnv", "load_environment", "make_rubric", "observation", "parse_action",
           "rows"]

# What the environment says about credit (TurnRubric's `credit` defaults, merged into the trainer's estimator
# parameters): on early_stop the agent decides when to stop, so a turn index some rollouts never reach counts as 0
# in the per-turn statistics (verl RFC #7244) rather than being left out.
CREDIT_DEFAULTS: Mapping[str, Mapping[str, Any]] = {"early_stop": {"unreached": "zero"}}


def step_reward(step, **kwargs) -> float:
    """The task's turn reward for the turn (its transition's `Branch.reward`; 0 for an invalid reply)."""
    return float(step["extras"][EXTRAS]["reward"])


def valid_action(step, **kwargs) -> float:
    """1 when the reply named an allowed action (logged with weight 0)."""
    return float(step["extras"][EXTRAS]["valid"])


def outcome(state, **kwargs) -> float:
    """The task's outcome reward of the state the episode ended in."""
    return state[EXTRAS].outcome


def make_rubric(task: Task, credit: Mapping[str, Any] | None = None) -> TurnRubric:
    return TurnRubric(
        turn_rewards=[(step_reward, 1.0), (valid_action, 0.0)],
        outcome_rewards=[(outcome, 1.0)],
        is_tool_result=is_result_reply,
        credit=CREDIT_DEFAULTS.get(task.name, {}) if credit is None else credit,
    )


def rows(task: Task, n: int, seed: int, split: str) -> Dataset:
    """n rows of the task's first observation, each with its own transition seed (rows differ only by it; the
    rollouts of one row draw the same transitions for the same actions)."""
    rng = random.Random(f"vf-credit-suite/{task.name}/{split}/{seed}")
    return Dataset.from_list([
        {"question": observation(task, task.start), "answer": "",
         "info": json.dumps({"task": task.name, "seed": rng.getrandbits(32)})}
        for _ in range(n)
    ])


def load_environment(
    task: str = "delayed_consequence",
    num_examples: int = 256,
    num_eval_examples: int = 64,
    seed: int = 0,
    task_params: Mapping[str, Any] | None = None,
    credit: Mapping[str, Any] | None = None,
    **kwargs,
) -> vf.Environment:
    """task: a name of rlvr.suite.tasks.BUILDERS; task_params: its builder's arguments (default: the suite's
    instance); credit: TurnRubric credit defaults (None: CREDIT_DEFAULTS for the task, {} for none)."""
    if task not in BUILDERS:
        raise ValueError(f"vf-credit-suite: unknown task {task!r}; choose one of {sorted(BUILDERS)}")
    if num_examples < 1 or num_eval_examples < 1:
        raise ValueError(f"vf-credit-suite: num_examples={num_examples} and num_eval_examples={num_eval_examples} "
                         "must both be >= 1")
    spec = get_task(task, **dict(task_params or {}))
    return CreditSuiteEnv(spec, dataset=rows(spec, num_examples, seed, "train"),
                          eval_dataset=rows(spec, num_eval_examples, seed, "eval"),
                          rubric=make_rubric(spec, credit), **kwargs)
