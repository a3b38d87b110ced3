"""TurnRubric (per-turn rewards and turn-level advantages on verifiers steps) and the shared reward functions."""

from rlvr.rubrics import rewards
from rlvr.rubrics.turn_rubric import TurnRubric

__all__ = ["TurnRubric", "rewards"]
