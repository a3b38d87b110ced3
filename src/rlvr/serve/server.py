"""`rlvr serve`: vLLM 0.32's OpenAI server plus verifiers' weight-sync protocol and a CPU weight-sync transport.

The server is vLLM's own (same app, same routes, same engine); rlvr adds routes before serving:

- verifiers 0.1.9.post3's weight-sync protocol (``verifiers/rl/inference/server.py``), same request and response
  shapes, so its ``VLLMClient`` works unchanged on GPUs (NCCL): ``GET /get_world_size``,
  ``POST /init_communicator``, ``/update_named_param``, ``/reset_prefix_cache``, ``/get_num_background_tasks``,
  ``/close_communicator``. ``GET /health`` is vLLM's own (200 while the engine is alive), as in verifiers' server.
- ``POST /rlvr/update_weights``: the CPU transport. The body is a safetensors file (checkpoint names); every worker
  reloads from it (``rlvr.serve.worker``). ``rlvr.serve.CPUWeightSyncClient`` sends it to a remote server.
- ``POST /rlvr/update_weights_from_path``: the same load from a file that a trainer on this machine wrote,
  ``{"path": ...}``; only files in a private ``rlvr-weights-*`` directory of an allowed root (`weights_file`).

No request mixes old and new weights: an update pauses the scheduler in vLLM's ``"wait"`` mode (running requests
finish on the old weights, new ones queue), loads, drops the prefix cache (its KV entries were computed with the
old weights) and resumes.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Module level: FastAPI resolves the postponed annotation `request: Request` in this module's globals.
from fastapi import Request

ADMIN_HEADER = "X-RLVR-Admin-Token"
ADMIN_TOKEN_ENV = "RLVR_ADMIN_TOKEN"
WORKER_EXTENSION = "rlvr.serve.worker.WeightSyncWorkerExtension"
CPU_UPDATE_PATH = "/rlvr/update_weights"
CPU_UPDATE_FROM_PATH = "/rlvr/update_weights_from_path"
# The file transport's per-update directories are named rlvr-weights-<uuid> (CPUWeightSyncClient creates them).
WEIGHTS_DIR_PREFIX = "rlvr-weights-"
NCCL_PATHS = ("/init_communicator", "/update_named_param", "/close_communicator")
# Routes that change weights or engine state. Without a loopback bind they need the admin token. The vLLM ones
# are only mounted in some configurations (dev mode, runtime LoRA, elastic EP); guarding an absent path is harmless.
ADMIN_PATHS = frozenset(
    {
        CPU_UPDATE_PATH,
        CPU_UPDATE_FROM_PATH,
        *NCCL_PATHS,
        "/reset_prefix_cache",
        "/reset_mm_cache",
        "/reset_encoder_cache",
        "/collective_rpc",
        "/sleep",
        "/wake_up",
        "/pause",
        "/resume",
        "/abort_requests",
        "/inference/v1/abort_requests",
        "/init_weight_transfer_engine",
        "/shutdown_weight_transfer_engine",
        "/start_weight_update",
        "/start_draft_weight_update",
        "/update_weights",
        "/finish_weight_update",
        "/update_weight_version",
        "/scale_elastic_ep",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    }
)
# verifiers' server caps concurrent NCCL parameter updates at 10 (MAX_CONCURRENT_WEIGHT_UPDATES).
MAX_CONCURRENT_NCCL_UPDATES = 10
DEFAULT_CPU_KV_CACHE_GB = 2.0
LOG_FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"

logger = logging.getLogger("rlvr.serve")


class ServeError(ValueError):
    """Bad `rlvr serve` arguments."""


@dataclass(frozen=True)
class ServeOptions:
    model: str
    host: str
    port: int
    kv_cache_gb: float | None
    admin_token: str | None
    log_file: Path | None
    # Extra roots for the file transport, on top of `default_weights_roots()`.
    weights_dirs: tuple[Path, ...] = ()


def is_loopback(host: str | None) -> bool:
    """True when every address `host` resolves to is a loopback address ("" / None / 0.0.0.0 = all interfaces)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def token_ok(expected: str, headers: list[tuple[bytes, bytes]]) -> bool:
    given = dict(headers).get(ADMIN_HEADER.lower().encode(), b"")
    # Constant-time comparison so the token cannot be guessed byte by byte from response times.
    return hmac.compare_digest(given, expected.encode())


