"""TurnRubric (per-turn and outcome rewards on verifiers states) and the shared reward functions."""

from rlvr.rubrics import rewards
from rlvr.rubrics.turn_rubric import REWARD_ERRORS, TurnRubric, find_turn_rubrics, reward_name

__all__ = ["REWARD_ERRORS", "TurnRubric", "find_turn_rubrics", "reward_name", "rewards"]
