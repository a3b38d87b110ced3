"""A plain verifiers environment, written as a third party would: it knows nothing of rlvr.

Single-turn arithmetic questions; a plain `vf.Rubric` scores the whole rollout (1.0 when the reply contains the
answer), so rlvr can train it only with an outcome-level algorithm (`--algo grpo`).
"""

import random

import verifiers as vf
from datasets import Dataset


def correct(completion, answer) -> float:
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return float(answer in (text or ""))


def load_environment(num_examples: int = 16, seed: int = 0) -> vf.Environment:
    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        rows.append({"question": f"What is {a} + {b}? Reply with the number.", "answer": str(a + b)})
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), eval_dataset=Dataset.from_list(rows[:4]),
                            rubric=vf.Rubric(funcs=[correct]))
