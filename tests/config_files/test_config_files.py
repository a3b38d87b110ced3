"""rlvr.config_files: every reading mistake names what is wrong and how to fix it, in the caller's error type."""

from __future__ import annotations

import pytest

from rlvr.config_files import check_keys, did_you_mean, parse_env_args, read_toml


class Bad(Exception):
    pass


def test_env_args_are_a_json_object():
    assert parse_env_args('{"max_turns": 3, "backend": "twc"}', Bad) == {"max_turns": 3, "backend": "twc"}
    assert parse_env_args("{}", Bad) == {}


@pytest.mark.parametrize(("text", "says"), [
    ("{max_turns: 3}", "--env-args is not valid JSON"),
    ("[1, 2]", "--env-args must be a JSON object, got list"),
    ("3", "got int"),
])
def test_bad_env_args_raise_the_callers_error_naming_the_text(text, says):
    with pytest.raises(Bad) as err:
        parse_env_args(text, Bad)
    assert says in str(err.value) and repr(text) in str(err.value)


def test_an_unknown_key_names_the_closest_allowed_one_or_lists_them():
    check_keys({"max_steps": 1}, ["max_steps", "seed"], "[training]", Bad)
    with pytest.raises(Bad, match=r"unknown key 'max_step' in \[training\]\. Did you mean 'max_steps'\?"):
        check_keys({"max_step": 1}, ["max_steps", "seed"], "[training]", Bad)
    with pytest.raises(Bad, match=r"Allowed: max_steps, seed\. See the README"):
        check_keys({"zzz": 1}, ["seed", "max_steps"], "[training]", Bad, " See the README")
    assert did_you_mean("zzz", ["seed"]) == ""


def test_read_toml_says_which_file_is_missing_or_broken(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('env = "vf-alfworld"\n[training]\nmax_steps = 3\n')
    assert read_toml(good, "study config", "configs/study", Bad) == {"env": "vf-alfworld", "training": {"max_steps": 3}}
    with pytest.raises(Bad, match=r"study config .*missing\.toml does not exist \(examples: configs/study\)"):
        read_toml(tmp_path / "missing.toml", "study config", "configs/study", Bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("env = \n")
    with pytest.raises(Bad, match=r"study config .*broken\.toml is not valid TOML"):
        read_toml(broken, "study config", "configs/study", Bad)
