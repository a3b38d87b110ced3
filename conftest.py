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
