"""Rewards, read from what the environment recorded on each step (`step["extras"]["alfworld"]`, env.py).

outcome  won:               1.0 when the game's goal was reached (ALFWorld's success, the papers' success rate).
metric   final_progress:    the highest sub-goal progress the episode reached (tasks.py stages; twc: its score).
turn     subgoal_progress:  how much this turn raised the best progress so far. Each stage is paid once, the first
                            time it is reached, so the turn rewards of an episode sum to its best progress (1.0 exactly
                            when won), and undoing and redoing a step earns nothing.
turn     valid_action:      1.0 when the game accepted the command (logged; weight 0 by default).
"""

from __future__ import annotations

from verifiers.types import State


def _record(step) -> dict:
    return (step.get("extras") or {}).get("alfworld") or {}


def subgoal_progress(step, **kwargs) -> float:
    return float(_record(step).get("progress_gain", 0.0))


def valid_action(step, **kwargs) -> float:
    return float(bool(_record(step).get("valid", False)))


def won(state: State, **kwargs) -> float:
    episode = state.get("alfworld_episode")
    return float(episode is not None and episode.won)


def final_progress(state: State, **kwargs) -> float:
    episode = state.get("alfworld_episode")
    return float(episode.best_progress) if episode is not None else 0.0
