"""vf-arithmetic: chains of integer additions and subtractions (reasoning-gym `chain_sum`, seeded, offline),
answered step by step, one operation per line, ending with `Answer: <number>`.

Each row carries a reference solution (left to right, one line per operation) for supervised fine-tuning and for
OREO's expert data (`python -m vf_arithmetic.expert`). The reward is 1 when the final answer is right.
"""

from __future__ import annotations

import json
import re

import verifiers as vf
from datasets import Dataset

SYSTEM_PROMPT = (
    "Solve the arithmetic problem step by step. Write one operation per line, like `12 + 7 = 19`, "
    "and finish with a last line `Answer: <number>`."
)
_NUMBER = re.compile(r"-?\d+")
_ANSWER = re.compile(r"Answer:\s*(-?\d+)", re.IGNORECASE)


def reference_solution(expression: str) -> str:
    """Left to right, one operation per line: '15 - 43 - 75' -> '15 - 43 = -28\\n-28 - 75 = -103\\nAnswer: -103'."""
    tokens = expression.split()
    if len(tokens) < 3 or len(tokens) % 2 == 0:
        raise ValueError(f"not a chain of + and -: {expression!r}")
    total, lines = int(tokens[0]), []
    for op, operand in zip(tokens[1::2], tokens[2::2], strict=True):
        if op not in "+-":
            raise ValueError(f"operator {op!r} in {expression!r}: only + and - are supported")
        result = total + int(operand) if op == "+" else total - int(operand)
        lines.append(f"{total} {op} {operand} = {result}")
        total = result
    return "\n".join(lines + [f"Answer: {total}"])


def parse_answer(text: str) -> int | None:
    """The number after the last `Answer:`, else the last number in the text (small models drop the format)."""
    marked = _ANSWER.findall(text or "")
    if marked:
        return int(marked[-1])
    numbers = _NUMBER.findall(text or "")
    return int(numbers[-1]) if numbers else None


def correct_answer(completion, answer, **kwargs) -> float:
    text = completion[-1]["content"] if isinstance(completion, list) and completion else str(completion or "")
    return float(parse_answer(text) == int(answer))


def make_rows(size: int, seed: int, min_terms: int, max_terms: int, max_digits: int) -> Dataset:
    import reasoning_gym  # imported here: it takes seconds

    items = reasoning_gym.create_dataset("chain_sum", seed=seed, size=size, min_terms=min_terms,
                                         max_terms=max_terms, min_digits=1, max_digits=max_digits)
    rows = []
    for item in items:
        expression = item["metadata"]["expression"]
        rows.append({"question": f"What is {expression}?", "answer": str(item["answer"]),
                     "info": json.dumps({"expression": expression, "solution": reference_solution(expression),
                                         "source": "reasoning_gym/chain_sum"})})
    return Dataset.from_list(rows)


def load_environment(num_train_examples: int = 256, num_eval_examples: int = 64, min_terms: int = 2,
                     max_terms: int = 4, max_digits: int = 2, seed: int = 0, **kwargs) -> vf.Environment:
    if not 2 <= min_terms <= max_terms:
        raise ValueError(f"need 2 <= min_terms <= max_terms, got {min_terms}, {max_terms}")
    if max_digits < 1:
        raise ValueError(f"max_digits must be >= 1, got {max_digits}")
    rows = make_rows(num_train_examples + num_eval_examples, seed, min_terms, max_terms, max_digits)
    train = rows.select(range(num_train_examples))
    evaluation = rows.select(range(num_train_examples, len(rows)))
    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0])
    return vf.SingleTurnEnv(dataset=train, eval_dataset=evaluation, system_prompt=SYSTEM_PROMPT, rubric=rubric,
                            **kwargs)


__all__ = ["load_environment", "reference_solution", "parse_answer", "correct_answer"]
