"""The client's side of the CPU transport's file: a state dict as one safetensors file, written with few copies.

- `state_tensors`: the tensors to write. A tied tensor (lm_head / embed_tokens: the same memory under two names)
  is written once and recorded as an alias in the header (`rlvr.serve.protocol.aliases_metadata`).
- `StagingFile`: the file transport's file, kept for the client's lifetime and overwritten in place while the
  layout (names, dtypes, shapes) stays the same. A fresh 621 MiB file per update made tmpfs allocate, zero and
  free every page each time (0.23 s write + 0.09 s delete of SmolLM2-135M on an idle machine); overwriting the
  same pages is one memcpy per tensor (docs/serve.md has the numbers).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save, save_file

from rlvr.serve.protocol import WEIGHTS_DIR_PREFIX, aliases_metadata

FILE_NAME = "weights.safetensors"
# Room left on /dev/shm beyond the file itself before the client prefers it (the safetensors header and slack).
SHM_MARGIN_BYTES = 64 * 2**20
# A weights directory whose file nobody holds locked is removed once it is this old (its client died).
STALE_AFTER_S = 60.0


@dataclass(frozen=True)
class StateTensors:
    """A state dict ready to write: CPU, contiguous tensors of which no two share memory, and the tied names."""

    tensors: dict[str, torch.Tensor]
    aliases: dict[str, str]  # tied name -> the name under which the tensor is stored

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    @property
    def num_names(self) -> int:
        return len(self.tensors) + len(self.aliases)

    def to_bytes(self) -> bytes:
        """The safetensors file as bytes (the body of the http transport)."""
        return save(self.tensors, metadata=aliases_metadata(self.aliases))


def state_tensors(state_dict: Mapping[str, torch.Tensor]) -> StateTensors:
    """The tensors of `state_dict` as safetensors can write them, without copying what needs no copy.

    A tensor that is exactly an earlier one (same memory, dtype and shape: tied weights) becomes an alias; one
    that overlaps another's storage otherwise is cloned, since safetensors refuses shared storage.
    """
    if not state_dict:
        raise ValueError(
            "the state dict is empty: pass model.state_dict() (checkpoint names, e.g. model.layers.0...)"
        )
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    names_by_view: dict[tuple, str] = {}
    storages: set[int] = set()
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state_dict[{name!r}] is a {type(tensor).__name__}, not a torch.Tensor")
        tensor = tensor.detach().to("cpu").contiguous()
        view = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if view in names_by_view:
            aliases[name] = names_by_view[view]
            continue
        names_by_view[view] = name
        if tensor.untyped_storage().data_ptr() in storages:
            tensor = tensor.clone()
        storages.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    return StateTensors(tensors, aliases)


def default_shared_root(nbytes: int) -> Path:
    """/dev/shm when it exists and has room for `nbytes` (Docker's default is 64 MiB), else the system temp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir():
        stats = os.statvfs(shm)
        if stats.f_bavail * stats.f_frsize >= nbytes + SHM_MARGIN_BYTES:
            return shm
    return Path(tempfile.gettempdir())


class StagingFile:
    """``<root>/rlvr-weights-<uuid>/weights.safetensors``, in a directory created 0700 (the server requires it,
    `rlvr.serve.cpu_routes.weights_file`), rewritten in place by every `write` with the same layout.

    In-place rewriting is safe because the server reads the file only while the client waits for the answer to
    the request that names it, and a client sends one update at a time. While the directory lives its client
    holds an exclusive `flock` on it; `remove_stale` deletes directories left by clients that died (their lock
    is free). `remove` (or garbage collection, or interpreter exit) deletes the directory.
    """

    def __init__(self, root: Path) -> None:
        remove_stale(root)
        self.directory = root / f"{WEIGHTS_DIR_PREFIX}{uuid.uuid4().hex}"
        self.directory.mkdir(mode=0o700)
        self.path = self.directory / FILE_NAME
        self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self._dir_fd, fcntl.LOCK_EX)
        self._remove = weakref.finalize(self, _remove_directory, self.directory, self._dir_fd)
        self._layout: tuple | None = None
        self._offsets: dict[str, int] = {}

    def write(self, state: StateTensors) -> Path:
        """Make the file hold `state`; returns its path. No fsync: the file lives in RAM and for one load."""
        layout = (
            tuple((name, t.dtype, tuple(t.shape)) for name, t in state.tensors.items()),
            tuple(sorted(state.aliases.items())),
        )
        if layout != self._layout:
            # A new layout (or the first write): safetensors writes header and data to a new file.
            self._layout = None
            save_file(state.tensors, self.path, metadata=aliases_metadata(state.aliases))
            self._offsets = data_offsets(self.path)
            self._layout = layout
            return self.path
        fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            for name, tensor in state.tensors.items():
                if tensor.numel():
                    _pwrite_all(fd, tensor.reshape(-1).view(torch.uint8).numpy(), self._offsets[name])
        finally:
            os.close(fd)
        return self.path

    def remove(self) -> None:
        self._remove()


def data_offsets(path: Path) -> dict[str, int]:
    """Where each tensor's bytes start in a safetensors file (the format: an 8-byte little-endian header length,
    a JSON header with ``data_offsets`` relative to the end of the header, then the data; safetensors README)."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
    return {
        name: 8 + header_len + info["data_offsets"][0]
        for name, info in header.items()
        if name != "__metadata__"
    }


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:  # Linux writes at most ~2 GiB per call
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _remove_directory(directory: Path, fd: int) -> None:
    os.close(fd)
    shutil.rmtree(directory, ignore_errors=True)


def remove_stale(root: Path, min_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Delete this user's ``rlvr-weights-*`` directories under `root` that no live client holds; returns them.

    A directory counts as stale when it is older than `min_age_s` and nobody holds the lock on it (a live
    `StagingFile` always does; locks die with their process, also across containers sharing the filesystem).
    """
    removed = []
    for directory in root.glob(f"{WEIGHTS_DIR_PREFIX}*"):
        try:
            info = directory.lstat()
            if (
                not stat.S_ISDIR(info.st_mode)
                or info.st_uid != os.geteuid()
                or time.time() - info.st_mtime < min_age_s
                or _locked(directory)
            ):
                continue
        except OSError:
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def _locked(directory: Path) -> bool:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing also releases a lock this call took
    return False
