"""A two-turn environment whose first-turn reward depends on a learnable choice, for training tests.

Turn 0: the model "chooses" by the first letter of its reply; the environment answers with a <result> message
(a tool result for TurnRubric, so MT-GRPO's turn term applies to turn 0). The turn reward is 1 when that letter
is in the first half of the alphabet. Turn 1: the model answers; the outcome reward is the same rule on it.

A random-weight model picks such a letter about a quarter of the time (it samples near-uniformly over the
vocabulary), which gives GRPO groups with spread from the start, and a policy gradient can raise it by moving
probability mass onto the tokens that start with those letters.
"""

from __future__ import annotations

import verifiers as vf
from datasets import Dataset

from rlvr.rubrics import TurnRubric

GOOD_LETTERS = frozenset("abcdefghijklm")


def first_letter_is_good(text: str) -> bool:
    stripped = text.lstrip()
    return bool(stripped) and stripped[0].lower() in GOOD_LETTERS


def _text(messages) -> str:
    return "".join(m.get("content") or "" for m in messages if m.get("role") == "assistant")


def choice_reward(turn, **kwargs) -> float:
    return float(first_letter_is_good(_text(turn)))


def answer_reward(completion, **kwargs) -> float:
    final = [m for m in completion if m.get("role") == "assistant"][-1:]
    return float(first_letter_is_good(_text(final)))


class ChoiceEnv(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        verdict = "good" if first_letter_is_good(messages[-1].get("content") or "") else "bad"
        return [{"role": "user", "content": f"<result>{verdict} choice</result> Now answer."}]


def load_environment(num_examples: int = 16, max_turns: int = 2, credit: dict | None = None) -> vf.Environment:
    dataset = Dataset.from_list([
        {"question": f"Round {i}: pick a word.", "answer": "", "example_id": i} for i in range(num_examples)
    ])
    rubric = TurnRubric(turn_rewards=[(choice_reward, 1.0)], outcome_rewards=[(answer_reward, 1.0)], credit=credit)
    return ChoiceEnv(dataset=dataset, rubric=rubric, max_turns=max_turns, system_prompt="Play the game.")
