"""The held-out learning curve's weights (rlvr.study.curve) on files written by hand, with transformers' own trainer
state and control objects (no training): a checkpoint is asked for at each curve step, its weights outlive checkpoint
rotation, a resumed cell keeps what a kill left in its last checkpoint, and a point without weights is named."""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from rlvr.study.curve import KeepCurveWeights, keep_left_weights
from rlvr.study.layout import StudyLayout
from rlvr.study.runner import evaluate_curve
from rlvr.study.settings import EvaluationSettings, StudyError, StudySettings


def checkpoint(unit, step: int, data: bytes) -> None:
    path = StudyLayout.train(unit) / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(data)


def kept(unit, step: int):
    return StudyLayout.curve_weights(StudyLayout.curve_point(unit, step)) / "model.safetensors"


def test_a_checkpoint_at_each_curve_step_keeps_its_weights_past_rotation(tmp_path):
    unit = tmp_path / "cells" / "grpo" / "seed-0"
    callback = KeepCurveWeights(unit, [2, 4])
    args = SimpleNamespace(output_dir=str(StudyLayout.train(unit)))
    for step, asked in ((1, False), (2, True), (3, False), (4, True)):
        control = callback.on_step_end(args, TrainerState(global_step=step), TrainerControl())
        assert control.should_save is asked, step
    checkpoint(unit, 2, b"step 2")
    checkpoint(unit, 3, b"step 3")
    for step in (2, 3):  # a save_steps checkpoint that is no curve step keeps nothing
        callback.on_save(args, TrainerState(global_step=step), TrainerControl())
    shutil.rmtree(StudyLayout.train(unit) / "checkpoint-2")  # rotation (save_total_limit)
    assert kept(unit, 2).read_bytes() == b"step 2" and not kept(unit, 3).parent.exists()
    assert not list(StudyLayout.curve(unit).rglob(".*tmp*"))  # published atomically
    checkpoint(unit, 4, b"step 4")
    callback.on_save(args, TrainerState(global_step=4, is_world_process_zero=False), TrainerControl())
    assert not kept(unit, 4).exists()  # the main process keeps them (one copy)


def test_a_resumed_cell_keeps_the_weights_a_kill_left_in_its_checkpoint(tmp_path):
    unit = tmp_path / "cell"
    checkpoint(unit, 2, b"step 2")  # published, then killed before the weights were kept
    checkpoint(unit, 4, b"step 4")
    finished = StudyLayout.eval(StudyLayout.curve_point(unit, 4))
    finished.mkdir(parents=True)  # step 4's point was evaluated and its weights deleted
    keep_left_weights(unit, [2, 4, 6])
    assert os.path.samefile(kept(unit, 2), StudyLayout.train(unit) / "checkpoint-2" / "model.safetensors")
    assert not kept(unit, 4).exists() and not kept(unit, 6).parent.exists()


def test_a_curve_point_without_weights_is_named_with_the_fix(tmp_path):
    settings = StudySettings(env="vf-triviaqa-search", model="tiny-random", algos=["grpo"], seeds=[0],
                             training={"max_steps": 2}, evaluation=EvaluationSettings(at_steps=[1]))
    layout = StudyLayout(tmp_path)
    with pytest.raises(StudyError, match=r"grpo/seed-0: the weights of held-out curve step 1 .* are missing.*remove "
                                         "the cell's train/ and curve/"):
        evaluate_curve({None: None}, None, settings, layout, layout.cell("grpo", 0), "grpo/seed-0", 0)