class AdminTokenMiddleware:
    """Pure ASGI middleware: requests to `ADMIN_PATHS` without the right `X-RLVR-Admin-Token` header get 403.

    Only installed when the server binds a non-loopback address, so a local server pays nothing per request.
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] in ADMIN_PATHS
            and not token_ok(self.token, scope["headers"])
        ):
            body = json.dumps(
                {
                    "error": f"{scope['path']} needs the admin token: this server binds a non-loopback address; "
                    f"send it in the {ADMIN_HEADER} header (the value of --admin-token / ${ADMIN_TOKEN_ENV})"
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr serve",
        description="vLLM OpenAI server with verifiers' weight-sync protocol and CPU weight sync.",
        epilog="Every other flag goes to vLLM unchanged (see `python -m vllm.entrypoints.openai.api_server --help`). "
        "On CPU, --enforce-eager is on unless you pass --no-enforce-eager.",
    )
    parser.add_argument(
        "--model", required=True, help="rlvr model name (`rlvr models list`), local path or hub id"
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--kv-cache-gb",
        type=float,
        default=None,
        help=f"KV cache size in GiB (vLLM --kv-cache-memory-bytes); default {DEFAULT_CPU_KV_CACHE_GB} on CPU, "
        "vLLM's own on GPU",
    )
    parser.add_argument(
        "--admin-token",
        default=None,
        help=f"token for weight-changing endpoints, required when --host is not loopback (or ${ADMIN_TOKEN_ENV})",
    )
    parser.add_argument("--log-file", type=Path, default=None, help="also write the server log to this file")
    parser.add_argument(
        "--allow-weights-dir",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a directory (e.g. a tmpfs) in which trainers on this machine may leave weight files for "
        f"{CPU_UPDATE_FROM_PATH}, besides /dev/shm and the system temp dir (repeatable)",
    )
    return parser


def parse_args(argv: list[str]) -> tuple[ServeOptions, list[str]]:
    """Split `rlvr serve` argv into rlvr's options and the flags passed through to vLLM."""
    known, passthrough = build_parser().parse_known_args(argv)
    if known.kv_cache_gb is not None and known.kv_cache_gb <= 0:
        raise ServeError(f"--kv-cache-gb must be positive, got {known.kv_cache_gb}")
    options = ServeOptions(
        model=known.model,
        host=known.host,
        port=known.port,
        kv_cache_gb=known.kv_cache_gb,
        admin_token=known.admin_token or os.environ.get(ADMIN_TOKEN_ENV) or None,
        log_file=known.log_file,
        weights_dirs=tuple(known.allow_weights_dir),
    )
    for directory in options.weights_dirs:
        if not directory.is_dir():
            raise ServeError(f"--allow-weights-dir {directory}: not an existing directory")
    if not is_loopback(options.host) and not options.admin_token:
        raise ServeError(
            f"--host {options.host!r} is not a loopback address, so anyone who can reach it could change the "
            f"model's weights: pass --admin-token TOKEN or set ${ADMIN_TOKEN_ENV} (or bind 127.0.0.1)"
        )
    for flag in ("--worker-extension-cls", "--served-model-name"):
        if any(arg == flag or arg.startswith(flag + "=") for arg in passthrough):
            raise ServeError(
                f"{flag} is set by rlvr serve (worker extension {WORKER_EXTENSION}; served name = --model): remove it"
            )
    return options, passthrough


