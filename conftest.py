"""Fixtures shared by the core tests (tests/) and every environment package's tests (environments/*/tests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The public data samples (`../shared/data` beside the repo, or $RLVR_SHARED_DATA). Missing = failure."""
    path = Path(os.environ.get("RLVR_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not (path / "README.md").is_file():
        pytest.fail(
            f"public data samples not found at {path}: put the shared/ folder beside the repository "
            "or set RLVR_SHARED_DATA to its data/ folder",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from rlvr import models

    return models.prepare("tiny-random")


@pytest.fixture(scope="session")
def smol_model() -> Path:
    from rlvr import models

    return models.prepare("smollm2-135m")


def _serve(model: str):
    from rlvr.serve import launch

    return launch(model=model)


@pytest.fixture(scope="session")
def tiny_server(tiny_model):
    """One `rlvr serve` of tiny-random for the whole session. Never change its weights."""
    with _serve("tiny-random") as server:
        yield server


@pytest.fixture(scope="session")
def smol_server(smol_model):
    """One `rlvr serve` of SmolLM2-135M for the whole session. Never change its weights."""
    with _serve("smollm2-135m") as server:
        yield server


@pytest.fixture(scope="session")
def training_server(tiny_model):
    """One fp32 `rlvr serve` of tiny-random that training runs share (the trainer tests', the CLI's, the environments',
    rlvr view's): a run pushes its weights before its first batch, so what an earlier run left there does not matter,
    and the shared servers above keep theirs. fp32 like the trainer on CPU (vLLM's CPU default is bf16), so that
    the server's logprobs can be compared with the trainer's to float32 rounding."""
    from rlvr.serve import launch

    with launch(model="tiny-random", extra_args=["--dtype", "float32"]) as server:
        yield server


@pytest.fixture(scope="session")
def mt_grpo_run(training_server, tmp_path_factory) -> Path:
    """One real run for the tests that read a run directory (the token log's, rlvr view's; read only): the trainer
    tests' script (tests/trainer/train_script.py), 2 MT-GRPO steps of tiny-random on `training_server`."""
    import subprocess
    import sys

    run_dir = tmp_path_factory.mktemp("mt_grpo") / "run"
    result = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "trainer" / "train_script.py"), "--server",
                             training_server.url, "--run-dir", str(run_dir), "--algo", "mt_grpo", "--steps", "2"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="session")
def vf_install():
    """Run verifiers' own `vf-install ENV -p environments` (it runs `uv pip install -e`; uv is in this venv)."""
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent

    def install(env_id: str) -> None:
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix}
        proc = subprocess.run(
            [str(bin_dir / "vf-install"), env_id, "-p", "environments"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    return install


@pytest.fixture(scope="session")
def vf_eval():
    """Run verifiers' own `vf-eval` CLI against a server; returns (metadata, rows) of the results it saved."""
    import json
    import subprocess
    import sys

    def run(env_id: str, server, workdir: Path, *, num_examples: int, rollouts: int, env_args=None,
            max_tokens: int = 48) -> tuple[dict, list[dict]]:
        command = [
            str(Path(sys.executable).parent / "vf-eval"), env_id, "-m", server.model, "-b", server.base_url,
            "-n", str(num_examples), "-r", str(rollouts), "-t", str(max_tokens), "-a", json.dumps(env_args or {}), "-s",
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PRIME_API_KEY": "unused"}
        proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        # vf-eval saves under ./outputs/evals/<env>--<model>/<run id>/ when run outside the repository
        (run_dir,) = (workdir / "outputs" / "evals" / f"{env_id}--{server.model}").iterdir()
        rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
        metadata = json.loads((run_dir / "metadata.json").read_text())
        assert metadata["num_examples"] == num_examples and metadata["rollouts_per_example"] == rollouts
        assert len(rows) == num_examples * rollouts and len({r["example_id"] for r in rows}) == num_examples
        return metadata, rows

    return run


# Fixtures that start a vLLM server (a minute or more each on CPU): a test that uses one is slow, and must say so,
# so that `make test-fast` (-m "not slow") never starts a server. Slow modules mark themselves with
# `pytestmark = pytest.mark.slow`.
SERVER_FIXTURES = frozenset({"tiny_server", "smol_server", "training_server"})


# End-to-end runs of a whole benchmark pipeline (20+ minutes each on 2 cores) carry `long` (and `slow`): `make test`
# leaves them to `make test-long`, which keeps the suite's time bounded. Registered here (pyproject's list is part of
# the setup stamp).
def pytest_configure(config):
    config.addinivalue_line("markers", "long: whole pipelines end to end (20+ min) and the extra seeds of learning "
                            "checks: `make test-long`, not `make test`")


# The GPU checks (tests/gpu, marker `gpu`) run where torch sees a CUDA device (`make gpu-check`); elsewhere they are
# skipped, saying so. RLVR_GPU_CHECK_DEVICE=cpu runs them on CPU: a dry run of their logic (tests/gpu/conftest.py).
GPU_SKIP_REASON = "needs a CUDA device (make gpu-check on a GPU machine)"


def skip_gpu_tests_without_cuda(items) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or os.environ.get("RLVR_GPU_CHECK_DEVICE") == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_cuda(items)
    unmarked = [item for item in items
                if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None]
    for item in unmarked:  # still kept out of the fast profile, and named so that the module gets its mark
        item.add_marker(pytest.mark.slow)
        item.warn(pytest.PytestUnknownMarkWarning(
            f"{item.nodeid} starts a vLLM server but is not marked slow: add `pytestmark = pytest.mark.slow`"))
