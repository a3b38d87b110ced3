"""Bad input to the CLI: a non-zero exit code and a message that says what is wrong and how to fix it, before
anything slow starts. None of these needs a server."""

from __future__ import annotations

import json

import pytest
from cli_helpers import TRIVIAQA_ARGS, rlvr

INSTALLED = ("vf-gsm8k-code", "vf-musique", "vf-triviaqa-search")
DEAD_URL = "http://127.0.0.1:9"  # the discard port: nothing listens there
TRAIN = ("train", "--env", "vf-triviaqa-search", "--model", "tiny-random")


def fails(*args, code: int = 2):
    result = rlvr(*args)
    assert result.exit_code == code, result
    assert isinstance(result.exception, SystemExit), result  # a clean exit, no exception escaped
    return result


@pytest.mark.parametrize("command", [("evaluate", "--endpoint", DEAD_URL), ("predict", "--endpoint", DEAD_URL),
                                     ("train", "--model", "tiny-random")])
def test_unknown_environment_lists_installed_ones(command):
    result = fails(command[0], "--env", "vf-no-such-env", *command[1:])
    assert result.says("unknown environment 'vf-no-such-env'. Installed environments:"), result
    for name in INSTALLED:
        assert name in result.output
    assert result.says("fix: `rlvr env install vf-no-such-env`"), result


def test_environment_that_fails_to_load_says_why():
    args = json.dumps({**TRIVIAQA_ARGS, "protocol": "smoke-signals"})
    result = fails("evaluate", "--env", "vf-triviaqa-search", "--endpoint", DEAD_URL, "--env-args", args)
    assert result.says("vf-triviaqa-search failed to load"), result
    assert result.says("unknown protocol='smoke-signals'"), result


@pytest.mark.parametrize("command", [TRAIN[:3], ("evaluate", "--env", "vf-triviaqa-search")])
def test_unknown_model(command):
    result = fails(*command, "--model", "no-such-model", "--env-args", json.dumps(TRIVIAQA_ARGS))
    assert result.says("model 'no-such-model' is neither a registered model"), result
    assert "tiny-random" in result.output and "smollm2-135m" in result.output


def test_bad_set_key_suggests_the_closest():
    result = fails(*TRAIN, "--set", "learning_rat=1")
    assert result.says("unknown training option 'learning_rat' in --set (algo 'mt_grpo'). Did you mean 'learning_rate'?"), result


def test_set_without_value():
    result = fails(*TRAIN, "--set", "max_steps")
    assert result.says("--set 'max_steps': write KEY=VALUE"), result


def test_bad_config_keys_suggest_the_closest(tmp_path):
    config = tmp_path / "typo.toml"
    config.write_text('env = "vf-triviaqa-search"\nmodel = "tiny-random"\n[training]\nrollouts_per_exmple = 4\n')
    result = fails("train", "--config", config)
    assert result.says(f"unknown training option 'rollouts_per_exmple' in {config} (algo 'mt_grpo')."), result
    assert result.says("Did you mean 'rollouts_per_example'?"), result

    config.write_text('env = "vf-triviaqa-search"\nmodel = "tiny-random"\n[env_arg]\nmax_turns = 2\n')
    result = fails("train", "--config", config)
    assert result.says(f"unknown key 'env_arg' in {config}. Did you mean 'env_args'?"), result


def test_config_file_missing_or_not_toml(tmp_path):
    result = fails("train", "--config", tmp_path / "missing.toml")
    assert result.says(f"--config {tmp_path / 'missing.toml'} does not exist"), result
    broken = tmp_path / "broken.toml"
    broken.write_text("[training\nmax_steps = 2\n")
    result = fails("train", "--config", broken)
    assert result.says(f"--config {broken} is not valid TOML"), result


def test_config_value_the_trainer_rejects(tmp_path):
    result = fails(*TRAIN, "--server", DEAD_URL, "--run-dir", tmp_path / "run", "--env-args", json.dumps(TRIVIAQA_ARGS),
                   "--set", "batch_size=10", "--set", "rollouts_per_example=4", "--set", "report_to=none")
    assert result.says("batch_size=10 is not a multiple of rollouts_per_example=4"), result
    assert result.says("Try batch_size=8"), result


