"""On-disk index cache: one directory per (corpus content hash, retriever parameters), published atomically."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.io import atomic_directory, exclusive
from rlvr.models import rlvr_home


def index_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir` if given, else `$RLVR_HOME/index` (default `~/.cache/rlvr/index`)."""
    return Path(cache_dir) if cache_dir is not None else rlvr_home() / "index"


def cache_key(**params: Any) -> str:
    """A short stable key for the parameters an index depends on (corpus hash included by the caller)."""
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def cached_dir(root: Path, name: str, build: Callable[[Path], None]) -> Path:
    """Return `root/name`, first filling it with `build(tmp_dir)` if it is missing.

    The directory is published by rename (rlvr.io.atomic_directory), so a reader sees either no index or a
    complete one, never a half-written one, even if a build is killed midway. Processes that ask for the same
    missing index at once build it once (rlvr.io.exclusive): the others wait and read it.
    """
    final = root / name
    if not final.is_dir():
        with exclusive(final):
            if not final.is_dir():  # built by another process while this one waited
                with atomic_directory(final) as tmp:
                    build(tmp)
    return final
