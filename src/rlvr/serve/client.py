"""`CPUWeightSyncClient`: the trainer's side of the CPU weight-sync transport of `rlvr serve`.

Two ways to hand the server a safetensors file of the state dict, which every vLLM worker then reloads:

- ``"file"`` (trainer and server on one machine): write the file into a private ``rlvr-weights-<uuid>``
  directory on a RAM-backed filesystem and send only its path (``POST /rlvr/update_weights_from_path``).
- ``"http"`` (remote server): send the file's bytes as the request body (``POST /rlvr/update_weights``).
  For SmolLM2-135M (621 MiB fp32) this took ~81 s per update against ~4 s for the file (docs/serve.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import httpx
import torch
from safetensors.torch import save, save_file

from rlvr.serve.protocol import (
    ADMIN_HEADER,
    ADMIN_TOKEN_ENV,
    CPU_UPDATE_FROM_PATH,
    CPU_UPDATE_PATH,
    REASON_NOT_ALLOWED,
    REASON_NOT_FOUND,
    WEIGHTS_DIR_PREFIX,
    is_loopback,
)

TRANSPORTS = ("auto", "file", "http")
# Server refusals of a path after which "auto" sends the bytes instead: the server cannot see the client's file
# (another container or filesystem, a different temp dir).
FALLBACK_REASONS = frozenset({REASON_NOT_FOUND, REASON_NOT_ALLOWED})
# Room left on /dev/shm beyond the file itself before the client prefers it (the safetensors header and slack).
SHM_MARGIN_BYTES = 64 * 2**20

logger = logging.getLogger("rlvr.serve.client")


class WeightSyncError(RuntimeError):
    """The server refused or failed a weight update."""


def prepare_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors safetensors can write: CPU, contiguous, detached, no two sharing storage.

    Tied weights (embed_tokens / lm_head) share storage, which safetensors refuses, so a tensor whose storage was
    already taken is cloned (docs/ARCHITECTURE.md section 1).
    """
    if not state_dict:
        raise ValueError(
            "the state dict is empty: pass model.state_dict() (checkpoint names, e.g. model.layers.0...)"
        )
    tensors: dict[str, torch.Tensor] = {}
    seen_storages: set[int] = set()
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state_dict[{name!r}] is a {type(tensor).__name__}, not a torch.Tensor")
        tensor = tensor.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in seen_storages:
            tensor = tensor.clone()
        seen_storages.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    return tensors


def serialize_state_dict(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """A state dict as safetensors bytes (the body of the http transport)."""
    return save(prepare_state_dict(state_dict))


def default_shared_root(nbytes: int) -> Path:
    """/dev/shm when it exists and has room for `nbytes` (Docker's default is 64 MiB), else the system temp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir():
        stats = os.statvfs(shm)
        if stats.f_bavail * stats.f_frsize >= nbytes + SHM_MARGIN_BYTES:
            return shm
    return Path(tempfile.gettempdir())


def write_weights_file(tensors: Mapping[str, torch.Tensor], root: Path) -> Path:
    """Write `tensors` as `<root>/rlvr-weights-<uuid>/weights.safetensors`; the caller removes the directory.

    The directory is created 0700 by this user, which the server requires (`rlvr.serve.cpu_routes.weights_file`).
    The file appears under its final name only once complete (written under another name, then renamed). No
    fsync: the file lives for one load and a crash loses nothing worth keeping.
    """
    directory = root / f"{WEIGHTS_DIR_PREFIX}{uuid.uuid4().hex}"
    directory.mkdir(mode=0o700)
    try:
        partial = directory / "weights.safetensors.partial"
        save_file(dict(tensors), partial)
        final = partial.with_name("weights.safetensors")
        os.replace(partial, final)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return final


class CPUWeightSyncClient:
    """Loads new weights into a running `rlvr serve` without NCCL.

    `url` is the server root (`server.url`; a trailing /v1 is accepted). The admin token is needed only when the
    server binds a non-loopback address; it defaults to $RLVR_ADMIN_TOKEN.

    `transport`: ``"file"`` writes the weights to a shared directory and sends its path (same machine),
    ``"http"`` sends the bytes, ``"auto"`` (default) picks "file" when the URL's host is a loopback address and
    falls back to "http" for good (with a warning) if the server cannot load the client's file.
    `shared_dir`: where the file transport makes its per-update directory; default /dev/shm (when it has room),
    else the system temp dir. The server loads from /dev/shm and its temp dir; any other directory needs
    ``rlvr serve --allow-weights-dir DIR``.
    """

    def __init__(
        self,
        url: str,
        admin_token: str | None = None,
        timeout: float = 600.0,
        *,
        transport: str = "auto",
        shared_dir: str | os.PathLike | None = None,
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        self.url = url.rstrip("/").removesuffix("/v1")
        token = admin_token if admin_token is not None else os.environ.get(ADMIN_TOKEN_ENV)
        self._headers = {ADMIN_HEADER: token} if token else {}
        self.timeout = timeout
        self._fallback = transport == "auto"
        if transport == "auto":
            transport = "file" if is_loopback(httpx.URL(self.url).host) else "http"
        self.transport = transport
        self.shared_dir = Path(shared_dir) if shared_dir is not None else None

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> dict:
        """Load the whole state dict into the server; returns once the server generates with it.

        The answer is the server's JSON (`num_tensors`, `load_seconds`, `weight_version`) plus `transport`.
        """
        tensors = prepare_state_dict(state_dict)
        if self.transport == "file":
            answer = self._send_path(tensors)
            if answer is not None:
                return answer
        return self._send_bytes(tensors)

    def _send_path(self, tensors: dict[str, torch.Tensor]) -> dict | None:
        """The server's answer, or None when "auto" should fall back to http (the server cannot see the file)."""
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        root = self.shared_dir if self.shared_dir is not None else default_shared_root(nbytes)
        path = write_weights_file(tensors, root)
        try:
            response = httpx.post(
                f"{self.url}{CPU_UPDATE_FROM_PATH}",
                json={"path": str(path)},
                headers=self._headers,
                timeout=self.timeout,
            )
        finally:
            shutil.rmtree(path.parent, ignore_errors=True)
        if self._fallback and (
            response.status_code == 404
            or (response.status_code == 400 and _reason(response) in FALLBACK_REASONS)
        ):
            logger.warning(
                "the server at %s cannot load weights from %s (%d: %s); sending them over HTTP from now on, "
                "which is much slower",
                self.url,
                root,
                response.status_code,
                response.text,
            )
            self.transport = "http"
            return None
        return self._answer(response, CPU_UPDATE_FROM_PATH, "file")

    def _send_bytes(self, tensors: dict[str, torch.Tensor]) -> dict:
        response = httpx.post(
            f"{self.url}{CPU_UPDATE_PATH}",
            content=save(tensors),
            headers={**self._headers, "content-type": "application/octet-stream"},
            timeout=self.timeout,
        )
        return self._answer(response, CPU_UPDATE_PATH, "http")

    def _answer(self, response: httpx.Response, route: str, transport: str) -> dict:
        if response.status_code != 200:
            raise WeightSyncError(f"POST {self.url}{route} answered {response.status_code}: {response.text}")
        return {**response.json(), "transport": transport}


def _reason(response: httpx.Response) -> str | None:
    try:
        return response.json().get("reason")
    except ValueError:
        return None
