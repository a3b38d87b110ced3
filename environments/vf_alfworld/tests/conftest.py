"""Fixtures for the vf-alfworld tests: one cache of generated games for the whole session (generation is checked
once; later loads read the cache), and small environments over it."""

from __future__ import annotations

import pytest
from vf_alfworld import load_environment

SMALL = dict(num_train_examples=6, num_eval_examples=6, max_turns=12)


@pytest.fixture(scope="session")
def game_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("alfworld-games"))


@pytest.fixture(scope="session")
def small_env(game_cache):
    """6 training games (one per task type) and 6 valid_unseen games, generated once per session."""
    return load_environment(**SMALL, cache_dir=game_cache)


@pytest.fixture(scope="session")
def twc_env():
    return load_environment(backend="twc", **SMALL)
