"""`WeightUpdateGate`: no request is generated with two sets of weights. Shared by the NCCL and CPU routes.

`unless_engine_dies`: every engine call of those routes goes through it, so that a route answers when the engine
dies under it instead of waiting forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")
# How often a pending engine call checks that the engine is alive: vLLM's own watchdog checks every 5 s.
ENGINE_POLL_S = 0.5


async def unless_engine_dies(engine: Any, call: Awaitable[T]) -> T:
    """Await an engine call (`collective_rpc`, a pause, a cache reset), or raise vLLM's `EngineDeadError` once the
    engine is found dead.

    vLLM 0.32 resolves a utility call's future only from the engine's answer (`_call_utility_async` in
    vllm/v1/engine/core_client.py); when the engine core or its worker dies mid-call, the exception goes to the
    generation queue and the call waits forever. A weight update in flight then never answers, and since vLLM's
    watchdog stops the API server gracefully (uvicorn waits for open requests), the server never exits either:
    the trainer hangs instead of seeing a dead server and restarting it.
    """
    from vllm.v1.engine.exceptions import EngineDeadError

    task = asyncio.ensure_future(call)
    while True:
        done, _ = await asyncio.wait({task}, timeout=ENGINE_POLL_S)
        if done:
            return task.result()
        if engine.errored:
            task.cancel()
            raise EngineDeadError("the engine died while this call was waiting for it")


async def engine_died(engine: Any, wait_s: float = 5.0) -> bool:
    """Whether the engine is dead or declared dead within `wait_s`. A call that fails because the engine is dying
    can fail before the API server notices the death: the engine core answers its pending calls with
    "cancelled" on its way out, and the API server's monitor sees the process exit a moment later."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while not engine.errored:
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return True


class WeightUpdateGate:
    """Pauses generation around a weight update so that no request sees two sets of weights.

    vLLM's ``pause_generation(mode="wait")`` lets running requests finish and keeps new ones queued; after the
    load the prefix cache is dropped (its KV entries come from the old weights) and the scheduler resumes.
    The NCCL protocol sends one parameter per request, so there the pause opens at the first
    ``/update_named_param`` and closes at ``/reset_prefix_cache``, which verifiers' trainer sends after the last one.
    `version` counts completed updates (the CPU routes return it as ``weight_version``).
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._lock = asyncio.Lock()
        self._paused = False
        self.version = 0

    async def pause(self) -> None:
        async with self._lock:
            if not self._paused:
                await unless_engine_dies(
                    self.engine, self.engine.pause_generation(mode="wait", clear_cache=False)
                )
                self._paused = True

    async def resume(self) -> None:
        async with self._lock:
            await unless_engine_dies(self.engine, self.engine.reset_prefix_cache())
            if self._paused:
                self.version += 1
                await unless_engine_dies(self.engine, self.engine.resume_generation())
                self._paused = False
