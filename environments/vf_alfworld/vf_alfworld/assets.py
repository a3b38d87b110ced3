"""What the alfworld wheel ships and the generator builds on: the PDDL domain (`data/alfred.pddl`), the text grammar
(`data/alfred.twl2`), 120 AI2-THOR scene layouts (`gen/layouts/FloorPlan*-{objects,openable}.json`, `-layout.npy`),
ALFRED's object tables (`gen/constants.py`) and goal library (`gen/goal_library.py`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import alfworld
import numpy as np
from alfworld.gen import constants, goal_library

ALFWORLD_DIR = Path(alfworld.__file__).parent
LAYOUTS_DIR = ALFWORLD_DIR / "gen" / "layouts"

# ALFWorld's six task types (alfworld/agents/environment/alfred_tw_env.py, TASK_TYPES)
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# ALFRED's validation-unseen floor plans (its valid_unseen split: kitchen 10, living room 219, bedroom 308, bathroom
# 424); ALFWorld's valid_unseen games are set in exactly these scenes.
UNSEEN_FLOOR_PLANS = (10, 219, 308, 424)

OBJECT_TYPES = tuple(constants.OBJECTS)
# Where each type may be put (ALFRED's placement table) and what can be heated, cooled, cleaned, toggled.
PLACEMENTS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in constants.VAL_RECEPTACLE_OBJECTS.items()}
ACTION_OBJECTS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in constants.VAL_ACTION_OBJECTS.items()}
MOVABLE_RECEPTACLES = frozenset(constants.MOVABLE_RECEPTACLES)  # Bowl, Mug, ...: objects that hold objects
STATIC_RECEPTACLES = frozenset(constants.RECEPTACLES) - MOVABLE_RECEPTACLES
OPENABLE = frozenset(constants.OPENABLE_CLASS_LIST)
PICKUPABLE = frozenset().union(*PLACEMENTS.values()) - {t for t in OBJECT_TYPES if t.endswith("Sliced")}
BASINS = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}  # AI2-THOR names a basin `Sink|x|y|z|SinkBasin`


@functools.cache
def domain_text() -> str:
    return (ALFWORLD_DIR / "data" / "alfred.pddl").read_text()


@functools.cache
def grammar_text() -> str:
    return (ALFWORLD_DIR / "data" / "alfred.twl2").read_text()


def goal_pddl(task_type: str) -> str:
    """The goal library's `(:goal ...)` block for a task type, with `{obj}`/`{recep}`/`{toggle}` placeholders."""
    return goal_library.gdict[task_type]["pddl"]


def goal_templates(task_type: str) -> list[str]:
    return list(goal_library.gdict[task_type]["templates"])


@dataclass(frozen=True)
class SceneLayout:
    """One AI2-THOR floor plan as the wheel describes it.

    object_types: every object and receptacle type present in the scene.
    receptacle_poses: receptacle id -> interaction pose (x, z in metres, rotation in degrees, camera horizon), for
                      the receptacles the layout script precomputed (not all of the scene's receptacles).
    reachable: (n, 2) grid points (x, z) the agent can stand on.
    """

    floor_plan: int
    object_types: frozenset[str]
    receptacle_poses: dict[str, tuple[float, float, int, int]]
    reachable: np.ndarray


@functools.cache
def floor_plans() -> tuple[int, ...]:
    found = sorted(int(p.name[len("FloorPlan") : -len("-objects.json")]) for p in LAYOUTS_DIR.glob("FloorPlan*-objects.json"))
    if not found:
        raise FileNotFoundError(f"no scene layouts in {LAYOUTS_DIR}: is alfworld==0.4.2 installed completely?")
    return tuple(found)


@functools.cache
def scene_layout(floor_plan: int) -> SceneLayout:
    stem = LAYOUTS_DIR / f"FloorPlan{floor_plan}"
    object_types = frozenset(json.loads(Path(f"{stem}-objects.json").read_text()))
    poses = {}
    for object_id, (x, z, rotation, horizon) in json.loads(Path(f"{stem}-openable.json").read_text()).items():
        kind = object_id.split("|")[0]
        if kind in BASINS and not object_id.endswith(BASINS[kind]):
            object_id = f"{object_id}|{BASINS[kind]}"
        poses[object_id] = (float(x), float(z), int(rotation), int(horizon))
    reachable = np.load(f"{stem}-layout.npy")
    return SceneLayout(floor_plan, object_types, poses, reachable)


def type_of(object_id: str) -> str:
    """`Sink|+00.00|+00.89|-01.44|SinkBasin` -> SinkBasin, `Drawer|+00.95|+00.22|-02.20` -> Drawer."""
    parts = object_id.split("|")
    return parts[4] if len(parts) > 4 else parts[0]
