"""ALFWorld games generated from the wheel's own assets, deterministic by seed.

ALFWorld's games (`game.tw-pddl`) were made from ALFRED trajectories recorded in AI2-THOR, which these machines lack.
The wheel still ships what a game is made of: the scene layouts (which object and receptacle types each of the 120
floor plans holds, and receptacle ids with their interaction poses), ALFRED's placement table (which object types go
in which receptacle types), its action tables (heatable, coolable, cleanable, toggleable) and the goal library
(PDDL goal and sentence templates per task type). A game here is one floor plan, a subset of its receptacles, objects
placed where ALFRED allows them, and a goal from the library, written as a PDDL problem in the layout of ALFWorld's
`initial_state.pddl` (alfworld/gen/game_states/planned_game_state.py writes the same predicates).

Pure sampling lives here; playing and checking a game lives in `engine.py`, caching in `games.py`.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from vf_alfworld import assets
from vf_alfworld.tasks import Task

# Bump when sampling changes: the cache key includes it, so old games are never mixed with new ones.
GENERATOR_VERSION = 1

# Where a desk lamp stands (ALFRED's placement table has no entry for lamps).
LAMP_HOSTS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand"})
# The appliance each state-changing task needs.
APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
ACTION_TABLE = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}
# Goals a person would find odd, filtered out (ALFWorld's own games keep some, e.g. "put a hot apple in fridge"):
# cleaning, heating or cooling something only to throw it away, putting it back into the appliance that changed
# it, or into one that undoes the change.
ODD_PARENTS = {
    "pick_clean_then_place_in_recep": {"GarbageCan", "SinkBasin", "BathtubBasin"},
    "pick_heat_then_place_in_recep": {"GarbageCan", "Microwave", "Fridge"},
    "pick_cool_then_place_in_recep": {"GarbageCan", "Fridge", "Microwave", "StoveBurner", "Toaster"},
}


@dataclass(frozen=True)
class GeneratorConfig:
    """Scene size: ALFWorld's rooms have 20-40 receptacles; small ones keep planning and episodes short."""

    max_receptacles: int = 10
    max_distractors: int = 8
    max_plan_length: int = 40

    def __post_init__(self):
        if self.max_receptacles < 3:
            raise ValueError(f"max_receptacles={self.max_receptacles}: a task needs at least 3 receptacles")
        if self.max_distractors < 0 or self.max_plan_length < 1:
            raise ValueError(f"max_distractors and max_plan_length must be >= 0 and >= 1, got {self}")


@dataclass
class Scene:
    """receptacles: id -> location; objects: id -> receptacle id; agent_location: where the agent starts."""

    floor_plan: int
    receptacles: dict[str, str] = field(default_factory=dict)
    objects: dict[str, str] = field(default_factory=dict)
    agent_location: str = ""


# --- tasks ---------------------------------------------------------------------------------------------------------


def candidate_tasks(receptacle_types: set[str], object_types: set[str], task_type: str) -> list[Task]:
    """Every goal of `task_type` that the scene's types allow and that is not odd (see ODD_PARENTS)."""
    pickable = sorted(object_types & assets.PICKUPABLE)
    if task_type == "look_at_obj_in_light":
        if "DeskLamp" not in object_types or not receptacle_types & LAMP_HOSTS:
            return []
        return [Task(task_type, obj, toggle_target="DeskLamp") for obj in pickable]
    tasks = []
    for parent in sorted(receptacle_types):
        for obj in pickable:
            if obj not in assets.PLACEMENTS.get(parent, ()):
                continue
            if task_type in APPLIANCE:
                if APPLIANCE[task_type] not in receptacle_types or parent in ODD_PARENTS[task_type]:
                    continue
                if obj not in assets.ACTION_OBJECTS[ACTION_TABLE[task_type]]:
                    continue
            tasks.append(Task(task_type, obj, parent_target=parent))
    return tasks


def scene_receptacle_types(layout: assets.SceneLayout) -> set[str]:
    return (set(layout.object_types) & assets.STATIC_RECEPTACLES) | {
        assets.type_of(r) for r in layout.receptacle_poses if assets.type_of(r) in assets.STATIC_RECEPTACLES
    }


# --- scenes --------------------------------------------------------------------------------------------------------