def vllm_argv(
    options: ServeOptions, model_path: str, passthrough: list[str], *, on_cpu: bool, tools: bool
) -> list[str]:
    """The vLLM server flags of `rlvr serve` (without its worker extension, so the throughput benchmark can start
    plain vLLM with exactly these). rlvr's defaults come first so that a flag passed through wins (argparse: last).
    """
    argv = [
        "--model", model_path,
        "--served-model-name", options.model,
        "--host", options.host,
        "--port", str(options.port),
    ]  # fmt: skip
    kv_cache_gb = (
        options.kv_cache_gb
        if options.kv_cache_gb is not None
        else (DEFAULT_CPU_KV_CACHE_GB if on_cpu else None)
    )
    if kv_cache_gb is not None:
        argv += ["--kv-cache-memory-bytes", str(int(kv_cache_gb * 2**30))]
    if on_cpu:
        # CPU start-up: ~45 s eager, ~2.5 min with torch.compile (docs/ARCHITECTURE.md section 1).
        argv.append("--enforce-eager")
    # RL needs the logprobs of the distribution actually sampled (after temperature): the trainer's importance
    # ratio divides by them. vLLM's default returns the raw model's logprobs, which differ whenever temperature != 1.
    argv += ["--logprobs-mode", "processed_logprobs"]
    if tools:
        # The rlvr models carry a Hermes-style tool chat template (rlvr.models.TOOL_CHAT_TEMPLATE).
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    return argv + passthrough


def logging_config(log_file: Path) -> dict:
    """vLLM's logging config (vllm/logger.py DEFAULT_LOGGING_CONFIG) plus a file handler, for vllm and rlvr loggers.

    Given to vLLM through VLLM_LOGGING_CONFIG_PATH, so the engine-core process it spawns logs to the file too.
    """
    fmt = {
        "()": "vllm.logging_utils.NewLineFormatter",
        "format": "%(levelname)s %(asctime)s [%(name)s] %(message)s",
    }
    handlers = {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout"},
        "file": {
            "class": "logging.FileHandler",
            "formatter": "plain",
            "filename": str(log_file),
            "mode": "a",
        },
    }
    logger_cfg = {"handlers": list(handlers), "level": "INFO", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": fmt},
        "handlers": handlers,
        "loggers": {"vllm": logger_cfg, "rlvr": logger_cfg},
    }


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
            "bad_request",
        )
    try:
        resolved = Path(path).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise WeightsPathError(
            f"{path} cannot be read by the server ({type(exc).__name__}: {exc}); the file transport needs "
            "trainer and server on the same machine and filesystem: use transport='http' otherwise",
            "not_found",
        ) from None
    allowed = {root.resolve() for root in roots}
    directory = resolved.parent
    if not (directory.name.startswith(WEIGHTS_DIR_PREFIX) and directory.parent in allowed):
        raise WeightsPathError(
            f"{path} (resolved: {resolved}) is outside the directories this server loads weights from: the file "
            f"must be in a {WEIGHTS_DIR_PREFIX}* directory directly under one of "
            f"{', '.join(sorted(map(str, allowed)))} (add a root with rlvr serve --allow-weights-dir DIR)",
            "not_allowed",
        )
    info = directory.stat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise WeightsPathError(
            f"{directory} must belong to the server's user (uid {os.geteuid()}) and be writable by it alone "
            f"(owner uid {info.st_uid}, mode {oct(info.st_mode & 0o777)}): create it with os.mkdir(path, 0o700)",
            "not_allowed",
        )
    if not resolved.is_file():
        raise WeightsPathError(f"{resolved} is not a regular file", "bad_request")
    return resolved


