"""`rlvr serve`: vLLM 0.32's OpenAI server plus verifiers' weight-sync protocol and a CPU weight-sync transport.

The server is vLLM's own (same app, same routes, same engine); this module starts it and mounts rlvr's routes:

- `rlvr.serve.nccl_routes`: verifiers 0.1.9.post3's weight-sync protocol (NCCL, GPUs), so its ``VLLMClient``
  works unchanged. ``GET /health`` is vLLM's own (200 while the engine is alive), as in verifiers' server.
- `rlvr.serve.cpu_routes`: the CPU transport (a safetensors file of the state dict, sent or left on this machine).
- `rlvr.serve.admin`: on a non-loopback bind, the weight-changing routes need the admin token.
- `rlvr.serve.versions`: every generated answer says which weight version sampled it.

Both kinds of update share one `WeightUpdateGate`: no request mixes old and new weights. Route paths and the
other names a client needs live in `rlvr.serve.protocol`; the command-line options in `rlvr.serve.options`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from rlvr.serve.admin import AdminTokenMiddleware
from rlvr.serve.cpu_routes import add_cpu_routes, default_weights_roots
from rlvr.serve.engine import install_parent_watches, watch_parent
from rlvr.serve.gate import WeightUpdateGate
from rlvr.serve.launch import OWNER_ENV
from rlvr.serve.nccl_routes import add_nccl_routes
from rlvr.serve.options import (
    LOG_FORMAT,
    WORKER_EXTENSION,
    ServeError,
    ServeOptions,
    logging_config,
    parse_args,
    vllm_argv,
)
from rlvr.serve.protocol import is_loopback
from rlvr.serve.versions import WeightVersionMiddleware, add_version_route

logger = logging.getLogger("rlvr.serve")


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
    install_parent_watches()  # the engine core and its workers die with this process, however it dies
    listen_address, sock = setup_server(args, reuse_port=False)
    # RAM-backed when possible: an uploaded file only lives for one load.
    upload_root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="rlvr-upload-", dir=upload_root) as upload_dir:
        async with build_async_engine_client(args) as engine:
            supported_tasks = await engine.get_supported_tasks()
            app = build_app(args, supported_tasks, engine.model_config)
            gate = WeightUpdateGate(engine)
            add_nccl_routes(app, engine, args, gate, on_cpu=on_cpu)
            add_cpu_routes(
                app,
                engine,
                gate,
                upload_dir=Path(upload_dir),
                weights_roots=[*default_weights_roots(), *options.weights_dirs],
            )
            add_version_route(app, gate)
            # build_app has already built the middleware stack (the SageMaker bootstrap does), so
            # app.add_middleware refuses; insert outermost and rebuild, as that bootstrap itself does
            # (model_hosting_container_standards/common/fastapi/middleware/core.py).
            app.user_middleware.insert(0, Middleware(WeightVersionMiddleware, gate=gate))
            if options.admin_token is not None and not (args.uds or is_loopback(args.host)):
                app.user_middleware.insert(0, Middleware(AdminTokenMiddleware, token=options.admin_token))
                logger.info("admin token required for weight-changing endpoints (non-loopback bind)")
            app.middleware_stack = app.build_middleware_stack()
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
    if OWNER_ENV in os.environ:
        # Started by `rlvr.serve.launch` (the owner is the launching process): stop (gracefully, then SIGKILL) when
        # that process dies, however it dies (a SIGKILL or the out-of-memory killer skips its `with` block's cleanup).
        watch_parent(int(os.environ[OWNER_ENV]), signal.SIGTERM)
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
    if on_cpu and options.cpu_engine == "inline":
        # vLLM's CPU platform turns the one-process executor into the multiprocessing one unless V1 multiprocessing is
        # off (vllm/platforms/cpu.py, check_and_update_config); the API server still spawns the engine core (AsyncLLM
        # always does), which then runs the model itself. Read when the engine's config is built, below.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        model_path = models.resolve(options.model)
    except models.ModelError as exc:
        raise SystemExit(f"rlvr serve: {exc}") from None
    parser = make_arg_parser(FlexibleArgumentParser(prog="rlvr serve"))
    flags = vllm_argv(options, model_path, passthrough, on_cpu=on_cpu, tools=options.model in models.REGISTRY)
    args = parser.parse_args([*flags, "--worker-extension-cls", WORKER_EXTENSION])
    validate_parsed_serve_args(args)
    uvloop.run(run_server(args, options, on_cpu=on_cpu))
