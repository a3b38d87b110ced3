"""Sub-goal stages on hand-built fact sets (tasks.py), and reading a task from an ALFWorld game folder."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vf_alfworld.assets import TASK_TYPES
from vf_alfworld.tasks import NUM_STAGES, Task, progress, stage, task_from_game_dir

# A small world in fast-downward's lower-case names: two apples, a fridge, a countertop, a desk lamp.
BASE = {
    ("objecttype", ("apple_1", "appletype")),
    ("objecttype", ("apple_2", "appletype")),
    ("objecttype", ("lamp_1", "desklamptype")),
    ("receptacletype", ("fridge_1", "fridgetype")),
    ("receptacletype", ("counter_1", "countertoptype")),
    ("inreceptacle", ("apple_1", "fridge_1")),
    ("inreceptacle", ("apple_2", "fridge_1")),
}
HOLDS_1 = ("holds", ("agent1", "apple_1"))


def facts(*extra, drop=()):
    return (BASE | set(extra)) - set(drop)


SIMPLE = Task("pick_and_place_simple", "Apple", parent_target="CounterTop")
HEAT = Task("pick_heat_then_place_in_recep", "Apple", parent_target="CounterTop")
TWO = Task("pick_two_obj_and_place", "Apple", parent_target="CounterTop")
LOOK = Task("look_at_obj_in_light", "Apple", toggle_target="DeskLamp")


@pytest.mark.parametrize(
    ("task", "state", "expected"),
    [
        (SIMPLE, facts(), 0),
        (SIMPLE, facts(HOLDS_1, drop=[("inreceptacle", ("apple_1", "fridge_1"))]), 1),
        (SIMPLE, facts(("holds", ("agent1", "lamp_1"))), 0),  # holding something else is no progress
        (HEAT, facts(HOLDS_1), 1),
        (HEAT, facts(HOLDS_1, ("ishot", ("apple_1",))), 2),
        (HEAT, facts(("ishot", ("apple_1",))), 2),  # heated, then put down somewhere: still past stage 2
        (HEAT, facts(("iscool", ("apple_1",))), 0),  # the wrong change
        (TWO, facts(HOLDS_1), 1),
        (TWO, facts(("inreceptacle", ("apple_1", "counter_1"))), 2),
        (TWO, facts(("inreceptacle", ("apple_1", "counter_1")), ("holds", ("agent1", "apple_2"))), 3),
        (LOOK, facts(HOLDS_1), 1),
        (LOOK, facts(("istoggled", ("lamp_1",))), 1),  # switching the lamp on first is progress too
        (LOOK, facts(HOLDS_1, ("istoggled", ("lamp_1",))), 1),  # not at the lamp yet: not won
    ],
)
def test_stages_by_hand(task, state, expected):
    assert stage(task, state, won=False) == expected


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_won_is_the_last_stage_and_progress_one(task_type):
    task = Task(task_type, "Apple", parent_target="CounterTop", toggle_target="DeskLamp")
    assert stage(task, facts(), won=True) == NUM_STAGES[task_type]
    assert progress(task, facts(), won=True) == 1.0


@given(
    st.sampled_from(TASK_TYPES),
    st.sets(st.sampled_from(sorted(BASE | {HOLDS_1, ("ishot", ("apple_1",)), ("isclean", ("apple_2",)),
                                          ("iscool", ("apple_1",)), ("istoggled", ("lamp_1",)),
                                          ("inreceptacle", ("apple_2", "counter_1"))}))),  # fmt: skip
)
def test_progress_below_one_until_won(task_type, state):
    task = Task(task_type, "Apple", parent_target="CounterTop", toggle_target="DeskLamp")
    assert 0.0 <= progress(task, state, won=False) < 1.0


def test_unknown_task_type_is_refused():
    with pytest.raises(ValueError, match="unknown ALFWorld task type 'pick_three'"):
        Task("pick_three", "Apple")


def test_task_from_folder_name_and_traj_data(tmp_path):
    trial = tmp_path / "look_at_obj_in_light-Book-None-DeskLamp-308" / "trial_T1"
    trial.mkdir(parents=True)
    assert task_from_game_dir(trial) == Task("look_at_obj_in_light", "Book", toggle_target="DeskLamp")
    heat = tmp_path / "pick_heat_then_place_in_recep-Egg-None-Fridge-12" / "trial_T2"
    heat.mkdir(parents=True)
    assert task_from_game_dir(heat) == Task("pick_heat_then_place_in_recep", "Egg", parent_target="Fridge")
    # traj_data.json wins over the folder name
    params = {"object_target": "Mug", "parent_target": "Desk", "toggle_target": "", "mrecep_target": ""}
    (heat / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple", "pddl_params": params}))
    assert task_from_game_dir(heat) == Task("pick_and_place_simple", "Mug", parent_target="Desk")
    odd = tmp_path / "not-an-alfworld-folder" / "trial"
    odd.mkdir(parents=True)
    with pytest.raises(ValueError, match="is not ALFWorld's"):
        task_from_game_dir(odd)
