"""Run by tests/v1/test_worker_seeds.py in the bridge's interpreter (.venv-v1): rlvr's worker installed over
renderers' real `generate` entry point (what verifiers' train client calls for every model call), with the HTTP call
itself recorded instead of sent (no vLLM server here). Prints one JSON line: the seeds each call was sent with."""

from __future__ import annotations

import asyncio
import json

from credit_suite_v1_cases import load_worker
from renderers import client

sent: list[dict] = []


async def recorded(**kwargs):  # stands in for the HTTP request only: what reaches vLLM is what we record
    sent.append(kwargs["sampling_params"])
    return {}


async def main() -> None:
    client.generate = recorded
    worker = load_worker()
    worker.seed_each_call()
    episode = {"seed": 1234, "temperature": 1.0}
    for prompt_ids in ([1, 2, 3], [1, 2, 3, 4, 5, 6], [1, 2, 3]):  # two turns of an episode, then its first again
        await client.generate(sampling_params=episode, prompt_ids=prompt_ids, messages=[], model="m")
    await client.generate(sampling_params={"temperature": 1.0}, prompt_ids=[1, 2], messages=[], model="m")
    result = {"sent": sent, "expected": [worker.call_seed(1234, n) for n in (3, 6, 3)],
              "episode_unchanged": episode == {"seed": 1234, "temperature": 1.0}}
    worker.PROTOCOL.write(json.dumps(result) + "\n")  # the worker points sys.stdout at stderr
    worker.PROTOCOL.flush()


asyncio.run(main())
