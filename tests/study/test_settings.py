"""Study settings: the committed configs build a configuration for every cell; bad settings fail before anything
runs with what to change; a study directory refuses a second budget but takes more algorithms or seeds; the
command line's overrides land where they should (`rlvr study --dry-run` starts nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.study.runner import cell_config, check_study
from rlvr.study.settings import EvaluationSettings, StudyError, StudySettings, merge_grids, read_settings_file

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs" / "study").glob("*.toml"))


def settings(**changes) -> StudySettings:
    base = dict(env="vf-triviaqa-search", model="tiny-random", algos=["grpo", "mt_grpo"], seeds=[0, 1],
                training={"max_steps": 2, "batch_size": 4, "rollouts_per_example": 2, "micro_batch_size": 2})
    return StudySettings(**{**base, **changes})


def study(*args) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["study", *map(str, args)])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_committed_study_configs_build_every_cell(path, tmp_path):
    s = StudySettings.from_dict(read_settings_file(path))
    assert len(s.seeds) >= 3 and s.report.baseline in s.algos
    check_study(s, tmp_path / "study")  # every algorithm's configuration is built and checked
    for algo in s.algos:
        config = cell_config(s, algo, 2, tmp_path / algo)
        assert config.seed == 2 and config.max_steps == s.training["max_steps"] and not getattr(config, "use_lora", False)
        assert config.output_dir == str(tmp_path / algo) and config.save_total_limit == 1
    assert s.sampling()["max_tokens"] == s.training["max_tokens_per_turn"]


def test_triviaqa_study_has_the_issues_grid_and_precision():
    s = StudySettings.from_dict(read_settings_file(REPO / "configs/study/triviaqa_credit_cpu.toml"))
    assert {"grpo", "grpo_mr", "mt_grpo", "ms_po", "turn_return"} <= set(s.algos) and s.report.baseline == "grpo"
    assert s.env_args["protocol"] == "search" and s.model == "smollm2-135m"
    # worst-case s.e. of a 0/1 metric over the cell's held-out rollouts: 0.5 / sqrt(n - 1) <= 0.04
    rollouts = s.evaluation.examples * s.evaluation.rollouts
    assert 0.5 / (rollouts - 1) ** 0.5 <= 0.04 and s.env_args["num_eval_examples"] >= s.evaluation.examples


@pytest.mark.parametrize("changes, message", [
    ({"algos": ["grpo", "mt_grop"]}, "unknown algorithm 'mt_grop'. Did you mean 'mt_grpo'?"),
    ({"algos": []}, "algos is empty"),
    ({"seeds": [0, 0]}, "distinct integers"),
    ({"training": {"batch_size": 4}}, "max_steps must be set"),
    ({"training": {"max_steps": 2, "seed": 3}}, "the study sets them per cell"),
    ({"training": {"max_steps": 2, "use_lora": True}, "evaluation": EvaluationSettings(at_steps=[1])},
     "drop at_steps or set use_lora = false"),
    ({"algo_options": {"mt_grpo": {"use_lora": True}}, "evaluation": EvaluationSettings(at_steps=[1])},
     "mt_grpo: use_lora=true with"),
    ({"replicates": 0}, "replicates = 0: give the number of runs of each cell with the same seed"),
    ({"replicates": 1.5}, "an integer >= 1"),
])
def test_bad_settings_say_what_to_change(changes, message):
    with pytest.raises(StudyError, match=message.replace("(", r"\(").replace("?", r"\?").replace(".", r"\.")):
        settings(**changes)


def test_bad_report_and_evaluation_settings():
    from rlvr.study.settings import EvaluationSettings, ReportSettings

    with pytest.raises(StudyError, match="baseline 'ppo'"):
        settings(report=ReportSettings(baseline="ppo"))
    with pytest.raises(StudyError, match="collapse_window=0"):
        settings(report=ReportSettings(collapse_window=0))
    with pytest.raises(StudyError, match="examples=0"):
        settings(evaluation=EvaluationSettings(examples=0))
    for sets in ({"valid seen": {"eval_split": "valid_seen"}}, {"valid_seen": {}}, {"valid_seen": "valid_seen"}):
        with pytest.raises(StudyError, match=r"\[evaluation.sets\] .*a table of the load_environment arguments"):
            settings(evaluation=EvaluationSettings(sets=sets))


def test_held_out_sets_change_the_environment_arguments_and_are_part_of_the_budget(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('env = "vf-alfworld"\nmodel = "tiny-random"\nalgos = ["grpo"]\nseeds = [0]\n'
                    '[env_args]\nmax_turns = 4\n[training]\nmax_steps = 1\n'
                    '[evaluation.sets]\nvalid_seen = {eval_split = "valid_seen"}\ntwc = {backend = "twc"}\n')
    s = StudySettings.from_dict(read_settings_file(path))
    assert s.evaluation.env_args("valid_seen", s.env_args) == {"max_turns": 4, "eval_split": "valid_seen"}
    assert s.evaluation.env_args("twc", s.env_args) == {"max_turns": 4, "backend": "twc"}
    fewer = StudySettings.from_dict({**read_settings_file(path), "evaluation": {"sets": {"twc": {"backend": "twc"}}}})
    with pytest.raises(StudyError, match=r"(?s)other settings.*evaluation"):
        merge_grids(s, fewer)  # the finished units were evaluated on other sets


def test_toml_keys_are_checked(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('env = "x"\nmodel = "y"\nalgo = ["grpo"]\n')
    with pytest.raises(StudyError, match="unknown key 'algo'.*Did you mean 'algos'"):
        read_settings_file(path)
    path.write_text('[evaluation]\nexample = 3\n')
    with pytest.raises(StudyError, match=r"unknown key 'example' in \[evaluation\].*'examples'"):
        read_settings_file(path)
    path.write_text("env = \n")
    with pytest.raises(StudyError, match="not valid TOML"):
        read_settings_file(path)
    with pytest.raises(StudyError, match="does not exist"):
        read_settings_file(tmp_path / "missing.toml")


def test_a_study_directory_keeps_its_budget_and_grows_its_grid():
    stored = settings()
    grown = merge_grids(stored, settings(algos=["mt_grpo", "ms_po"], seeds=[2]))
    assert grown.algos == ["grpo", "mt_grpo", "ms_po"] and grown.seeds == [0, 1, 2]
    changed = settings(training={**stored.training, "max_steps": 3}, env_args={"max_turns": 3})
    with pytest.raises(StudyError, match=r"(?s)env_args: \{\} -> \{'max_turns': 3\}.*training: .*new --out"):
        merge_grids(stored, changed)
    with pytest.raises(StudyError, match="algo_options.mt_grpo"):
        merge_grids(stored, settings(algo_options={"mt_grpo": {"credit": {"coef": 0.5}}}))


def test_cli_overrides_and_errors(tmp_path):
    config = tmp_path / "s.toml"
    config.write_text('env = "vf-triviaqa-search"\nmodel = "tiny-random"\nalgos = ["grpo", "mt_grpo"]\n'
                      'seeds = [0]\n[training]\nmax_steps = 2\nbatch_size = 4\nrollouts_per_example = 2\n'
                      'micro_batch_size = 2\n')
    out = tmp_path / "study"
    code, text = study("--config", config, "--out", out, "--dry-run", "--seeds", "3,4", "--steps", "5",
                       "--set", "learning_rate=2e-5", "--set", "mt_grpo:credit.coef=0.5", "--eval-examples", "7",
                       "--set", "beta=0.04")
    assert code == 0, text
    assert "max_steps=5" in text and "learning_rate=2e-05" in text and "7 examples x 2 rollouts" in text
    # an option outside the budget line is shown too, with the config's own ones
    assert "other training options: micro_batch_size=2, beta=0.04" in text
    assert "│ 3 │ to do │ to do │ to do │" in text and not out.exists()  # a dry run writes nothing
    # one machine's share (--cells): the other units are shown as not selected
    code, text = study("--config", config, "--out", out, "--dry-run", "--seeds", "3,4", "--cells", "grpo/seed-4")
    assert code == 0 and "│ 3 │ not selected │ not selected │ not selected │" in text, text
    assert "│ 4 │ not selected │ to do │ not selected │" in text, text
    config.write_text("replicates = 3\n" + config.read_text())
    code, text = study("--config", config, "--out", out, "--dry-run")
    assert code == 0 and "replicates: 3 runs of every cell with its own seed (4 same-seed re-runs to do" in text, text
    config.write_text(config.read_text().removeprefix("replicates = 3\n"))

    for args, message in [
        (["--set", "learnin_rate=1"], "unknown training option 'learnin_rate' in --set (algo 'grpo'). Did you mean "
                                      "'learning_rate'?"),
        (["--set", "credit.coef=1"], "training options of grpo: credit parameter(s) ['coef'] do not apply"),
        (["--algos", "grpo,mt_grop"], "Did you mean 'mt_grpo'?"),
        (["--seeds", "0,one"], "--seeds '0,one': give a comma-separated list"),
        (["--baseline", "ms_po"], "baseline 'ms_po' is not one of the study's algos"),
        (["--env-args", "[1]"], "--env-args must be a JSON object"),
    ]:
        code, text = study("--config", config, "--out", out, "--dry-run", *args)
        assert code == 2 and message in text, (args, text)

    # a study directory started with another budget
    out.mkdir()
    stored = StudySettings.from_dict({**read_settings_file(config), "training": {
        "max_steps": 9, "batch_size": 4, "rollouts_per_example": 2, "micro_batch_size": 2}})
    (out / "study.json").write_text(json.dumps({"settings": stored.to_dict()}))
    code, text = study("--config", config, "--out", out, "--dry-run")
    assert code == 2 and "started with other settings" in text and "'max_steps': 9" in text, text


def test_every_registered_recipe_fits_in_a_grid(tmp_path):
    """PPO takes the shared budget; offline recipes (sft, oreo) need their trajectories and take only the shared
    step budget, keeping their own learning rate and KL strength (same names, other meanings)."""
    from rlvr.trainer.recipes import ALGORITHMS

    training = {"max_steps": 3, "batch_size": 4, "rollouts_per_example": 2, "micro_batch_size": 2,
                "learning_rate": 5e-5, "beta": 0.0, "temperature": 0.7}
    with pytest.raises(StudyError, match=r'set \[offline_datasets\] oreo = "DIR".*rlvr collect'):
        settings(algos=["grpo", "oreo"], training=training)
    offline = [a for a in ("sft", "oreo") if a in ALGORITHMS]
    s = settings(algos=["grpo", *(a for a in ("ppo",) if a in ALGORITHMS), *offline], training=training,
                 offline_datasets=dict.fromkeys(offline, str(tmp_path / "collect")))
    check_study(s, tmp_path / "study")
    for algo in offline:
        options = s.cell_training(algo)
        assert options["max_steps"] == 3 and options["batch_size"] == 4
        assert not {"learning_rate", "beta", "temperature", "rollouts_per_example"} & set(options)
        assert not options.get("use_lora", False)  # the study's default reaches sft's LoRA option too
        assert cell_config(s, algo, 1, tmp_path / algo).learning_rate != 5e-5  # the recipe's own
    if "oreo" in offline:
        assert cell_config(s, "oreo", 1, tmp_path / "oreo").beta != 0.0
    code, text = study("--env", "vf-triviaqa-search", "--model", "tiny-random", "--algos", "grpo", "--seeds", "0",
                       "--steps", "2", "--out", tmp_path / "x", "--dry-run", "--offline-dataset", "oreo")
    assert code == 2 and "--offline-dataset 'oreo': write ALGO=DIR" in text


def test_variants_put_one_algorithm_in_the_grid_twice(tmp_path):
    """[variants] NAME = "ALGO": a cell name for a registered algorithm with options of its own (PPO's GAE modes
    side by side); the cell builds ALGO's configuration, bad names fail with what to write instead."""
    s = settings(algos=["grpo", "mt_grpo", "mt_grpo_half"], variants={"mt_grpo_half": "mt_grpo"},
                 algo_options={"mt_grpo_half": {"credit": {"coef": 0.5}}})
    plain, half = (cell_config(s, a, 0, tmp_path / a) for a in ("mt_grpo", "mt_grpo_half"))
    assert type(plain) is type(half) and plain.credit != half.credit and half.credit["coef"] == 0.5
    assert s.recipe("mt_grpo_half") == "mt_grpo" and s.recipe("grpo") == "grpo"
    for variants, message in [
        ({"grpo": "mt_grpo"}, "a variant needs a name of its own"),
        ({"../x": "mt_grpo"}, "a variant needs a name of its own"),
        ({"mine": "mt_grop"}, "'mt_grop' is not a registered algorithm"),
    ]:
        with pytest.raises(StudyError, match=message):
            settings(variants=variants)
    with pytest.raises(StudyError, match=r"unknown algorithm 'mt_grpo_hlf'\. Did you mean 'mt_grpo_half'\?"):
        settings(algos=["grpo", "mt_grpo_hlf"], variants={"mt_grpo_half": "mt_grpo"})
    with pytest.raises(StudyError, match="set \\[offline_datasets\\] oreo_fast"):  # an offline recipe's variant
        settings(algos=["grpo", "oreo_fast"], variants={"oreo_fast": "oreo"})
    # a study directory keeps what each of its names runs
    with pytest.raises(StudyError, match="variants.mt_grpo_half: 'mt_grpo' -> 'ms_po'"):
        merge_grids(s, settings(algos=["grpo", "mt_grpo_half"], variants={"mt_grpo_half": "ms_po"}))


