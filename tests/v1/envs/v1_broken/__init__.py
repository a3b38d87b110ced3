"""A broken v1 environment for the bridge's tests (imported by the worker through PYTHONPATH, not installed):
`mode` picks the fault, or several comma-separated (`num_tasks` tasks of each, in that order: one worker serves
them all). "raise_reward": its reward raises; "hang": its harness awaits forever (cancellable); "block": its harness
blocks the worker's event loop (only a kill ends it)."""

from __future__ import annotations

import asyncio
import time

import verifiers.v1 as vf
from openai import AsyncOpenAI


class BrokenData(vf.TaskData):
    mode: str


class BrokenTask(vf.Task[BrokenData]):
    @vf.reward(weight=1.0)
    async def reward(self, trace: vf.Trace) -> float:
        if self.data.mode == "raise_reward":
            raise ZeroDivisionError("the reward divided by zero")
        return 0.0


class BrokenConfig(vf.TasksetConfig):
    mode: str = "raise_reward"
    num_tasks: int = 2


class BrokenTaskset(vf.Taskset[BrokenTask, BrokenConfig]):
    def load(self) -> list[BrokenTask]:
        return [BrokenTask(BrokenData(prompt=f"Say {i}.", mode=mode), self.config.task)
                for mode in self.config.mode.split(",") for i in range(self.config.num_tasks)]


class BrokenHarness(vf.Harness[vf.HarnessConfig]):
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        if data.mode == "hang":
            await asyncio.sleep(3600)
        if data.mode == "block":
            time.sleep(3600)
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            await client.chat.completions.create(model=ctx.model, messages=[{"role": "user", "content": data.prompt}])
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = ["BrokenHarness", "BrokenTaskset"]