def _location(x: float, z: float, rotation: int, horizon: int) -> str:
    # ALFWorld's location names: grid units of 0.25 m, rotation in quarter turns (planned_game_state.py)
    return f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{rotation // 90 % 4}|{horizon}"


def _coords(x: float, y: float, z: float) -> str:
    return "|".join(f"{v:+06.2f}" for v in (x, y, z))


def _receptacle_instances(layout: assets.SceneLayout, rng: random.Random) -> dict[str, tuple[float, float, int, int]]:
    """Receptacle id -> pose: the layout's own ids, plus one made-up instance of each type it lists without one."""
    instances = {r: pose for r, pose in layout.receptacle_poses.items() if assets.type_of(r) in assets.STATIC_RECEPTACLES}
    known = {assets.type_of(r) for r in instances}
    points = layout.reachable
    for rtype in sorted(scene_receptacle_types(layout) - known):
        x, z = (float(v) for v in points[rng.randrange(len(points))])
        instances[f"{rtype}|{_coords(x, 0.9, z)}"] = (x, z, 90 * rng.randrange(4), 30)
    return instances


def sample_scene(layout: assets.SceneLayout, task: Task, config: GeneratorConfig, rng: random.Random) -> Scene | None:
    """Receptacles (the task's first), target and distractor objects where ALFRED's placement table allows them.
    None when this draw cannot host the task (no receptacle may hold the target outside a parent)."""
    instances = _receptacle_instances(layout, rng)
    by_type: dict[str, list[str]] = {}
    for r in sorted(instances):
        by_type.setdefault(assets.type_of(r), []).append(r)

    needed = []
    if task.parent_target:
        needed.append(rng.choice(by_type[task.parent_target]))
    if task.task_type in APPLIANCE:
        needed.append(rng.choice(by_type[APPLIANCE[task.task_type]]))
    if task.toggle_target:
        needed.append(rng.choice(sorted(r for t in LAMP_HOSTS & set(by_type) for r in by_type[t])))
    rest = sorted(set(instances) - set(needed))
    rng.shuffle(rest)
    chosen = list(dict.fromkeys(needed)) + rest[: max(0, config.max_receptacles - len(set(needed)))]

    scene = Scene(layout.floor_plan)
    used_locations = set()
    for r in chosen:
        location = _location(*instances[r])
        while location in used_locations:  # one receptacle per spot, so "go to" lands in front of it alone
            x, z = (float(v) for v in layout.reachable[rng.randrange(len(layout.reachable))])
            location = _location(x, z, 90 * rng.randrange(4), 30)
        used_locations.add(location)
        scene.receptacles[r] = location
    free = [p for p in layout.reachable if _location(float(p[0]), float(p[1]), 0, 30) not in used_locations]
    x, z = (float(v) for v in free[rng.randrange(len(free))])
    scene.agent_location = _location(x, z, 0, 30)

    parents = {r for r in chosen if assets.type_of(r) == task.parent_target}

    def hosts(otype: str, exclude: set[str]) -> list[str]:
        return [r for r in chosen if otype in assets.PLACEMENTS.get(assets.type_of(r), ()) and r not in exclude]

    # Targets never start where the goal wants them (a goal met at the start teaches nothing), nor in the fridge for
    # a cooling task (ALFRED counts what was in the fridge as cool).
    exclude = parents | ({r for r in chosen if assets.type_of(r) == "Fridge"} if task.task_type.startswith("pick_cool") else set())
    target_hosts = hosts(task.object_target, exclude)
    if not target_hosts:
        return None
    count = rng.randint(2, 3) if task.task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    placements = [(task.object_target, rng.choice(target_hosts)) for _ in range(count)]
    if task.toggle_target:
        lamp_host = next(r for r in chosen if assets.type_of(r) in LAMP_HOSTS)
        placements.append((task.toggle_target, lamp_host))
    others = sorted(set(layout.object_types) & assets.PICKUPABLE - {task.object_target})
    rng.shuffle(others)
    for otype in others[: config.max_distractors]:
        options = hosts(otype, set())
        if options:
            placements.append((otype, rng.choice(options)))
    for otype, host in placements:
        scene.objects[_unique_object_id(otype, host, scene, rng)] = host
    return scene


def _unique_object_id(otype: str, host: str, scene: Scene, rng: random.Random) -> str:
    hx, hy, hz = (float(v) for v in host.split("|")[1:4])
    while True:
        object_id = f"{otype}|{_coords(hx + rng.uniform(-0.3, 0.3), hy + 0.05, hz + rng.uniform(-0.3, 0.3))}"
        if object_id not in scene.objects:
            return object_id


# --- PDDL ----------------------------------------------------------------------------------------------------------


def pddl_name(object_id: str) -> str:
    """ALFRED's escaping of ids into PDDL names (PlannedGameState.fix_pddl_str_chars)."""
    for old, new in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        object_id = object_id.replace(old, new)
    return object_id


def pddl_problem(scene: Scene, task: Task, name: str) -> str:
    """The PDDL problem in ALFWorld's initial_state.pddl layout (types, objects, init facts, goal)."""
    receptacles = sorted(scene.receptacles)
    objects = sorted(scene.objects)
    locations = sorted(set(scene.receptacles.values()) | {scene.agent_location})
    # as ALFRED declares them: every non-receptacle type as an object constant and an otype, receptacle types as rtypes
    otypes = sorted((set(assets.OBJECT_TYPES) | assets.MOVABLE_RECEPTACLES) - assets.STATIC_RECEPTACLES)
    declarations = (
        ["agent1 - agent"]
        + [f"{t} - object" for t in otypes]
        + [f"{t}Type - otype" for t in otypes]
        + [f"{t}Type - rtype" for t in sorted(assets.STATIC_RECEPTACLES)]
        + [f"{pddl_name(o)} - object" for o in objects]
        + [f"{pddl_name(r)} - receptacle" for r in receptacles]
        + [f"{pddl_name(loc)} - location" for loc in locations]
    )
    init = [f"(atLocation agent1 {pddl_name(scene.agent_location)})"]
    for r in receptacles:
        rtype = assets.type_of(r)
        init.append(f"(receptacleType {pddl_name(r)} {rtype}Type)")
        init.append(f"(receptacleAtLocation {pddl_name(r)} {pddl_name(scene.receptacles[r])})")
        if rtype in assets.OPENABLE:
            init.append(f"(openable {pddl_name(r)})")
    scene_rtypes = sorted({assets.type_of(r) for r in receptacles})
    scene_otypes = sorted({assets.type_of(o) for o in objects})
    init += [
        f"(canContain {rt}Type {ot}Type)"
        for rt in scene_rtypes
        for ot in scene_otypes
        if ot in assets.PLACEMENTS.get(rt, ())
    ]
    for o in objects:
        otype, host = assets.type_of(o), scene.objects[o]
        init.append(f"(objectType {pddl_name(o)} {otype}Type)")
        init.append(f"(inReceptacle {pddl_name(o)} {pddl_name(host)})")
        init.append(f"(objectAtLocation {pddl_name(o)} {pddl_name(scene.receptacles[host])})")
        if otype in assets.PICKUPABLE:
            init.append(f"(pickupable {pddl_name(o)})")
        if otype in assets.MOVABLE_RECEPTACLES:
            init.append(f"(isReceptacleObject {pddl_name(o)})")
        for table, predicate in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                                 ("Toggleable", "toggleable"), ("Sliceable", "sliceable")):  # fmt: skip
            if otype in assets.ACTION_OBJECTS[table]:
                init.append(f"({predicate} {pddl_name(o)})")
    goal = assets.goal_pddl(task.task_type).format(
        obj=task.object_target, recep=task.parent_target, toggle=task.toggle_target
    ).replace("#", "-")  # the goal library writes `?r # receptacle` for PDDL's `?r - receptacle`
    return (
        f"(define (problem {name})\n(:domain alfred)\n(:objects\n    "
        + "\n    ".join(declarations)
        + "\n)\n(:init\n    "
        + "\n    ".join(init)
        + "\n)\n"
        + goal
    )


