"""CreditSuiteEnv: one task of `rlvr.suite.tasks` played turn by turn, the model saying one action word per turn.

The protocol (observations, action parsing, the invalid-reply rule) is `rlvr.suite.protocol`, which v1-credit-suite
(environments_v1/v1_credit_suite) plays too; this module adapts it to verifiers 0.1.9's MultiTurnEnv.

Each assistant turn is executed as soon as it is generated (`add_trajectory_step`, as vf-webshop does), so the
step records the state it acted on: step["extras"]["state_key"] = the task state's key (GiGPO's anchor state, the
same keys as the tabular tier; on the lock tasks the key tells door k from its dead-end twin, whose text is the
same), step["extras"]["credit_suite"] = {action, valid, reward, result, next_state}.
"""

from __future__ import annotations

import verifiers as vf
from verifiers.types import Messages, State, TrajectoryStep

from rlvr.suite.protocol import Play, is_result, system_prompt
from rlvr.suite.tasks import Task

EXTRAS = "credit_suite"


def _content(message) -> str | None:
    """The text of a message list's last message (or of a message, or a string); None when it has none."""
    message = message[-1] if isinstance(message, list) and message else message
    content = message.get("content") if isinstance(message, dict) else message
    return content if isinstance(content, str) else None


def is_result_reply(env_reply) -> bool:
    """Whether the environment's reply to a turn was a tool result (TurnRubric's is_tool_result, which decides
    MT-GRPO's first tool-result turn)."""
    content = _content(env_reply)
    return content is not None and is_result(content)


class CreditSuiteEnv(vf.MultiTurnEnv):
    def __init__(self, task: Task, **kwargs):
        kwargs.setdefault("system_prompt", system_prompt(task))
        super().__init__(max_turns=task.turns, **kwargs)
        self.task = task

    async def setup_state(self, state: State) -> State:
        # the transition draws are seeded by the dataset row, as rlvr.suite.tasks.rollout(task, ..., seed) seeds them
        state[EXTRAS] = Play(self.task, int(state["info"]["seed"]))
        return state

    async def add_trajectory_step(self, state: State, trajectory_step: TrajectoryStep):
        turn = state[EXTRAS].act(_content(trajectory_step["completion"]))
        trajectory_step["extras"]["state_key"] = turn.state
        trajectory_step["extras"][EXTRAS] = {"action": turn.action, "valid": turn.action is not None,
                                             "reward": turn.reward, "result": turn.result,
                                             "next_state": turn.next_state}
        if turn.done:
            state["final_env_response"] = [{"role": "user", "content": turn.reply}]
        await super().add_trajectory_step(state, trajectory_step)

    async def env_response(self, messages: Messages, state: State, **kwargs) -> Messages:
        return [{"role": "user", "content": state[EXTRAS].turns[-1].reply}]
