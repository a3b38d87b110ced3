"""`unless_engine_dies`: an engine call that vLLM would leave waiting forever once its engine died is ended.

The engine here is a stand-in object with vLLM's `errored` flag: the point is the asyncio logic around a call whose
future never resolves, which a real engine only shows under a well-timed crash (the real crash mid-update is in
tests/serve/test_process_tree.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from vllm.v1.engine.exceptions import EngineDeadError

from rlvr.serve.gate import ENGINE_POLL_S, engine_died, unless_engine_dies


class Engine:
    errored = False


def test_a_call_answered_in_time_returns_its_result():
    async def call():
        await asyncio.sleep(0.01)
        return 42

    assert asyncio.run(unless_engine_dies(Engine(), call())) == 42


def test_a_call_the_dead_engine_never_answers_raises_engine_dead_and_is_cancelled():
    engine = Engine()
    never = asyncio.Event()
    cancelled = []

    async def call():
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def die_later():
        await asyncio.sleep(0.3)
        engine.errored = True

    async def main():
        asyncio.get_running_loop().create_task(die_later())
        start = time.monotonic()
        with pytest.raises(EngineDeadError):
            await unless_engine_dies(engine, call())
        await asyncio.sleep(0)  # let the cancellation reach the call
        return time.monotonic() - start

    waited = asyncio.run(main())
    assert waited < 0.3 + 2 * ENGINE_POLL_S + 1.0
    assert cancelled == [True]


def test_a_call_that_fails_raises_its_own_error():
    async def call():
        raise ValueError("bad weights")

    with pytest.raises(ValueError, match="bad weights"):
        asyncio.run(unless_engine_dies(Engine(), call()))


def test_a_death_declared_after_the_failure_is_still_seen():
    engine = Engine()

    async def main():
        async def die_later():
            await asyncio.sleep(0.3)
            engine.errored = True

        asyncio.get_running_loop().create_task(die_later())
        return await engine_died(engine, wait_s=5.0), await engine_died(Engine(), wait_s=0.2)

    assert asyncio.run(main()) == (True, False)