def test_cli_options_of_a_variant(tmp_path):
    config = tmp_path / "s.toml"
    config.write_text('env = "vf-triviaqa-search"\nmodel = "tiny-random"\nalgos = ["grpo", "ppo", "ppo_bi"]\n'
                      'seeds = [0]\n[variants]\nppo_bi = "ppo"\n[training]\nmax_steps = 2\nbatch_size = 4\n'
                      'rollouts_per_example = 2\nmicro_batch_size = 2\n')
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run", "--set", "ppo_bi:gae=bi_level")
    assert code == 0 and "│ 0 │ to do │ to do │ to do │ to do │" in text, text
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run", "--set", "ppo_bi:gea=bi_level")
    assert code == 2 and "unknown training option 'gea' in --set (algo 'ppo'). Did you mean 'gae'?" in text, text


def test_replicates_grow_a_study_and_run_after_every_cell(tmp_path):
    """More replicates keep the budget (a re-run of a cell costs what the cell did) and run after all cells, so a
    study cut short has its cells first; a finished one is skipped like any cell."""
    from rlvr.study.layout import StudyLayout
    from rlvr.study.runner import pending

    stored = settings()
    assert merge_grids(stored, settings(replicates=3)).replicates == 3
    assert merge_grids(settings(replicates=3), settings(seeds=[2])).replicates == 3  # adding a seed keeps them
    layout = StudyLayout(tmp_path)
    done = layout.done(layout.cell("grpo", 1, 1))
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    assert done == tmp_path / "cells" / "grpo" / "seed-1" / "replicate-1" / "done.json"
    _, cells = pending(settings(replicates=2), layout)
    assert cells == [("grpo", 0, 0), ("mt_grpo", 0, 0), ("grpo", 1, 0), ("mt_grpo", 1, 0),
                     ("grpo", 0, 1), ("mt_grpo", 0, 1), ("mt_grpo", 1, 1)]
    assert layout.finished_replicates() == [("grpo", 1, 1)] and layout.finished_cells() == []


