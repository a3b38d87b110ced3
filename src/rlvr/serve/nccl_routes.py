"""verifiers' weight-sync protocol (NCCL, GPUs), mounted on the vLLM app so that its `VLLMClient` works unchanged.

Same paths, request and response shapes as verifiers 0.1.9.post3 ``verifiers/rl/inference/server.py``: the trainer
joins an NCCL group (``/init_communicator``), announces each parameter (``/update_named_param``, fire-and-forget)
and broadcasts it to the workers (`rlvr.serve.worker`), then sends ``/reset_prefix_cache`` and polls
``/get_num_background_tasks`` until it reads 0. On a CPU server the NCCL routes answer 501 naming the CPU transport.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

# Module level: FastAPI resolves the postponed annotation `request: Request` in this module's globals.
from fastapi import Request
from fastapi.responses import JSONResponse

from rlvr.serve.gate import WeightUpdateGate, unless_engine_dies
from rlvr.serve.protocol import (
    CLOSE_COMMUNICATOR_PATH,
    CPU_UPDATE_PATH,
    INIT_COMMUNICATOR_PATH,
    NUM_BACKGROUND_TASKS_PATH,
    RESET_PREFIX_CACHE_PATH,
    UPDATE_NAMED_PARAM_PATH,
    WORLD_SIZE_PATH,
)

# verifiers' server caps concurrent NCCL parameter updates at 10 (MAX_CONCURRENT_WEIGHT_UPDATES).
MAX_CONCURRENT_NCCL_UPDATES = 10


def add_nccl_routes(
    app: Any, engine: Any, args: argparse.Namespace, gate: WeightUpdateGate, *, on_cpu: bool
) -> None:
    nccl_slots = asyncio.Semaphore(MAX_CONCURRENT_NCCL_UPDATES)
    background_tasks: set[asyncio.Task] = set()

    def in_background(coro) -> None:
        # verifiers' protocol is fire-and-forget; the trainer polls /get_num_background_tasks until it reads 0.
        task = asyncio.create_task(coro)
        background_tasks.add(task)
        task.add_done_callback(background_tasks.discard)

    nccl_on_cpu = JSONResponse(
        {
            "error": "NCCL weight sync needs CUDA GPUs and this server runs on CPU. Use the CPU transport instead: "
            f"rlvr.serve.CPUWeightSyncClient(url).update_weights(state_dict) (POST {CPU_UPDATE_PATH})"
        },
        status_code=501,
    )

    @app.get(WORLD_SIZE_PATH)
    async def get_world_size():
        return {"world_size": args.tensor_parallel_size * args.data_parallel_size}

    @app.post(INIT_COMMUNICATOR_PATH)
    async def init_communicator(request: Request):
        if on_cpu:
            return nccl_on_cpu
        data = await request.json()
        in_background(
            unless_engine_dies(
                engine,
                engine.collective_rpc(
                    "init_communicator", args=(data["host"], data["port"], data["world_size"])
                ),
            )
        )
        return {"status": "ok"}

    @app.post(UPDATE_NAMED_PARAM_PATH)
    async def update_named_param(request: Request):
        if on_cpu:
            return nccl_on_cpu
        data = await request.json()

        async def update() -> None:
            async with nccl_slots:
                await gate.pause()
                await unless_engine_dies(
                    engine,
                    engine.collective_rpc(
                        "update_named_param", args=(data["name"], data["dtype"], tuple(data["shape"]))
                    ),
                )

        in_background(update())
        return {"status": "ok"}

    @app.post(RESET_PREFIX_CACHE_PATH)
    async def reset_prefix_cache():
        async def reset_after_updates() -> None:
            pending = [task for task in background_tasks if task is not asyncio.current_task()]
            await asyncio.gather(*pending, return_exceptions=True)
            await gate.resume()

        in_background(reset_after_updates())
        return {"status": "ok"}

    @app.post(NUM_BACKGROUND_TASKS_PATH)
    async def get_num_background_tasks():
        return {"num_background_tasks": len(background_tasks)}

    @app.post(CLOSE_COMMUNICATOR_PATH)
    async def close_communicator():
        if on_cpu:
            return nccl_on_cpu
        await unless_engine_dies(engine, engine.collective_rpc("close_communicator"))
        return {"status": "ok"}
