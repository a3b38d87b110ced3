import pytest


@pytest.fixture(autouse=True)
def _private_index_cache(tmp_path, monkeypatch):
    """Each test gets its own $RLVR_HOME so on-disk indexes never leak between tests (or into ~/.cache)."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr_home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