def test_async_steps_is_an_option_a_study_varies_under_one_budget(tmp_path):
    """async_steps changes when rollouts are generated, not how many: cells that differ in it share the budget."""
    s = settings(algos=["mt_grpo", "mt_grpo_ahead"], variants={"mt_grpo_ahead": "mt_grpo"},
                 algo_options={"mt_grpo_ahead": {"async_steps": 2, "loss_type": "decoupled_clip"}})
    plain, ahead = (cell_config(s, a, 0, tmp_path / a) for a in ("mt_grpo", "mt_grpo_ahead"))
    assert (plain.async_steps, ahead.async_steps) == (0, 2) and ahead.loss_type == "decoupled_clip"
    assert "async_steps" not in s.budget()
    assert (plain.max_steps, plain.batch_size) == (ahead.max_steps, ahead.batch_size)


def test_a_study_starts_from_a_trained_model_path_and_names_a_missing_one(tmp_path):
    """`model` may be a checkpoint directory (the pipeline's RL study starts from the SFT run's final/); a path that
    does not exist stops the study before its server starts or its manifest is written."""
    from rlvr.study.runner import check_model, run_study

    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")  # a model directory (an empty one is refused)
    check_model(str(tmp_path / "final"))
    missing = settings(model=str(tmp_path / "sft" / "final"))
    with pytest.raises(StudyError, match=r"is neither a registered model.*an SFT run's final/ directory"):
        run_study(missing, tmp_path / "study")
    assert not (tmp_path / "study" / "study.json").exists()


