"""Atomic writes: a file or directory appears complete or not at all, so a crash never leaves half a result."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``final``; on success it replaces ``final`` (two renames)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on building `target` for the block: processes that fill the same cache entry take
    turns, so the second finds it built instead of building it again and replacing it under the first one's readers.
    flock(2) on a file named by the target's path, in the temp dir (never in the cache itself); the kernel releases
    it when the holder dies, so a killed builder blocks no one."""
    key = hashlib.sha256(str(Path(target).resolve()).encode()).hexdigest()[:24]
    lock_file = Path(tempfile.gettempdir()) / f"rlvr-locks-{os.getuid()}" / f"{key}.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# mkstemp creates its file 0600; a result, a report or a record is meant to be read as a file written by open()
# would be (0644 under the usual umask), e.g. by others sharing the run directory or the results a study exports.
FILE_MODE = 0o666 & ~_umask()


def atomic_write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, default=str, allow_nan=True))


def append_jsonl(path: Path, record: dict) -> None:
    """Append one line and fsync: a crash loses at most the line being written, never earlier lines."""
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())