def task_description(task: Task, rng: random.Random) -> str:
    """One of the goal library's sentence templates, filled with lower-cased type names (as ALFWorld's
    get_templated_task_desc does, with a seeded choice instead of the global `random`)."""
    template = rng.choice(assets.goal_templates(task.task_type))
    return template.format(obj=task.object_target.lower(), recep=task.parent_target.lower(),
                           toggle=task.toggle_target.lower(), mrecep="")  # fmt: skip


def grammar_with_task(description: str) -> str:
    return assets.grammar_text().replace("UNKNOWN GOAL", description)


def traj_data(task: Task, floor_plan: int, description: str, seed: str) -> dict:
    """The fields of ALFRED's traj_data.json that ALFWorld reads (task_type, pddl_params, scene, annotations)."""
    params = asdict(task)
    return {
        "task_type": task.task_type,
        "pddl_params": {
            "object_target": params["object_target"],
            "parent_target": params["parent_target"],
            "toggle_target": params["toggle_target"],
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{floor_plan}", "scene_num": floor_plan},
        "turk_annotations": {"anns": [{"task_desc": description}]},
        "rlvr": {"generator_version": GENERATOR_VERSION, "seed": seed},
    }


def sample_game(seed: str, floor_plans: tuple[int, ...], task_type: str | None, config: GeneratorConfig):
    """(task, scene) drawn with `random.Random(seed)`; None when the draw fits no task (the caller tries the next
    seed). The task type is drawn first, uniformly, so that every type is equally common."""
    rng = random.Random(seed)
    layout = assets.scene_layout(rng.choice(floor_plans))
    task_type = task_type or rng.choice(assets.TASK_TYPES)
    candidates = candidate_tasks(scene_receptacle_types(layout), set(layout.object_types), task_type)
    if not candidates:
        return None
    task = rng.choice(candidates)
    scene = sample_scene(layout, task, config, rng)
    if scene is None:
        return None
    return task, scene, task_description(task, rng)
