"""Rollout throughput of `rlvr serve` against plain vLLM.

Both servers run at once with the same vLLM flags (`rlvr.serve.options.vllm_argv`: same model, KV cache size,
--enforce-eager on CPU, hermes tool parser); plain vLLM is `python -m vllm.entrypoints.openai.api_server`.
The rounds alternate between the two (rlvr, plain, rlvr, plain, ...) so that load from other processes on a
shared CPU falls on both alike. A round sends --num-prompts chat requests, --concurrency at a time, each
generating exactly --max-tokens tokens (greedy, ignore_eos). Throughput = completion tokens / wall time;
ratio = median rlvr / median plain (goal >= 0.95). Weight-sync time is measured by benchmarks/weight_sync.py.

Writes benchmarks/results/serve_throughput.json (atomically).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from openai import AsyncOpenAI

from rlvr import models
from rlvr.io import atomic_write_json
from rlvr.serve import launch
from rlvr.serve.launch import default_log_file, free_port, launcher_env, serve_process
from rlvr.serve.options import ServeOptions, vllm_argv

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [
    "Explain in one paragraph why the sky is blue.",
    "Write a short story about a robot learning to paint.",
    "List five uses of a paperclip.",
    "Describe how a bicycle works.",
    "What are the rules of chess, briefly?",
    "Summarize the water cycle.",
    "Give three tips for learning a new language.",
    "Why do cats purr?",
]


async def one_round(base_url: str, model: str, num_prompts: int, concurrency: int, max_tokens: int) -> dict:
    slots = asyncio.Semaphore(concurrency)
    async with AsyncOpenAI(base_url=base_url, api_key="local", timeout=600) as client:

        async def request(i: int) -> int:
            async with slots:
                response = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                    max_tokens=max_tokens,
                    temperature=0.0,
                    logprobs=True,
                    extra_body={"return_token_ids": True, "ignore_eos": True},
                )
                return response.usage.completion_tokens

        start = time.perf_counter()
        tokens = await asyncio.gather(*(request(i) for i in range(num_prompts)))
        seconds = time.perf_counter() - start
    return {"tokens": sum(tokens), "seconds": seconds, "tokens_per_s": sum(tokens) / seconds}


def plain_vllm(model: str, kv_cache_gb: float | None, timeout: float):
    port = free_port()
    options = ServeOptions(
        model=model, host="127.0.0.1", port=port, kv_cache_gb=kv_cache_gb, admin_token=None, log_file=None
    )
    flags = vllm_argv(
        options,
        models.resolve(model),
        [],
        on_cpu=not torch.cuda.is_available(),
        tools=model in models.REGISTRY,
    )
    return serve_process(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *flags],
        model=model,
        port=port,
        url=f"http://127.0.0.1:{port}",
        log_file=default_log_file(f"plain-vllm-{model}", port),
        env=launcher_env(),
        timeout=timeout,
        stop_grace=30,
    )


def machine() -> dict:
    return {
        "cpus": torch.get_num_threads(),
        "platform": platform.platform(),
        "cuda": torch.cuda.is_available(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kv-cache-gb", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for each server to start")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "serve_throughput.json")
    args = parser.parse_args()

    extra = [] if args.kv_cache_gb is None else ["--kv-cache-gb", str(args.kv_cache_gb)]
    with (
        launch(args.model, extra_args=extra, timeout=args.timeout) as rlvr_server,
        plain_vllm(args.model, args.kv_cache_gb, args.timeout) as plain_server,
    ):
        servers = {"rlvr_serve": rlvr_server, "plain_vllm": plain_server}
        for server in servers.values():  # warm-up: first requests pay for lazy initialisation
            asyncio.run(one_round(server.base_url, server.model, 4, 4, 8))
        rounds: dict[str, list[dict]] = {name: [] for name in servers}
        for _ in range(args.rounds):
            for name, server in servers.items():
                result = asyncio.run(
                    one_round(
                        server.base_url, server.model, args.num_prompts, args.concurrency, args.max_tokens
                    )
                )
                rounds[name].append(result)
                print(f"{name:>10}: {result['tokens_per_s']:.1f} tokens/s", flush=True)

    median = {name: statistics.median(r["tokens_per_s"] for r in results) for name, results in rounds.items()}
    report = {
        "model": args.model,
        "num_prompts": args.num_prompts,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "rounds": rounds,
        "median_tokens_per_s": median,
        "ratio_rlvr_over_plain": median["rlvr_serve"] / median["plain_vllm"],
        "machine": machine(),
    }
    atomic_write_json(args.out, report)
    print(
        f"rlvr serve / plain vLLM = {report['ratio_rlvr_over_plain']:.3f} "
        f"({median['rlvr_serve']:.1f} vs {median['plain_vllm']:.1f} tokens/s)"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
