"""`rlvr env init` and `rlvr env build`: the scaffold's wheel passes the fresh-venv check, vf-init's does not."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest
from verifiers.scripts.init import init_environment as vf_init

from rlvr import hub


def test_env_names_have_one_spelling_per_role():
    expected = hub.EnvName(dist="vf-gsm8k-code", module="vf_gsm8k_code")
    for name in ("gsm8k-code", "gsm8k_code", "vf-gsm8k-code", "vf_gsm8k_code"):
        assert hub.EnvName.parse(name) == expected
    for bad in ("Gsm8k", "gsm8k code", "-gsm8k", "gsm8k--code", "9lives"):
        with pytest.raises(hub.HubError, match=f"invalid environment name '{bad}'"):
            hub.EnvName.parse(bad)


def test_scaffold_builds_installs_fresh_and_passes_its_own_tests(tmp_path, rlvr):
    created = rlvr("env", "init", "toy-sum", "--path", str(tmp_path))
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "vf_toy_sum"
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()) == [
        "README.md", "pyproject.toml", "tests/test_vf_toy_sum.py", "vf_toy_sum/__init__.py"]

    # The generated tests pass against the generated module, the fuzz tests among them (rlvr.testing).
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project,
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(project)})
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout
    generated = (project / "vf_toy_sum" / "__init__.py").read_text()
    assert "turn_rewards=[(tool_execution_reward, 1.0)]" in generated and "estimator" not in generated

    built = rlvr("env", "build", "toy-sum", "--path", str(tmp_path))
    assert built.returncode == 0, built.stdout + built.stderr
    assert "check passed: vf-toy-sum 0.1.0 installs into a fresh venv" in built.stdout
    assert "vf.load_environment gives a GuardedToolEnv" in built.stdout
    wheel = project / "dist" / "vf_toy_sum-0.1.0-py3-none-any.whl"
    assert (project / "dist" / "vf_toy_sum-0.1.0.tar.gz").is_file()
    top_level = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert top_level == {"vf_toy_sum", "vf_toy_sum-0.1.0.dist-info"}

    again = rlvr("env", "init", "toy-sum", "--path", str(tmp_path))
    assert again.returncode == 1
    assert f"{project} already exists" in again.stdout


def test_check_rejects_the_wheel_of_verifiers_vf_init_template(tmp_path, rlvr):
    project = vf_init("vf-legacy", str(tmp_path))  # verifiers' own template, single-file layout
    result = rlvr("env", "build", str(project))
    assert result.returncode == 1
    assert (project / "dist" / "vf_legacy-0.1.0-py3-none-any.whl").is_file()  # it builds; the check refuses it
    assert "error: vf_legacy-0.1.0-py3-none-any.whl, installed into a fresh venv: vf-legacy failed" in result.stdout
    assert ("pyproject.toml lands at the site-packages root (shipped by vf-legacy); it collides with every other "
            "package doing the same. Build the wheel from a package folder: [tool.hatch.build.targets.wheel] "
            'packages = ["<module>"]') in result.stdout
    # The template's load_environment is a stub; the check loads it for real and reports the traceback.
    assert "vf.load_environment('vf-legacy') failed in that venv" in result.stdout
    assert "NotImplementedError" in result.stdout


def test_build_of_an_unknown_environment_says_where_it_looked(tmp_path, rlvr):
    result = rlvr("env", "build", "nope", "--path", str(tmp_path))
    assert result.returncode == 1
    assert f"neither nope nor {tmp_path / 'vf_nope'} holds a pyproject.toml" in result.stdout
    assert "rlvr env init NAME" in result.stdout
