"""Seeded requests whose prompt is prefilled in chunks, on the real CPU server (rlvr.serve.engine.
spare_seeded_generators): vLLM 0.32 killed its engine on the first one ("CPU Generator does not use offset"). The
server must answer them, alone and among concurrent requests, and keep the seed's promise: the same seed gives the
same tokens whether the prompt was prefilled in chunks (first time) or found in the prefix cache (second time)."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

pytestmark = pytest.mark.slow

# vLLM 0.32 schedules at most this many tokens per engine step on CPU (SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS;
# rlvr serve leaves it): a longer prompt is prefilled in chunks, over several steps.
STEP_TOKEN_BUDGET = 2048


def fresh_prompt(rng: random.Random, words: int = 1500) -> str:
    """~3,700 tokens of made-up words: never in the prefix cache of a server that has not seen this rng's draws."""
    return " ".join("".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 3)))
                    for _ in range(words))


async def complete(client: httpx.AsyncClient, server, prompt: str, seed: int | None) -> dict:
    body = {"model": server.model, "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "logprobs": 1,
            **({} if seed is None else {"seed": seed})}
    response = await client.post(f"{server.base_url}/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text[:500]
    return response.json()


def tokens(answer: dict) -> list[str]:
    return answer["choices"][0]["logprobs"]["tokens"]


def test_seeded_chunked_prefill_alone_then_concurrent_keeps_seeds(tiny_server):
    rng = random.Random()  # fresh prompts at every run: the session's server may have cached earlier ones
    long_prompts = [fresh_prompt(rng) for _ in range(4)]

    async def run():
        async with httpx.AsyncClient() as client:
            alone = await complete(client, tiny_server, long_prompts[0], seed=1000)
            assert alone["usage"]["prompt_tokens"] > STEP_TOKEN_BUDGET  # so it was prefilled in chunks
            cached = await complete(client, tiny_server, long_prompts[0], seed=1000)
            # concurrent: seeded long prompts (fresh) beside unseeded and short ones, in one batch
            mixed = await asyncio.gather(
                *(complete(client, tiny_server, p, seed=2000 + i) for i, p in enumerate(long_prompts[1:])),
                *(complete(client, tiny_server, f"{i} short prompt", seed=None) for i in range(3)))
            again = await asyncio.gather(
                *(complete(client, tiny_server, p, seed=2000 + i) for i, p in enumerate(long_prompts[1:])))
            return alone, cached, mixed[:3], again

    alone, cached, concurrent, again = asyncio.run(run())
    assert tokens(alone) == tokens(cached) and len(tokens(alone)) == 8
    assert [tokens(a) for a in concurrent] == [tokens(a) for a in again]
    assert len({tuple(tokens(a)) for a in concurrent}) == 3  # seeds and prompts differ: so do the samples
    assert httpx.get(f"{tiny_server.url}/health", timeout=10).status_code == 200
    assert tiny_server.exit_code() is None
