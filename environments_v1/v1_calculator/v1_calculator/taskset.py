"""Integer arithmetic with a calculator tool: tasks, the outcome reward and the per-turn rewards.

A task is an expression of 2-3 one- or two-digit operands ("What is 37 + 58 - 12?"). The harness
(`v1_calculator.harness`) gives the model a `calculate` tool; the model may call it, then answers with
`Answer: <number>`. The outcome is `correct_answer` (a `@vf.reward`); each assistant turn also gets a reward of
its own, written by `finalize` to `trace.info["turn_rewards"]` (one value per sampled message node, in node
order: the per-turn convention rlvr's bridge reads, rlvr.v1.convert): a tool call that evaluates scores 1, one
that does not 0; a final answer scores 1 when correct, 0 otherwise.
"""

from __future__ import annotations

import json
import random
import re

import verifiers.v1 as vf
from verifiers.v1.types import content_text

from v1_calculator.tools import CalculatorError, evaluate

PROMPT = ("What is {expression}? You may call the calculate tool. "
          "Finish with a line 'Answer: <number>'.")
ANSWER = re.compile(r"Answer:\s*(-?\d+)")
NUMBER = re.compile(r"-?\d+")


class CalculatorData(vf.TaskData):
    expression: str
    answer: int


def final_answer(text: str) -> int | None:
    """The number after the last `Answer:`, else the last number of the text, else None."""
    found = ANSWER.findall(text) or NUMBER.findall(text)
    return int(found[-1]) if found else None


def turn_reward(message, answer: int) -> float:
    """A tool-call turn: 1 when every call is `calculate` on an expression that evaluates; a text turn: 1 when its
    final answer is right."""
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        for call in calls:
            try:
                evaluate(json.loads(call.arguments or "{}").get("expression", ""))
            except (CalculatorError, ValueError, AttributeError):
                return 0.0
            if call.name != "calculate":
                return 0.0
        return 1.0
    return 1.0 if final_answer(content_text(message.content) or "") == answer else 0.0


class CalculatorTask(vf.Task[CalculatorData]):
    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        trace.info["turn_rewards"] = [turn_reward(node.message, self.data.answer)
                                      for node in trace.nodes if node.sampled]

    @vf.reward(weight=1.0)
    async def correct_answer(self, trace: vf.Trace) -> float:
        return 1.0 if final_answer(trace.last_reply or "") == self.data.answer else 0.0


class CalculatorConfig(vf.TasksetConfig):
    num_tasks: int = 64
    """How many tasks to build."""
    seed: int = 0
    """The seed of the expressions."""
    max_terms: int = 3
    """Operands per expression (2 to max_terms)."""
    max_operand: int = 99
    """Operands are 1 to max_operand (e.g. 9: sums a 135M model gets right now and then, so groups disagree)."""


class CalculatorTaskset(vf.Taskset[CalculatorTask, CalculatorConfig]):
    def load(self) -> list[CalculatorTask]:
        if self.config.max_terms < 2 or self.config.max_operand < 1:
            raise ValueError(f"v1-calculator: max_terms={self.config.max_terms} must be >= 2 and max_operand="
                             f"{self.config.max_operand} >= 1")
        rng = random.Random(self.config.seed)
        tasks = []
        for i in range(self.config.num_tasks):
            terms = [str(rng.randint(1, self.config.max_operand)) for _ in range(rng.randint(2, self.config.max_terms))]
            expression = terms[0] + "".join(f" {rng.choice('+-')} {t}" for t in terms[1:])
            data = CalculatorData(id=f"calc-{i}", prompt=PROMPT.format(expression=expression),
                                  expression=expression, answer=evaluate(expression))
            tasks.append(CalculatorTask(data, self.config.task))
        return tasks