def test_an_offline_dataset_is_checked_with_the_cells_segmentation(tmp_path):
    """An expert export has no steps: the check before the server reads it as the cell will (its `segmentation`),
    and without one says how to segment it."""
    from rlvr.study.runner import check_offline_datasets

    expert = tmp_path / "expert"
    expert.mkdir()
    record = {"example_id": 0, "prompt": [{"role": "user", "content": "task"}], "reward": 1.0,
              "completion": [{"role": "assistant", "content": "<action>look</action>"}]}
    (expert / "predictions.jsonl").write_text(json.dumps(record) + "\n")
    options = {"sft": {"segmentation": "turn"}}
    check_offline_datasets(settings(algos=["sft"], offline_datasets={"sft": str(expert)}, algo_options=options),
                           ["sft"])
    with pytest.raises(StudyError, match=r"sft trains on .*expert, which cannot be read: .*segmentation='turn'"):
        check_offline_datasets(settings(algos=["sft"], offline_datasets={"sft": str(expert)}), ["sft"])


def test_evaluation_concurrency_is_speed_not_budget():
    """[evaluation] max_concurrent may change between invocations on one study directory (it changes how fast the
    held-out rollouts come back, not what they are); below 1 it is refused."""
    stored = settings()
    faster = settings(evaluation=EvaluationSettings(max_concurrent=32))
    assert merge_grids(stored, faster).evaluation.max_concurrent == 32
    assert StudySettings.from_dict(faster.to_dict()).evaluation.max_concurrent == 32
    with pytest.raises(StudyError, match="max_concurrent=0: each must be >= 1"):
        settings(evaluation=EvaluationSettings(max_concurrent=0))


