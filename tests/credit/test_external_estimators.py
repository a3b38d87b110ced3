"""Estimators written outside rlvr, named by their import path (rlvr.credit.get_estimator): resolved like the
registry's, run by the same credit code, through the suite's tabular tier, the trainer's configuration and credit
step and a study's grid; and clear errors for a path that does not import or names something else."""

from __future__ import annotations

import textwrap

import pytest

from rlvr.credit import Estimator, compute_advantages, estimator_parameters, get_estimator
from rlvr.rollouts import CreditError, Rollout, Turn, assign_advantages
from rlvr.suite.grid import run_grid
from rlvr.suite.tabular import Settings, parse_method

MODULE = '''
from rlvr.credit import Estimator


def flipped(turn_rewards, outcome_rewards, first_result_turn, *, scale=1.0):
    """Outcome credit with the sign flipped: it learns to fail."""
    mean = sum(outcome_rewards) / len(outcome_rewards)
    return [[-scale * (o - mean)] * len(t) for t, o in zip(turn_rewards, outcome_rewards)]


def outcome(turn_rewards, outcome_rewards, first_result_turn):
    mean = sum(outcome_rewards) / len(outcome_rewards)
    return [[o - mean] * len(t) for t, o in zip(turn_rewards, outcome_rewards)]


OUTCOME_ONLY = Estimator(outcome, "outcome minus the group mean", turn_level=False)
NOT_A_FUNCTION = 3
'''


@pytest.fixture
def my_credit(tmp_path, monkeypatch):
    (tmp_path / "my_credit.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_credit"


def test_a_function_by_import_path_is_an_estimator(my_credit):
    spec = get_estimator("my_credit.flipped")
    assert spec.summary == "Outcome credit with the sign flipped: it learns to fail." and spec.turn_level
    assert estimator_parameters("my_credit.flipped") == {"scale": 1.0}
    assert compute_advantages("my_credit.flipped", [[0.0], [0.0, 1.0]], [1.0, 0.0], [None, None], scale=2.0) == [
        [-1.0], [1.0, 1.0]]
    with pytest.raises(TypeError, match=r"unknown parameter\(s\) \['coef'\]"):
        compute_advantages("my_credit.flipped", [[0.0]], [1.0], [None], coef=1.0)
    declared = get_estimator("my_credit.OUTCOME_ONLY")
    assert isinstance(declared, Estimator) and not declared.turn_level


def test_a_path_that_does_not_resolve_says_why(my_credit):
    with pytest.raises(ValueError, match=r"'my_credit\.missing': cannot import it \(AttributeError.*PYTHONPATH"):
        get_estimator("my_credit.missing")
    with pytest.raises(ValueError, match=r"cannot import it \(ModuleNotFoundError"):
        get_estimator("no_such_package.mine")
    with pytest.raises(ValueError, match="is a int, not a function or an rlvr.credit.Estimator"):
        get_estimator("my_credit.NOT_A_FUNCTION")
    with pytest.raises(ValueError, match=r"unknown estimator 'mine'.*import path"):
        get_estimator("mine")


def test_the_suite_tells_a_flipped_estimator_from_grpo(my_credit):
    """The tabular tier runs an outside estimator like a registered one (in worker processes too) and separates
    it: GRPO-OR learns delayed_consequence, the flipped sign learns to fail."""
    assert parse_method("my_credit.flipped:scale=2").options == {"scale": 2}
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['coef'\]"):
        parse_method("my_credit.flipped:coef=1")
    settings = Settings(updates=20, group_size=8)
    for jobs in (1, 2):
        grpo, flipped = run_grid(["delayed_consequence"], ["grpo", "my_credit.flipped"], 30, settings, jobs=jobs)
        assert grpo.auc.low > 0.4 and flipped.auc.high < 0.1


def test_the_trainer_and_a_study_take_it_by_import_path(my_credit):
    from rlvr.study.settings import StudyError, StudySettings
    from rlvr.trainer import ConfigError, build_config

    config = build_config("my_credit.flipped", {"output_dir": "/tmp/unused", "credit": {"scale": 0.5}})
    assert config.algo == "my_credit.flipped" and config.credit == {"scale": 0.5}
    with pytest.raises(ConfigError, match=r"credit parameter\(s\) \['coef'\] do not apply"):
        build_config("my_credit.flipped", {"output_dir": "/tmp/unused", "credit": {"coef": 1.0}})
    turn = Turn(reward=0.0, reward_parts={}, tool_result=False, state_key=None, tokens=None)
    group = [Rollout(example_id=0, task="t", prompt=[], completion=[], answer="", outcome=o, metrics={}, turns=(turn,))
             for o in (1.0, 0.0)]
    assert [r.advantages for r in assign_advantages(group, "my_credit.flipped", {})] == [(-0.5,), (0.5,)]
    with pytest.raises(CreditError, match="cannot import it"):
        assign_advantages(group, "my_credit.missing", {})
    grid = dict(env="vf-choice", model="tiny-random", seeds=[0], training={"max_steps": 1})
    study = StudySettings(algos=["grpo", "my_credit.flipped"], **grid)
    assert study.recipe("my_credit.flipped") == "my_credit.flipped"
    assert study.cell_training("my_credit.flipped")["max_steps"] == 1
    with pytest.raises(StudyError, match=r"algorithm 'my_credit\.missing': estimator .*cannot import it"):
        StudySettings(algos=["my_credit.missing"], **grid)
