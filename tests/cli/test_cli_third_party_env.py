"""Any verifiers environment trains: a third-party-style package (tests/cli/third_party/vf_plain_qa: no rlvr import, a
plain vf.Rubric, `load_environment` with only its own arguments) is installed with verifiers' own `vf-install`,
trained with `rlvr train --algo grpo` on tiny-random and evaluated with `rlvr evaluate`; a turn-level algorithm is
refused with what is missing. The package is installed into a copy outside the repository and uninstalled after."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from cli_helpers import ok, read_jsonl, rlvr

pytestmark = pytest.mark.slow
PACKAGE = Path(__file__).resolve().parent / "third_party" / "vf_plain_qa"


def uv(*args: str) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix}
    return subprocess.run([str(bin_dir / "uv"), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("third_party")
    shutil.copytree(PACKAGE, root / "vf_plain_qa")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix}
    proc = subprocess.run([str(bin_dir / "vf-install"), "vf-plain-qa", "-p", str(root)], env=env,
                          capture_output=True, text=True, timeout=300)
    # vf-install does not check uv's exit code: check that the module imports in a fresh interpreter instead
    probe = subprocess.run([sys.executable, "-c", "import vf_plain_qa; print(vf_plain_qa.__file__)"],
                           capture_output=True, text=True)
    assert probe.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + probe.stderr[-2000:]
    # this interpreter started before the install: read site-packages' .pth files again to see the package
    site.addsitedir(sysconfig.get_paths()["purelib"])
    importlib.invalidate_caches()
    yield root
    uv("pip", "uninstall", "vf-plain-qa")


SETTINGS = ["--set", "max_steps=1", "--set", "batch_size=8", "--set", "rollouts_per_example=4",
            "--set", "micro_batch_size=4", "--set", "max_tokens_per_turn=4", "--set", "use_lora=false",
            "--set", "report_to=none", "--set", "progress=false", "--set", "save_steps=1"]


def test_plain_environment_trains_with_grpo_and_evaluates(installed, training_server, tmp_path):
    """On the session's training server (a run pushes its weights before its first batch; the evaluation then
    reads the trained ones)."""
    run_dir = tmp_path / "run"
    ok("train", "--env", "vf-plain-qa", "--model", "tiny-random", "--algo", "grpo", "--server", training_server.url,
       "--run-dir", run_dir, "--env-args", '{"num_examples": 8}', *SETTINGS)
    (step,) = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    assert step["batch/samples"] == 8 and "correct" in step and 0.0 <= step["reward"] <= 1.0
    assert "turn/1/reward" not in step  # a plain rubric gives no turn rewards, and none are invented
    assert json.loads((run_dir / "config.json").read_text())["env_args"] == {"num_examples": 8}
    assert (run_dir / "final" / "model.safetensors").is_file()

    out = tmp_path / "eval"
    ok("evaluate", "--env", "vf-plain-qa", "--endpoint", training_server.url, "-n", "2", "-r", "2",
       "--max-tokens", "4", "--out", out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward"]["n"] == 4 and "correct" in summary


def test_a_turn_level_algorithm_says_what_the_environment_lacks(installed, tmp_path):
    result = rlvr("train", "--env", "vf-plain-qa", "--model", "tiny-random", "--algo", "mt_grpo",
                  "--server", "http://127.0.0.1:9", "--run-dir", tmp_path / "run", *SETTINGS)
    assert result.exit_code == 2, result
    assert result.says("algo='mt_grpo' assigns credit per turn, but SingleTurnEnv's rubric"), result
    assert result.says("Train with algo='grpo' (outcome only)"), result