@pytest.mark.parametrize(("algo", "hint"), [("mtgrpo", "Did you mean 'mt_grpo'?"),
                                            ("reinforce", "Use one of grpo, grpo_mr, mt_grpo, ms_grpo, ms_po")])
def test_bad_algo(algo, hint):
    result = fails(*TRAIN, "--algo", algo)
    assert result.says(f"unknown --algo '{algo}'."), result
    assert result.says(hint), result


def test_credit_parameters_are_checked_against_the_algorithm(tmp_path):
    result = fails(*TRAIN, "--set", "credit.coef=0.5", "--algo", "grpo", "--run-dir", tmp_path / "run",
                   "--env-args", json.dumps(TRIVIAQA_ARGS), "--set", "report_to=none")
    assert result.says("credit parameter(s) ['coef'] do not apply to algo='grpo'"), result
    result = fails(*TRAIN, "--set", "max_steps.x=1")
    assert result.says("--set 'max_steps.x=1': max_steps is not a table option"), result


def test_the_algorithm_is_refused_as_an_environment_argument():
    result = fails("evaluate", "--env", "vf-triviaqa-search", "--endpoint", DEAD_URL,
                   "--env-args", json.dumps({**TRIVIAQA_ARGS, "estimator": "mt_grpo"}))
    assert result.says("['estimator'] in the environment arguments of vf-triviaqa-search"), result
    assert result.says("rlvr train --algo"), result


def test_missing_env_or_model():
    result = fails("train", "--env", "vf-triviaqa-search")
    assert result.says("give --env and --model (or env/model in --config)"), result


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_endpoint_unreachable(command):
    result = fails(command, "--env", "vf-triviaqa-search", "--endpoint", DEAD_URL,
                   "--env-args", json.dumps(TRIVIAQA_ARGS))
    assert result.says(f"no OpenAI-compatible server answers at {DEAD_URL}/v1"), result
    assert result.says("fix: start one with `rlvr serve --model MODEL`"), result


def test_evaluate_needs_exactly_one_of_model_and_endpoint():
    for extra in ((), ("--model", "tiny-random", "--endpoint", DEAD_URL)):
        result = fails("evaluate", "--env", "vf-triviaqa-search", "--env-args", json.dumps(TRIVIAQA_ARGS), *extra)
        assert result.says("give exactly one of --model (start a server here) or --endpoint URL"), result


def test_train_server_unreachable(tmp_path):
    result = fails(*TRAIN, "--server", DEAD_URL, "--run-dir", tmp_path / "run", "--env-args", json.dumps(TRIVIAQA_ARGS),
                   "--set", "batch_size=8", "--set", "rollouts_per_example=4", "--set", "micro_batch_size=4",
                   "--set", "report_to=none", "--set", "progress=false")
    assert result.says(f"the rollout server at {DEAD_URL} is unreachable"), result
    assert result.says("rlvr serve --model tiny-random"), result


def test_study_server_unreachable(tmp_path):
    result = fails("study", "--env", "vf-triviaqa-search", "--model", "tiny-random", "--algos", "grpo", "--seeds", "0",
                   "--steps", "1", "--env-args", json.dumps(TRIVIAQA_ARGS), "--eval-examples", "2", "--server",
                   DEAD_URL, "--out", tmp_path / "study")
    assert result.says(f"the rollout server at {DEAD_URL} is unreachable"), result
    assert result.says("or leave out --server (server_url=None in Python): rlvr then starts its own"), result
    assert not (tmp_path / "study" / "server.log").exists() and not (tmp_path / "study" / "cells").exists()


@pytest.mark.parametrize(("text", "message"), [
    ("{bad", "--env-args is not valid JSON"),
    ("[1, 2]", "--env-args must be a JSON object, got list"),
])
@pytest.mark.parametrize("command", [("evaluate", "--endpoint", DEAD_URL), TRAIN[:1] + TRAIN[3:]])
def test_bad_env_args(text, message, command):
    result = fails(command[0], "--env", "vf-triviaqa-search", *command[1:], "--env-args", text)
    assert result.says(message), result
