"""`WeightUpdateGate`: no request is generated with two sets of weights. Shared by the NCCL and CPU routes."""

from __future__ import annotations

import asyncio
from typing import Any


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
                await self.engine.pause_generation(mode="wait", clear_cache=False)
                self._paused = True

    async def resume(self) -> None:
        async with self._lock:
            await self.engine.reset_prefix_cache()
            if self._paused:
                self.version += 1
                await self.engine.resume_generation()
                self._paused = False
