"""`rlvr serve`'s own command-line options, and the vLLM flags they become.

No vLLM import: the throughput benchmark builds plain vLLM's flags with `vllm_argv` too.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from rlvr.serve.protocol import ADMIN_TOKEN_ENV, CPU_UPDATE_FROM_PATH, is_loopback

WORKER_EXTENSION = "rlvr.serve.worker.WeightSyncWorkerExtension"
DEFAULT_CPU_KV_CACHE_GB = 2.0
# Overrides DEFAULT_CPU_KV_CACHE_GB for every server started without --kv-cache-gb, e.g. by `rlvr train` or a study:
# a machine that runs several small servers at once (the test suite sets 0.5) keeps their memory in check.
KV_CACHE_ENV = "RLVR_KV_CACHE_GB"
# Where the model runs on CPU (docs/serve.md, "Engine layout on CPU"): "worker" is vLLM's CPU layout, the API server's
# engine core spawning a worker process bound to its own cores (the engine core polls it, ~half a core while it
# generates); "inline" is the layout vLLM uses on one GPU, the model in the engine core, one process fewer.
CPU_ENGINE_ENV = "RLVR_CPU_ENGINE"
CPU_ENGINES = ("worker", "inline")
DEFAULT_CPU_ENGINE = "worker"
LOG_FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"


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
    cpu_engine: str = DEFAULT_CPU_ENGINE
    # Extra roots for the file transport, on top of `cpu_routes.default_weights_roots()`.
    weights_dirs: tuple[Path, ...] = ()


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
        help=f"KV cache size in GiB (vLLM --kv-cache-memory-bytes); default ${KV_CACHE_ENV} or "
        f"{DEFAULT_CPU_KV_CACHE_GB} on CPU, vLLM's own on GPU",
    )
    parser.add_argument(
        "--admin-token",
        default=None,
        help=f"token for weight-changing endpoints, required when --host is not loopback (or ${ADMIN_TOKEN_ENV})",
    )
    parser.add_argument("--log-file", type=Path, default=None, help="also write the server log to this file")
    parser.add_argument(
        "--cpu-engine",
        choices=CPU_ENGINES,
        default=None,
        help="on CPU, where the model runs: 'worker' (vLLM's CPU layout: a worker process bound to its cores, polled by "
        "the engine core) or 'inline' (in the engine core, as on one GPU: one process fewer, faster to start, less "
        f"CPU per token, unbound threads); default ${CPU_ENGINE_ENV} or {DEFAULT_CPU_ENGINE!r}. Ignored on GPU",
    )
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


def cpu_kv_cache_gb() -> float:
    """The KV cache on CPU when --kv-cache-gb is not given: $RLVR_KV_CACHE_GB, else DEFAULT_CPU_KV_CACHE_GB."""
    given = os.environ.get(KV_CACHE_ENV, "").strip()
    if not given:
        return DEFAULT_CPU_KV_CACHE_GB
    try:
        value = float(given)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ServeError(
            f"${KV_CACHE_ENV}={given!r}: must be a positive number of GiB (unset it for {DEFAULT_CPU_KV_CACHE_GB})"
        )
    return value


def cpu_engine(given: str | None) -> str:
    """--cpu-engine if given, else $RLVR_CPU_ENGINE, else DEFAULT_CPU_ENGINE."""
    if given is not None:
        return given
    value = os.environ.get(CPU_ENGINE_ENV, "").strip()
    if value and value not in CPU_ENGINES:
        raise ServeError(f"${CPU_ENGINE_ENV}={value!r}: must be one of {', '.join(CPU_ENGINES)} (unset it for {DEFAULT_CPU_ENGINE})")
    return value or DEFAULT_CPU_ENGINE


def parse_args(argv: list[str]) -> tuple[ServeOptions, list[str]]:
    """Split `rlvr serve` argv into rlvr's options and the flags passed through to vLLM."""
    known, passthrough = build_parser().parse_known_args(argv)
    if known.kv_cache_gb is not None and known.kv_cache_gb <= 0:
        raise ServeError(f"--kv-cache-gb must be positive, got {known.kv_cache_gb}")
    cpu_kv_cache_gb()  # a bad $RLVR_KV_CACHE_GB is refused before vLLM starts
    options = ServeOptions(
        model=known.model,
        host=known.host,
        port=known.port,
        kv_cache_gb=known.kv_cache_gb,
        admin_token=known.admin_token or os.environ.get(ADMIN_TOKEN_ENV) or None,
        log_file=known.log_file,
        cpu_engine=cpu_engine(known.cpu_engine),
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
        else (cpu_kv_cache_gb() if on_cpu else None)
    )
    if kv_cache_gb is not None:
        argv += ["--kv-cache-memory-bytes", str(int(kv_cache_gb * 2**30))]
    if on_cpu:
        # CPU start-up: ~45 s eager, ~2.5 min with torch.compile (docs/architecture.md, "Serving and weight sync").
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
    fmt = {"()": "vllm.logging_utils.NewLineFormatter", "format": LOG_FORMAT}
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