class WeightUpdateGate:
    """Pauses generation around a weight update so that no request sees two sets of weights.

    vLLM's ``pause_generation(mode="wait")`` lets running requests finish and keeps new ones queued; after the
    load the prefix cache is dropped (its KV entries come from the old weights) and the scheduler resumes.
    The NCCL protocol sends one parameter per request, so there the pause opens at the first
    ``/update_named_param`` and closes at ``/reset_prefix_cache``, which verifiers' trainer sends after the last one.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._lock = asyncio.Lock()
        self._paused = False
        self.version = 0

    async def pause(self) -> None:
        async with self._lock:
            if not self._paused:
                await self.engine.pause_generation(mode="wait", clear_cache=False)
                self._paused = True

    async def resume(self) -> None:
        async with self._lock:
            await self.engine.reset_prefix_cache()
            if self._paused:
                self.version += 1
                await self.engine.resume_generation()
                self._paused = False


def _error(status: int, message: str, **extra: str):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message, **extra}, status_code=status)


def add_weight_sync_routes(
    app: Any,
    engine: Any,
    args: argparse.Namespace,
    *,
    on_cpu: bool,
    weights_dir: Path,
    weights_roots: list[Path],
) -> None:
    gate = WeightUpdateGate(engine)
    cpu_update_lock = asyncio.Lock()
    nccl_slots = asyncio.Semaphore(MAX_CONCURRENT_NCCL_UPDATES)
    background_tasks: set[asyncio.Task] = set()

    def in_background(coro) -> None:
        # verifiers' protocol is fire-and-forget; the trainer polls /get_num_background_tasks until it reads 0.
        task = asyncio.create_task(coro)
        background_tasks.add(task)
        task.add_done_callback(background_tasks.discard)

    nccl_on_cpu = _error(
        501,
        "NCCL weight sync needs CUDA GPUs and this server runs on CPU. Use the CPU transport instead: "
        f"rlvr.serve.CPUWeightSyncClient(url).update_weights(state_dict) (POST {CPU_UPDATE_PATH})",
    )

    @app.get("/get_world_size")
    async def get_world_size():
        return {"world_size": args.tensor_parallel_size * args.data_parallel_size}

    @app.post("/init_communicator")
    async def init_communicator(request: Request):
        if on_cpu:
            return nccl_on_cpu
        data = await request.json()
        in_background(
            engine.collective_rpc("init_communicator", args=(data["host"], data["port"], data["world_size"]))
        )
        return {"status": "ok"}

    @app.post("/update_named_param")
    async def update_named_param(request: Request):
        if on_cpu:
            return nccl_on_cpu
        data = await request.json()

        async def update() -> None:
            async with nccl_slots:
                await gate.pause()
                await engine.collective_rpc(
                    "update_named_param", args=(data["name"], data["dtype"], tuple(data["shape"]))
                )

        in_background(update())
        return {"status": "ok"}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        async def reset_after_updates() -> None:
            pending = [task for task in background_tasks if task is not asyncio.current_task()]
            await asyncio.gather(*pending, return_exceptions=True)
            await gate.resume()

        in_background(reset_after_updates())
        return {"status": "ok"}

    @app.post("/get_num_background_tasks")
    async def get_num_background_tasks():
        return {"num_background_tasks": len(background_tasks)}

    @app.post("/close_communicator")
    async def close_communicator():
        if on_cpu:
            return nccl_on_cpu
        await engine.collective_rpc("close_communicator")
        return {"status": "ok"}

    async def load_weights_file(path: Path, source: str):
        """Pause, load `path` into every worker, resume; the caller holds `cpu_update_lock`."""
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                num_tensors = len(list(f.keys()))
        except (SafetensorError, OSError) as exc:
            return _error(
                400,
                f"{source} must be a safetensors file of the model's state dict "
                f"(checkpoint names, as safetensors.torch.save writes it): {exc}",
            )
        if num_tensors == 0:
            return _error(400, f"{source} is a safetensors file with no tensors")
        start = time.perf_counter()
        await gate.pause()
        try:
            await engine.collective_rpc("reload_weights_from_file", args=(str(path),))
        except Exception as exc:
            logger.exception("weight update failed")
            return _error(
                500,
                f"loading the new weights failed ({type(exc).__name__}: {exc}); the engine may hold a mix "
                "of old and new weights: send a complete state dict again",
            )
        finally:
            await gate.resume()
        seconds = time.perf_counter() - start
        logger.info("weights updated: %d tensors in %.3f s (version %d)", num_tensors, seconds, gate.version)
        return {
            "status": "ok",
            "num_tensors": num_tensors,
            "load_seconds": seconds,
            "weight_version": gate.version,
        }

    @app.post(CPU_UPDATE_PATH)
    async def update_weights(request: Request):
        async with cpu_update_lock:
            fd, name = tempfile.mkstemp(suffix=".safetensors", dir=weights_dir)
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
        # The trainer deletes the file once this answers.
        async with cpu_update_lock:
            return await load_weights_file(path, str(path))


async def run_server(args: argparse.Namespace, options: ServeOptions, *, on_cpu: bool) -> None:
    """vLLM's run_server / build_and_serve (vllm/entrypoints/launchers/api_server/entry.py), plus rlvr's routes."""
    import vllm.envs as envs
    from starlette.middleware import Middleware
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.launcher import serve_http, setup_server
    from vllm.entrypoints.launchers.utils.server_utils import get_uvicorn_log_config

    def interrupt_init(*_) -> None:
        raise KeyboardInterrupt("terminated")

    # Until uvicorn installs its own handler, SIGTERM must still stop a server that is loading the model.
    signal.signal(signal.SIGTERM, interrupt_init)
    listen_address, sock = setup_server(args, reuse_port=False)
    weights_root = (
        "/dev/shm" if os.path.isdir("/dev/shm") else None
    )  # RAM-backed: the file only lives for a load
    with tempfile.TemporaryDirectory(prefix="rlvr-upload-", dir=weights_root) as weights_dir:
        async with build_async_engine_client(args) as engine:
            supported_tasks = await engine.get_supported_tasks()
            app = build_app(args, supported_tasks, engine.model_config)
            add_weight_sync_routes(
                app,
                engine,
                args,
                on_cpu=on_cpu,
                weights_dir=Path(weights_dir),
                weights_roots=[*default_weights_roots(), *options.weights_dirs],
            )
            if options.admin_token is not None and not (args.uds or is_loopback(args.host)):
                # build_app has already built the middleware stack (the SageMaker bootstrap does), so
                # app.add_middleware refuses; insert outermost and rebuild, as that bootstrap itself does
                # (model_hosting_container_standards/common/fastapi/middleware/core.py).
                app.user_middleware.insert(0, Middleware(AdminTokenMiddleware, token=options.admin_token))
                app.middleware_stack = app.build_middleware_stack()
                logger.info("admin token required for weight-changing endpoints (non-loopback bind)")
            await init_app_state(engine, app.state, args, supported_tasks)
            uvicorn_kwargs = {}
            if (log_config := get_uvicorn_log_config(args)) is not None:
                uvicorn_kwargs["log_config"] = log_config
            logger.info("rlvr serve: %s on %s", options.model, listen_address)
            shutdown_task = await serve_http(
                app,
                sock=sock,
                enable_ssl_refresh=args.enable_ssl_refresh,
                host=args.host,
                port=args.port,
                log_level=args.uvicorn_log_level,
                access_log=not args.disable_uvicorn_access_log,
                timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
                ssl_keyfile=args.ssl_keyfile,
                ssl_certfile=args.ssl_certfile,
                ssl_ca_certs=args.ssl_ca_certs,
                ssl_cert_reqs=args.ssl_cert_reqs,
                ssl_ciphers=args.ssl_ciphers,
                h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
                h11_max_header_count=args.h11_max_header_count,
                **uvicorn_kwargs,
            )
        try:
            await shutdown_task
        finally:
            sock.close()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        options, passthrough = parse_args(argv)
    except ServeError as exc:
        raise SystemExit(f"rlvr serve: {exc}") from None
    if options.log_file is not None:
        options.log_file.parent.mkdir(parents=True, exist_ok=True)
        config_path = options.log_file.with_name(options.log_file.name + ".logging.json")
        config_path.write_text(json.dumps(logging_config(options.log_file)))
        # Set before vLLM is imported: vllm.logger configures logging at import time (and so does the engine
        # process it spawns, which inherits this environment).
        os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_path)
    else:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    # vLLM's engine runs in a spawned process; fork after torch threads start is unsafe.
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

    import uvloop
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from rlvr import models

    cli_env_setup()
    on_cpu = current_platform.is_cpu()
    try:
        model_path = models.resolve(options.model)
    except models.ModelError as exc:
        raise SystemExit(f"rlvr serve: {exc}") from None
    parser = make_arg_parser(FlexibleArgumentParser(prog="rlvr serve"))
    flags = vllm_argv(options, model_path, passthrough, on_cpu=on_cpu, tools=options.model in models.REGISTRY)
    args = parser.parse_args([*flags, "--worker-extension-cls", WORKER_EXTENSION])
    validate_parsed_serve_args(args)
    uvloop.run(run_server(args, options, on_cpu=on_cpu))
