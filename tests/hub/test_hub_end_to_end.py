"""The whole path a shared environment takes: build vf-gsm8k-code, publish it (and the rlvr core it depends
on) to a real pypiserver, install it by name into a fresh venv, load it there and evaluate one example
against `rlvr serve`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rlvr import hub

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_publish_install_and_evaluate_gsm8k_code(
    tmp_path, package_index, credentials, pip_sees_only_the_index, tiny_server, rlvr
):
    # Work on a copy: building writes dist/ into the project, which belongs to the environment's owner.
    project = shutil.copytree(REPO_ROOT / "environments" / "vf_gsm8k_code", tmp_path / "vf_gsm8k_code",
                              ignore=shutil.ignore_patterns("dist", "__pycache__", ".pytest_cache"))
    # Environment packages depend on the rlvr core, which is on no public index: the hub hosts it too.
    hub.publish([hub.build_wheel(REPO_ROOT, tmp_path / "core")], package_index.url)

    built = rlvr("env", "build", str(project))
    assert built.returncode == 0, built.stdout + built.stderr
    assert "check passed: vf-gsm8k-code 0.1.0" in built.stdout

    published = rlvr("env", "publish", str(project), "--repository", package_index.url)
    assert published.returncode == 0, published.stdout + published.stderr
    assert hub.published_versions(package_index.simple_url, "vf-gsm8k-code") == {"0.1.0"}

    # A fresh venv that borrows verifiers, torch, ... but neither rlvr nor any environment: pip must
    # fetch both from the index, resolving vf-gsm8k-code's dependency on rlvr there.
    python = hub.make_fresh_venv(tmp_path / "venv")
    installed = rlvr("env", "install", "vf-gsm8k-code", "--index-url", package_index.simple_url,
                     "--python", str(python))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "installed vf-gsm8k-code 0.1.0: vf.load_environment gives a CodeXMLEnv" in installed.stdout
    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    assert (site / "vf_gsm8k_code" / "__init__.py").is_file() and (site / "rlvr" / "__init__.py").is_file()
    assert not (site / "pyproject.toml").exists()
    # the accelerate configs ship inside the installed rlvr wheel and resolve there (no repository checkout needed)
    resolved = subprocess.check_output([str(python), "-c", "from rlvr.trainer.run import accelerate_config as f; "
                                        "print(f(2, cuda=False))"], text=True).strip().splitlines()[-1]
    assert Path(resolved) == site / "rlvr" / "trainer" / "accelerate" / "cpu_ddp.yaml" and Path(resolved).is_file()

    listed = rlvr("env", "list", python=python)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if "vf-gsm8k-code" in line]
    assert "0.1.0" in row and str(site) in row and "editable" not in row
    assert "verifiers" not in listed.stdout.replace("vf-", "")

    # One example through verifiers' own evaluation CLI, run by the fresh venv's interpreter.
    evaluate = subprocess.run(
        [str(python), "-m", "verifiers.scripts.eval", "vf-gsm8k-code", "-m", tiny_server.model,
         "-b", tiny_server.base_url, "-n", "1", "-r", "1", "-t", "48", "-s"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "unused"},
    )
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs" / "evals" / f"vf-gsm8k-code--{tiny_server.model}").iterdir()
    (row,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert 0.0 <= row["reward"] <= 1.0 and row["completion"][0]["role"] == "assistant"

    again = rlvr("env", "publish", str(project), "--repository", package_index.url)
    assert again.returncode == 1
    assert f"vf-gsm8k-code 0.1.0 is already on {package_index.url}" in again.stdout
