"""The credit suite's tasks as a verifiers v1 Taskset: one Task per seeded row, scored from the trace's replies.

vf-credit-suite's parts and their v1 counterparts (docs/v1.md, "Moving an rlvr environment to v1"):
  - a dataset row {question, info: {task, seed}}  -> CreditSuiteData (prompt, system_prompt, suite_task, seed), the
    seeds drawn as vf-credit-suite draws its train rows, so task i here is row i there;
  - TurnRubric's turn reward `step_reward`         -> `finalize` writing trace.info["turn_rewards"] (one value per
    sampled assistant node, the convention rlvr.v1.convert reads), and trace.info["state_keys"] (GiGPO);
  - its outcome reward `outcome` (weight 1)        -> `@vf.reward(weight=1.0) outcome`;
  - `valid_action` (a weight-0 turn reward, logged) -> `@vf.metric valid_action`, the number of valid turns.

The protocol is rlvr.suite.protocol, vf-credit-suite's own. Its `Play` is used twice: live by the harness (each
reply gives the next observation) and again by the scoring here, which replays the trace's replies from the task's
seed, so rewards depend only on what the model said.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.types import content_text

from rlvr.suite.protocol import Play, observation, replay, system_prompt
from rlvr.suite.tasks import BUILDERS, Task, get_task


class CreditSuiteData(vf.TaskData):
    suite_task: str
    """A task of rlvr.suite.tasks.BUILDERS."""
    task_params: dict[str, Any] = {}
    """Its builder's arguments ({}: the suite's instance)."""
    seed: int
    """The seed of the episode's stochastic transitions."""


def spec(data: CreditSuiteData) -> Task:
    return get_task(data.suite_task, **data.task_params)


def trace_replies(trace: vf.Trace) -> list[str]:
    """The text of every sampled assistant node, in node order (the harness runs one branch)."""
    return [content_text(node.message.content) or "" for node in trace.nodes if node.sampled]


class CreditSuiteTask(vf.Task[CreditSuiteData]):
    def played(self, trace: vf.Trace) -> Play:
        return replay(spec(self.data), self.data.seed, trace_replies(trace))

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        play = self.played(trace)
        trace.info["turn_rewards"] = [t.reward for t in play.turns]
        trace.info["state_keys"] = [t.state for t in play.turns]
        # the environment's answer to the last turn, which no model call carries
        trace.info["final_reply"] = play.turns[-1].reply if play.turns else None

    @vf.reward(weight=1.0)
    async def outcome(self, trace: vf.Trace) -> float:
        return self.played(trace).outcome

    @vf.metric
    async def valid_action(self, trace: vf.Trace) -> float:
        return float(sum(t.action is not None for t in self.played(trace).turns))


class CreditSuiteConfig(vf.TasksetConfig):
    suite_task: str = "delayed_consequence"
    """A task of rlvr.suite.tasks.BUILDERS (vf-credit-suite's `task`; v1's `task` is every task's TaskConfig)."""
    task_params: dict[str, Any] = {}
    """The task builder's arguments, e.g. {"turns": 8} for long_horizon ({}: the suite's instance)."""
    num_tasks: int = 256
    """Rows (tasks), each with its own transition seed."""
    seed: int = 0
    """The rows' transition seeds."""
    split: str = "train"
    """Which of vf-credit-suite's splits the seeds follow: train or eval."""


class CreditSuiteTaskset(vf.Taskset[CreditSuiteTask, CreditSuiteConfig]):
    def load(self) -> list[CreditSuiteTask]:
        c = self.config
        if c.suite_task not in BUILDERS:
            raise ValueError(f"v1-credit-suite: unknown suite_task {c.suite_task!r}; choose one of {sorted(BUILDERS)}")
        if c.num_tasks < 1 or c.split not in ("train", "eval"):
            raise ValueError(f"v1-credit-suite: num_tasks={c.num_tasks} must be >= 1 and split={c.split!r} one of "
                             "train, eval")
        task = get_task(c.suite_task, **c.task_params)
        # vf-credit-suite's row seeds (its rows() in vf_credit_suite/__init__.py), so both sides play the same rows
        rng = random.Random(f"vf-credit-suite/{task.name}/{c.split}/{c.seed}")
        return [CreditSuiteTask(CreditSuiteData(
            id=f"{task.name}-{c.split}-{i}", prompt=observation(task, task.start),
            system_prompt=system_prompt(task), suite_task=c.suite_task,
            task_params=dict(c.task_params), seed=rng.getrandbits(32)), c.task) for i in range(c.num_tasks)]