@pytest.mark.parametrize("at_steps, message", [
    ([4, 4], r"at_steps = \[4, 4\]: give distinct steps in increasing order, each between 1 and max_steps - 1 = 11"),
    ([8, 4], "distinct steps in increasing order"),
    ([0, 4], r"step 0 is the base model's evaluation.*e\.g\. at_steps = \[4, 8\]"),
    ([4, 12], "step 12 the final one"),
    ("4,8", "give a list of training steps"),
    ([True], "give a list of training steps"),
])
def test_heldout_curve_steps_are_checked(at_steps, message):
    with pytest.raises(StudyError, match=message):
        settings(training={"max_steps": 12}, evaluation=EvaluationSettings(at_steps=at_steps))
    with pytest.raises(StudyError, match=r"at_steps \[3\] are not multiples of mt_grpo's num_iterations = 2.*cannot "
                                         "be resumed"):
        settings(training={"max_steps": 12}, algo_options={"mt_grpo": {"num_iterations": 2}},
                 evaluation=EvaluationSettings(at_steps=[2, 3]))
    with pytest.raises(StudyError, match=r"max_steps - 1 = 3 \(mt_grpo's max_steps is 4"):  # one algorithm's own
        settings(training={"max_steps": 12}, algo_options={"mt_grpo": {"max_steps": 4}},
                 evaluation=EvaluationSettings(at_steps=[4, 8]))


