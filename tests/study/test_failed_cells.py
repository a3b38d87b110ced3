"""A cell that raises does not end a study: its error is recorded (failed.json, study.json, the report), the other
cells run, the study then names the failed cells, and the same command retries them. A server that went away ends
the study at once (every later cell would meet it).

What a cell does is stood in here (`run_cell`, and `keep_serving` for the server it would train against): these tests
are about the study's control flow around a cell, and the real cells run in tests/study/test_study_run.py."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.study import runner
from rlvr.study.layout import StudyLayout
from rlvr.study.settings import EvaluationSettings, StudyError, StudySettings
from rlvr.trainer.faults import ServerDown

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from choice_env import load_environment  # noqa: E402
from test_report import summary  # noqa: E402

SETTINGS = StudySettings(env="vf-choice", model="tiny-random", algos=["grpo", "ppo_token", "mt_grpo"], seeds=[0],
                         training={"max_steps": 4, "batch_size": 4, "rollouts_per_example": 2, "micro_batch_size": 2},
                         variants={"ppo_token": "ppo"}, algo_options={"ppo_token": {"gae": "token"}},
                         evaluation=EvaluationSettings(examples=4, rollouts=1))
TOKEN_ERROR = "gae='token' needs each rollout as one token sequence"


@pytest.fixture
def stand_ins(monkeypatch):
    """The cells that run (in order); ppo_token raises while `failing` holds it, the others finish."""
    ran, failing = [], {"ppo_token": RuntimeError(TOKEN_ERROR)}

    def run_base(envs, server, settings, layout, seed, manifest):
        (layout.eval(layout.base(seed))).mkdir(parents=True)
        (layout.eval(layout.base(seed)) / "summary.json").write_text(json.dumps(summary(0.1)))
        (layout.done(layout.base(seed))).write_text(json.dumps({"seed": seed, "wall_s": {"evaluation": 1.0}}))

    def run_cell(envs, server, settings, layout, algo, seed, manifest, replicate=0, train_env=None):
        assert train_env is None  # no [train_env_args]: the cells train on the held-out set's environment
        ran.append(algo)
        if algo in failing:
            raise failing[algo]
        unit = layout.cell(algo, seed)
        for directory in (layout.eval(unit), layout.train(unit)):
            directory.mkdir(parents=True)
        (layout.eval(unit) / "summary.json").write_text(json.dumps(summary(0.5)))
        (layout.train(unit) / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
        done = {"algo": algo, "seed": seed, "wall_s": {"total": 1.0}}
        layout.done(unit).write_text(json.dumps(done))
        manifest.record("cells", runner.cell_key(algo, seed), done)

    @contextmanager
    def keep_serving(model, **kwargs):
        yield SimpleNamespace(url="http://stand-in", base_url="http://stand-in/v1", model="tiny-random")

    monkeypatch.setattr(runner, "run_base", run_base)
    monkeypatch.setattr(runner, "run_cell", run_cell)
    monkeypatch.setattr(runner, "check_model", lambda model: None)
    # the module (the package's attribute of that name is the function `launch`)
    monkeypatch.setattr(importlib.import_module("rlvr.serve.launch"), "keep_serving", keep_serving)
    return ran, failing


def test_a_failed_cell_is_recorded_the_others_run_and_the_same_command_retries_it(tmp_path, stand_ins):
    ran, failing = stand_ins
    with pytest.raises(StudyError, match=r"1 of 3 cell\(s\) failed: ppo_token/seed-0\. Each error is in the cell's "
                                         r"failed\.json .*The same command retries them"):
        runner.run_study(SETTINGS, tmp_path, env=load_environment())
    assert ran == ["grpo", "ppo_token", "mt_grpo"]  # the cell after the failure ran
    layout = StudyLayout(tmp_path)
    failure = json.loads(layout.failed(layout.cell("ppo_token", 0)).read_text())
    assert failure["error"] == f"RuntimeError: {TOKEN_ERROR}" and failure["seed"] == 0
    assert any(TOKEN_ERROR in line for line in failure["traceback"])
    assert json.loads(layout.manifest.read_text())["failed"]["ppo_token/seed-0"]["error"] == failure["error"]
    report = layout.report.read_text()
    assert "Missing: ppo_token/seed-0." in report
    assert "**1 cell(s) failed** in their last attempt" in report
    assert f"- ppo_token/seed-0 ({failure['failed']}): RuntimeError: {TOKEN_ERROR}" in report
    assert json.loads(layout.summary.read_text())["failed"][0]["algo"] == "ppo_token"

    del failing["ppo_token"]  # the same command again: only the failed cell is left, and now it finishes
    runner.run_study(SETTINGS, tmp_path, env=load_environment())
    assert ran[3:] == ["ppo_token"]
    assert not layout.failed(layout.cell("ppo_token", 0)).exists() and layout.failed_units() == []
    assert json.loads(layout.manifest.read_text())["failed"] == {}
    assert "failed** in their last attempt" not in layout.report.read_text()


def test_a_server_that_went_away_ends_the_study_at_once(tmp_path, stand_ins):
    ran, failing = stand_ins
    failing["ppo_token"] = ServerDown("rollout server http://stand-in stopped answering")
    with pytest.raises(ServerDown):
        runner.run_study(SETTINGS, tmp_path, env=load_environment())
    assert ran == ["grpo", "ppo_token"]  # mt_grpo never started
    assert not StudyLayout(tmp_path).failed(StudyLayout(tmp_path).cell("ppo_token", 0)).exists()


def test_a_failed_algorithm_may_change_its_options_and_retries_with_them(tmp_path, stand_ins):
    """The fix for a failed cell can be an option (here: token prompts for token-level GAE): an algorithm without a
    finished cell may change its options on a resumed study; a finished one may not (its cells share one budget).
    The retried cell's partial training, made under the old options, is not resumed."""
    ran, failing = stand_ins
    with pytest.raises(StudyError, match="1 of 3 cell"):
        runner.run_study(SETTINGS, tmp_path, env=load_environment())
    layout = StudyLayout(tmp_path)
    unit = layout.cell("ppo_token", 0)
    assert json.loads(layout.failed(unit).read_text())["training"] == SETTINGS.cell_training("ppo_token")
    fixed = dataclasses.replace(SETTINGS, algo_options={"ppo_token": {"gae": "token", "token_prompts": True}})
    assert runner.failed_with_other_options(layout, unit, fixed.cell_training("ppo_token"))
    assert not runner.failed_with_other_options(layout, unit, SETTINGS.cell_training("ppo_token"))
    assert not runner.failed_with_other_options(layout, layout.cell("grpo", 0), SETTINGS.cell_training("grpo"))

    del failing["ppo_token"]
    runner.run_study(fixed, tmp_path, env=load_environment())
    assert ran[3:] == ["ppo_token"]
    stored = json.loads(layout.manifest.read_text())["settings"]["algo_options"]
    assert stored["ppo_token"] == {"gae": "token", "token_prompts": True}
    finished_changed = dataclasses.replace(fixed, algo_options={**fixed.algo_options, "grpo": {"beta": 0.1}})
    with pytest.raises(StudyError, match=r"algo_options\.grpo: None -> \{'beta': 0\.1\}"):
        runner.run_study(finished_changed, tmp_path, env=load_environment())
