"""What an ALFWorld game asks for (ALFRED's `pddl_params`) and how far a game state is towards it.

Sub-goal progress is a stage in a chain whose later stages imply the earlier ones were passed, so that progress
credited "for the first time" (rewards.py) can never be farmed by undoing and redoing a step:

| task type | stages (each implies the ones before) |
|---|---|
| pick_and_place_simple | 1 holds a target object · 2 won |
| pick_clean/heat/cool_then_place_in_recep | 1 holds a target · 2 a target is clean / hot / cool · 3 won |
| pick_two_obj_and_place | 1 holds a target · 2 a target is in a goal receptacle · 3 that, and holds another target · 4 won |
| look_at_obj_in_light | 1 holds a target or has switched the lamp on · 2 won |

`won` is the goal of the game file itself (its PDDL goal), so the last stage is exactly the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vf_alfworld.assets import TASK_TYPES

STATE_CHANGE = {
    "pick_clean_then_place_in_recep": "isclean",
    "pick_heat_then_place_in_recep": "ishot",
    "pick_cool_then_place_in_recep": "iscool",
}
NUM_STAGES = {
    "pick_and_place_simple": 2,
    "look_at_obj_in_light": 2,
    "pick_clean_then_place_in_recep": 3,
    "pick_heat_then_place_in_recep": 3,
    "pick_cool_then_place_in_recep": 3,
    "pick_two_obj_and_place": 4,
}

Fact = tuple[str, tuple[str, ...]]  # (predicate, argument names), lower-case as fast-downward reports them


@dataclass(frozen=True)
class Task:
    """ALFRED's `pddl_params` (traj_data.json): target object type, goal receptacle type, lamp type."""

    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""

    def __post_init__(self):
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"unknown ALFWorld task type {self.task_type!r}; expected one of {TASK_TYPES}")

    def name(self, floor_plan: int) -> str:
        """ALFWorld's directory name, e.g. `pick_heat_then_place_in_recep-Egg-None-CounterTop-12`."""
        parent = self.toggle_target if self.task_type == "look_at_obj_in_light" else self.parent_target
        return f"{self.task_type}-{self.object_target}-None-{parent}-{floor_plan}"


def task_from_game_dir(trial_dir: Path) -> Task:
    """The task of an ALFWorld game folder: from its traj_data.json when present, else from the folder name
    (`<task_type>-<object>-<movable receptacle>-<receptacle or lamp>-<scene>/trial_...`)."""
    traj_file = trial_dir / "traj_data.json"
    if traj_file.is_file():
        traj = json.loads(traj_file.read_text())
        params = traj["pddl_params"]
        return Task(
            traj["task_type"],
            params["object_target"],
            params.get("parent_target") or "",
            params.get("toggle_target") or "",
        )
    parts = trial_dir.parent.name.split("-")
    if len(parts) != 5:
        raise ValueError(
            f"{trial_dir}: no traj_data.json and the folder name {trial_dir.parent.name!r} is not ALFWorld's "
            "`<task_type>-<object>-<movable>-<receptacle>-<scene>`"
        )
    task_type, obj, _movable, last, _scene = parts
    if task_type == "look_at_obj_in_light":
        return Task(task_type, obj, toggle_target=last)
    return Task(task_type, obj, parent_target=last)


def _objects_of_type(facts: set[Fact], type_name: str) -> set[str]:
    wanted = f"{type_name.lower()}type"
    return {args[0] for name, args in facts if name == "objecttype" and args[1] == wanted}


def stage(task: Task, facts: Iterable[Fact], won: bool) -> int:
    """How many of the task's sub-goal stages (module docstring) this state has passed."""
    if won:
        return NUM_STAGES[task.task_type]
    facts = set(facts)
    targets = _objects_of_type(facts, task.object_target)
    held = {args[1] for name, args in facts if name == "holds"}
    holds_target = bool(held & targets)
    if task.task_type == "look_at_obj_in_light":
        lamps = _objects_of_type(facts, task.toggle_target)
        lamp_on = any(name == "istoggled" and args[0] in lamps for name, args in facts)
        return int(holds_target or lamp_on)
    if task.task_type in STATE_CHANGE:
        changed = any(name == STATE_CHANGE[task.task_type] and args[0] in targets for name, args in facts)
        return 2 if changed else int(holds_target)
    if task.task_type == "pick_two_obj_and_place":
        parents = _objects_of_type(facts, task.parent_target) | {
            args[0] for name, args in facts if name == "receptacletype" and args[1] == f"{task.parent_target.lower()}type"
        }
        placed = {args[0] for name, args in facts if name == "inreceptacle" and args[0] in targets and args[1] in parents}
        if placed:
            return 3 if held & (targets - placed) else 2
        return int(holds_target)
    return int(holds_target)  # pick_and_place_simple


def progress(task: Task, facts: Iterable[Fact], won: bool) -> float:
    """Sub-goal progress of a state in [0, 1]; 1.0 exactly when the game is won."""
    return stage(task, facts, won) / NUM_STAGES[task.task_type]
