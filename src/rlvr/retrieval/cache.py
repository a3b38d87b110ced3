"""On-disk index cache: one directory per (corpus content hash, retriever parameters), published atomically."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.models import rlvr_home


def index_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir` if given, else `$RLVR_HOME/index` (default `~/.cache/rlvr/index`)."""
    return Path(cache_dir) if cache_dir is not None else rlvr_home() / "index"


def cache_key(**params: Any) -> str:
    """A short stable key for the parameters an index depends on (corpus hash included by the caller)."""
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def cached_dir(root: Path, name: str, build: Callable[[Path], None]) -> Path:
    """Return `root/name`, first running `build(tmp_dir)` and renaming tmp_dir into place if it is missing.

    The rename is atomic on POSIX (same filesystem), so a reader sees either no index or a complete one,
    never a half-written one, even if a build is killed or two processes build the same index at once.
    """
    final = root / name
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}.tmp-"))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            # Another process published the same index first; its content is identical by construction.
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
