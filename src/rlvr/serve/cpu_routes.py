"""rlvr's CPU weight-sync routes: every vLLM worker reloads the model from a safetensors file of the state dict.

- ``POST /rlvr/update_weights`` (http transport): the body is the file; the server writes it to a RAM-backed temp
  file first.
- ``POST /rlvr/update_weights_from_path`` (file transport): ``{"path": ...}`` of a file that a trainer on this
  machine wrote, loaded only from a private ``rlvr-weights-*`` directory of an allowed root (`weights_file`).

Both answer ``{"status", "num_tensors", "load_seconds", "reload_seconds", "weight_version"}`` once generation runs
on the new weights. A tied tensor may be stored once with its other names in the header (`protocol.parse_aliases`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

# Module level: FastAPI resolves the postponed annotation `request: Request` in this module's globals.
from fastapi import Request
from fastapi.responses import JSONResponse

from rlvr.serve.gate import WeightUpdateGate, engine_died, unless_engine_dies
from rlvr.serve.protocol import (
    CPU_UPDATE_FROM_PATH,
    CPU_UPDATE_PATH,
    REASON_BAD_REQUEST,
    REASON_NOT_ALLOWED,
    REASON_NOT_FOUND,
    WEIGHTS_DIR_PREFIX,
    parse_aliases,
)

logger = logging.getLogger("rlvr.serve")


def default_weights_roots() -> list[Path]:
    """Where the file transport's directories may live: /dev/shm (RAM-backed, when present) and the temp dir."""
    shm = [Path("/dev/shm")] if os.path.isdir("/dev/shm") else []
    return [*shm, Path(tempfile.gettempdir())]


class WeightsPathError(ValueError):
    """A path given to the file transport that the server will not load; `reason` lets a client fall back."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def weights_file(path: Any, roots: list[Path]) -> Path:
    """The file to load for `POST /rlvr/update_weights_from_path`, or WeightsPathError saying why not.

    Any local process may reach a loopback server without a token, so the route must not become a way to make
    the server read arbitrary files: the path, with symlinks resolved, must be `<root>/rlvr-weights-*/<file>`
    for an allowed root, and that directory must belong to the server's user and be writable by it alone (as
    `os.mkdir(dir, 0o700)` makes it), so nobody else can swap the file between this check and the load.
    """
    if not isinstance(path, str) or not os.path.isabs(path):
        raise WeightsPathError(
            f'{CPU_UPDATE_FROM_PATH} needs JSON {{"path": "/absolute/path.safetensors"}}, got path={path!r}',
            REASON_BAD_REQUEST,
        )
    try:
        resolved = Path(path).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise WeightsPathError(
            f"{path} cannot be read by the server ({type(exc).__name__}: {exc}); the file transport needs "
            "trainer and server on the same machine and filesystem: use transport='http' otherwise",
            REASON_NOT_FOUND,
        ) from None
    allowed = {root.resolve() for root in roots}
    directory = resolved.parent
    if not (directory.name.startswith(WEIGHTS_DIR_PREFIX) and directory.parent in allowed):
        raise WeightsPathError(
            f"{path} (resolved: {resolved}) is outside the directories this server loads weights from: the file "
            f"must be in a {WEIGHTS_DIR_PREFIX}* directory directly under one of "
            f"{', '.join(sorted(map(str, allowed)))} (add a root with rlvr serve --allow-weights-dir DIR)",
            REASON_NOT_ALLOWED,
        )
    info = directory.stat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise WeightsPathError(
            f"{directory} must belong to the server's user (uid {os.geteuid()}) and be writable by it alone "
            f"(owner uid {info.st_uid}, mode {oct(info.st_mode & 0o777)}): create it with os.mkdir(path, 0o700)",
            REASON_NOT_ALLOWED,
        )
    if not resolved.is_file():
        raise WeightsPathError(f"{resolved} is not a regular file", REASON_BAD_REQUEST)
    return resolved


def _error(status: int, message: str, **extra: str) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def add_cpu_routes(
    app: Any, engine: Any, gate: WeightUpdateGate, *, upload_dir: Path, weights_roots: list[Path]
) -> None:
    """Mount the two CPU routes. `upload_dir` holds the http transport's temp files; `weights_roots` are the
    roots the file transport may load from."""
    update_lock = asyncio.Lock()

    async def load_weights_file(path: Path, source: str):
        """Pause, load `path` into every worker, resume; the caller holds `update_lock`."""
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                names = list(f.keys())
                num_tensors = len(names) + len(parse_aliases(f.metadata(), names))
        except (SafetensorError, OSError, ValueError) as exc:
            return _error(
                400,
                f"{source} must be a safetensors file of the model's state dict "
                f"(checkpoint names, as safetensors.torch.save writes it): {exc}",
            )
        if num_tensors == 0:
            return _error(400, f"{source} is a safetensors file with no tensors")
        start = time.perf_counter()
        try:
            await gate.pause()
            try:
                reload_start = time.perf_counter()
                await unless_engine_dies(
                    engine, engine.collective_rpc("reload_weights_from_file", args=(str(path),))
                )
                reload_seconds = time.perf_counter() - reload_start
            finally:
                if not engine.errored:
                    await gate.resume()
        except Exception as exc:
            if await engine_died(engine):  # the call failed with EngineDeadError or a plain "cancelled" Exception
                logger.error("the engine died during a weight update (%s: %s)", type(exc).__name__, exc)
                return _error(
                    503,
                    "the engine died during the weight update (its error is in this server's log); the server is "
                    "shutting down: start it again, then send the weights again",
                )
            logger.exception("weight update failed")
            return _error(
                500,
                f"loading the new weights failed ({type(exc).__name__}: {exc}); the engine may hold a mix "
                "of old and new weights: send a complete state dict again",
            )
        seconds = time.perf_counter() - start
        logger.info(
            "weights updated: %d tensors in %.3f s, of which the workers' reload %.3f s (version %d)",
            num_tensors,
            seconds,
            reload_seconds,
            gate.version,
        )
        return {
            "status": "ok",
            "num_tensors": num_tensors,
            "load_seconds": seconds,  # pause (running requests finish) + reload + prefix-cache reset + resume
            "reload_seconds": reload_seconds,
            "weight_version": gate.version,
        }

    @app.post(CPU_UPDATE_PATH)
    async def update_weights(request: Request):
        async with update_lock:
            fd, name = tempfile.mkstemp(suffix=".safetensors", dir=upload_dir)
            path = Path(name)
            try:
                with os.fdopen(fd, "wb") as f:
                    async for chunk in request.stream():
                        f.write(chunk)
                return await load_weights_file(path, f"the body of POST {CPU_UPDATE_PATH}")
            finally:
                path.unlink(missing_ok=True)

    @app.post(CPU_UPDATE_FROM_PATH)
    async def update_weights_from_path(request: Request):
        try:
            given = (await request.json())["path"]
        except (ValueError, KeyError, TypeError):
            given = None
        try:
            path = weights_file(given, weights_roots)
        except WeightsPathError as exc:
            return _error(400, str(exc), reason=exc.reason)
        # The client rewrites the file only after this answers.
        async with update_lock:
            return await load_weights_file(path, str(path))