def test_heldout_curve_steps_are_part_of_the_budget(tmp_path):
    """A study directory's cells all have the same curve points; settings without any compare as before at_steps
    existed (older study directories and committed records still match)."""
    plain, curve = settings(), settings(evaluation=EvaluationSettings(at_steps=[1]))
    assert "at_steps" not in plain.comparable()["evaluation"] and curve.comparable()["evaluation"]["at_steps"] == [1]
    with pytest.raises(StudyError, match=r"(?s)other settings.*evaluation"):
        merge_grids(plain, curve)
    webshop = StudySettings.from_dict(read_settings_file(REPO / "configs/pipelines/studies/webshop_rl_paired.toml"))
    assert webshop.evaluation.at_steps == [4, 8] and webshop.training["max_steps"] == 12
    config = tmp_path / "s.toml"
    config.write_text('env = "vf-triviaqa-search"\nmodel = "tiny-random"\nalgos = ["grpo"]\nseeds = [0]\n'
                      '[training]\nmax_steps = 4\n[evaluation]\nat_steps = [2]\n')
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run")
    assert code == 0 and "also after steps [2] (held-out learning curve)" in text, text
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run", "--steps", "2")
    assert code == 2 and "at_steps = [2]" in text and "--at-steps with --steps" in text, text
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run", "--steps", "2", "--at-steps", "1")
    assert code == 0 and "also after steps [1]" in text, text
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run", "--steps", "2", "--at-steps", "")
    assert code == 0 and "held-out learning curve" not in text, text


@pytest.mark.parametrize("name", ["webshop_rl_paired", "webshop_rl_pilot_fresh"])
def test_webshop_studies_split_their_pairings_by_target_in_training_outside_the_budget(name):
    """[report] split_by is a report option: a study directory and its committed records compare the same with it
    or without it."""
    s = StudySettings.from_dict(read_settings_file(REPO / f"configs/pipelines/studies/{name}.toml"))
    assert s.report.split_by == "target_in_training"
    unsplit = StudySettings.from_dict({**s.to_dict(), "report": {**s.to_dict()["report"], "split_by": None}})
    assert unsplit.comparable() == s.comparable() and merge_grids(s, unsplit).report.split_by is None


def test_training_environment_arguments_change_training_only_and_are_part_of_the_budget(tmp_path):
    """[train_env_args]: the cells train on env_args with these changes (e.g. WebShop goals from another catalogue
    seed) and every held-out evaluation keeps env_args; settings without it compare as before it existed."""
    plain = settings(env_args={"max_turns": 2})
    fresh = settings(env_args={"max_turns": 2}, train_env_args={"seed": 1})
    assert fresh.training_env_args() == {"max_turns": 2, "seed": 1} and fresh.env_args == {"max_turns": 2}
    assert "train_env_args" not in plain.comparable() and fresh.comparable()["train_env_args"] == {"seed": 1}
    with pytest.raises(StudyError, match=r"(?s)other settings.*train_env_args: None -> \{'seed': 1\}"):
        merge_grids(plain, fresh)
    with pytest.raises(StudyError, match=r"train_env_args = 1: give a table"):
        settings(train_env_args=1)
    config = tmp_path / "s.toml"
    config.write_text('env = "vf-triviaqa-search"\nmodel = "tiny-random"\nalgos = ["grpo"]\nseeds = [0]\n'
                      '[train_env_args]\nnum_train_examples = 4\n[training]\nmax_steps = 1\n')
    code, text = study("--config", config, "--out", tmp_path / "study", "--dry-run")
    assert code == 0 and 'training environment: env_args with {"num_train_examples": 4}' in text, text
