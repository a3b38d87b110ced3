"""`CPUWeightSyncClient`: the trainer's side of the CPU weight-sync transport of `rlvr serve`.

Two ways to hand the server a safetensors file of the state dict, which every vLLM worker then reloads:

- ``"file"`` (trainer and server on one machine): keep the file in a private ``rlvr-weights-<uuid>`` directory
  on a RAM-backed filesystem, overwrite it in place for each update (`rlvr.serve.staging.StagingFile`) and send
  only its path (``POST /rlvr/update_weights_from_path``).
- ``"http"`` (remote server): send the file's bytes as the request body (``POST /rlvr/update_weights``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import torch

from rlvr.serve.protocol import (
    ADMIN_HEADER,
    ADMIN_TOKEN_ENV,
    CPU_UPDATE_FROM_PATH,
    CPU_UPDATE_PATH,
    REASON_NOT_ALLOWED,
    REASON_NOT_FOUND,
    is_loopback,
)
from rlvr.serve.staging import StagingFile, StateTensors, default_shared_root, state_tensors

TRANSPORTS = ("auto", "file", "http")
# Server refusals of a path after which "auto" sends the bytes instead: the server cannot see the client's file
# (another container or filesystem, a different temp dir).
FALLBACK_REASONS = frozenset({REASON_NOT_FOUND, REASON_NOT_ALLOWED})
UPLOAD_CHUNK_BYTES = 2**20

logger = logging.getLogger("rlvr.serve.client")


class WeightSyncError(RuntimeError):
    """The server refused or failed a weight update."""


class CPUWeightSyncClient:
    """Loads new weights into a running `rlvr serve` without NCCL.

    `url` is the server root (`server.url`; a trailing /v1 is accepted). The admin token is needed only when the
    server binds a non-loopback address; it defaults to $RLVR_ADMIN_TOKEN.

    `transport`: ``"file"`` writes the weights to a shared directory and sends its path (same machine),
    ``"http"`` sends the bytes, ``"auto"`` (default) picks "file" when the URL's host is a loopback address and
    falls back to "http" for good (with a warning) if the server cannot load the client's file.
    `shared_dir`: where the file transport keeps its directory; default /dev/shm (when it has room), else the
    system temp dir. The server loads from /dev/shm and its temp dir; any other directory needs
    ``rlvr serve --allow-weights-dir DIR``.

    `keep_file`: the file transport keeps its file (one copy of the weights in RAM) between updates and overwrites
    it in place, until `close()`, the end of a ``with`` block, garbage collection or interpreter exit. False
    deletes it after each update: no RAM held between updates, but each update writes a new file (slower).
    """

    def __init__(
        self,
        url: str,
        admin_token: str | None = None,
        timeout: float = 600.0,
        *,
        transport: str = "auto",
        shared_dir: str | os.PathLike | None = None,
        keep_file: bool = True,
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
        self.keep_file = keep_file
        self._staging: StagingFile | None = None
        self._one_update_at_a_time = threading.Lock()

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> dict:
        """Load the whole state dict into the server; returns once the server generates with it.

        The answer is the server's JSON (`num_tensors`, `load_seconds`, `reload_seconds`, `weight_version`) plus
        `transport` (the one used), `write_seconds` (preparing and writing or serialising the tensors) and
        `seconds` (the whole call).
        """
        start = time.perf_counter()
        state = state_tensors(state_dict)
        with self._one_update_at_a_time:
            answer = self._send_path(state, start) if self.transport == "file" else None
            if answer is None:
                answer = self._send_bytes(state, start)
        return {**answer, "seconds": time.perf_counter() - start}

    def close(self) -> None:
        """Delete the file transport's file (a later update writes a new one)."""
        if self._staging is not None:
            self._staging.remove()
            self._staging = None

    def __enter__(self) -> CPUWeightSyncClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _send_path(self, state: StateTensors, start: float) -> dict | None:
        """The server's answer, or None when "auto" should fall back to http (the server cannot see the file)."""
        if self._staging is None:
            root = self.shared_dir if self.shared_dir is not None else default_shared_root(state.nbytes)
            self._staging = StagingFile(root)
        path = self._staging.write(state)
        write_seconds = time.perf_counter() - start
        response = httpx.post(
            f"{self.url}{CPU_UPDATE_FROM_PATH}",
            json={"path": str(path)},
            headers=self._headers,
            timeout=self.timeout,
        )
        if response.status_code != 200 or not self.keep_file:
            self.close()  # a refused file is of no use to the server either
        if self._fallback and (
            response.status_code == 404
            or (response.status_code == 400 and _reason(response) in FALLBACK_REASONS)
        ):
            logger.warning(
                "the server at %s cannot load weights from %s (%d: %s); sending them over HTTP from now on, "
                "which is much slower",
                self.url,
                path.parent.parent,
                response.status_code,
                response.text,
            )
            self.transport = "http"
            return None
        return self._answer(response, CPU_UPDATE_FROM_PATH, "file", write_seconds)

    def _send_bytes(self, state: StateTensors, start: float) -> dict:
        body = memoryview(state.to_bytes())
        write_seconds = time.perf_counter() - start
        response = httpx.post(
            f"{self.url}{CPU_UPDATE_PATH}",
            # In pieces: httpcore's synchronous socket write copies the unsent rest of a body after every
            # partial send (encode/httpcore#1029), quadratic in its size: one 621 MiB body took ~60 s.
            content=(
                bytes(body[i : i + UPLOAD_CHUNK_BYTES]) for i in range(0, len(body), UPLOAD_CHUNK_BYTES)
            ),
            headers={
                **self._headers,
                "content-type": "application/octet-stream",
                "content-length": str(len(body)),
            },
            timeout=self.timeout,
        )
        return self._answer(response, CPU_UPDATE_PATH, "http", write_seconds)

    def _answer(self, response: httpx.Response, route: str, transport: str, write_seconds: float) -> dict:
        if response.status_code != 200:
            raise WeightSyncError(f"POST {self.url}{route} answered {response.status_code}: {response.text}")
        return {**response.json(), "transport": transport, "write_seconds": write_seconds}


def load_saved_weights(url: str, directory: Path) -> float:
    """Serve the full-model weights saved in `directory` (a run's `final/` or a checkpoint): the server keeps the
    weights of the last sync, which precede the last optimizer step. A LoRA adapter directory serves its merge into
    its base (rlvr.models.merged). Returns the seconds it took."""
    from safetensors.torch import load_file

    from rlvr import models

    directory = Path(directory)
    if (directory / models.ADAPTER_CONFIG).is_file():
        directory = models.merged(directory)
    path = directory / "model.safetensors"
    if not path.is_file():
        raise WeightSyncError(f"{directory} has no model.safetensors to serve")
    start = time.perf_counter()
    state = load_file(path)
    if "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied: vLLM may keep its own lm_head
    with CPUWeightSyncClient(url) as client:
        client.update_weights(state)
    return time.perf_counter() - start


def _reason(response: httpx.Response) -> str | None:
    try:
        return response.json().get("reason")
    except ValueError:
        return None
