"""Soak of `rlvr serve` under agent traffic: many concurrent multi-turn conversations for minutes on end.

Each of --conversations agents runs conversations one after another. A conversation opens with a long context of
made-up words that no other conversation shares (hundreds to thousands of tokens, so its first prefill is chunked
and not in the prefix cache), then takes turns: every request is a seeded chat completion (temperature 1) with
logprobs and a tool offered (the hermes tool-call parser reads every answer); every third turn the answer is
constrained to a tool call (structured outputs), which must come back parsed, and is followed by a tool message;
other turns are followed by a user message. Each turn adds fresh text, so prompts grow, until the context nears the
model's length and the agent starts a new conversation. Meanwhile the weights are replaced every --update-every
seconds (CPU weight sync, a perturbed copy of the model's state dict), while requests are being generated.

Recorded: every answer's status (any 5xx or broken connection is a failure), parsed tool calls, throughput
(requests and completion tokens per second, prompt tokens sent), the server's memory (RSS summed over its process
tree, sampled every --sample-every seconds: peak, and the least-squares slope over the run after the first tenth,
in MB per minute), its prefix-cache hit rate (vLLM's /metrics), and after the server stops, any process of its tree
still alive (a leak). Exit status 1 when anything failed.

    nice -n 10 .venv/bin/python benchmarks/soak_server.py --minutes 15          # writes benchmarks/results/soak_server.json
    .venv/bin/python benchmarks/soak_server.py --server URL --server-pid PID --seconds 30 --out x.json  # a running server

With --server the server is not started here (its leaks are not checked: the one who started it checks them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import random
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

from rlvr.io import atomic_write_json
from rlvr.serve.launch import group_processes, launch

REPO = Path(__file__).resolve().parents[1]
TOOL = {"type": "function", "function": {
    "name": "lookup", "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}
# The constrained answer of a tool turn: the hermes format that `--tool-call-parser hermes` parses.
TOOL_CALL_REGEX = r'<tool_call>\n\{"name": "lookup", "arguments": \{"word": "[a-z]{2,8}"\}\}\n</tool_call>'
MAX_CONTEXT_TOKENS = 6000  # of tiny-random's 8192: room for the next turn's text and answer
MAX_TOKENS = 24
TOOL_CALL_MAX_TOKENS = 64  # room for the whole constrained call (~30 tokens): a cut one is not parsed


def words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 3)))
                    for _ in range(n))


class Tally:
    def __init__(self):
        self.status: Counter[str] = Counter()
        self.failures: list[str] = []
        self.requests = self.completion_tokens = self.prompt_tokens = 0
        self.tool_turns = self.tool_calls_parsed = self.conversations = 0
        self.max_prompt_tokens = 0

    def failed(self, what: str) -> None:
        self.status["failed"] += 1
        if len(self.failures) < 20:
            self.failures.append(what)


async def agent(index: int, client: httpx.AsyncClient, url: str, model: str, deadline: float, tally: Tally) -> None:
    rng = random.Random(index)
    while time.monotonic() < deadline:
        tally.conversations += 1
        conversation = tally.conversations
        messages = [{"role": "system", "content": f"You are agent {index}. Context: {words(rng, rng.randint(300, 1200))}"},
                    {"role": "user", "content": f"Task: {words(rng, 40)}"}]
        for turn in range(12):
            if time.monotonic() >= deadline:
                return
            tool_turn = turn % 3 == 2
            body = {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 1.0,
                    "seed": (index * 1_000_003 + conversation * 101 + turn) % 2**31, "logprobs": True,
                    "tools": [TOOL], "tool_choice": "auto"}
            if tool_turn:
                body |= {"structured_outputs": {"regex": TOOL_CALL_REGEX}, "max_tokens": TOOL_CALL_MAX_TOKENS}
            try:
                response = await client.post(f"{url}/v1/chat/completions", json=body)
            except httpx.HTTPError as err:
                tally.failed(f"agent {index} turn {turn}: {type(err).__name__}: {err}")
                return
            tally.status[f"{response.status_code // 100}xx"] += 1
            if response.status_code != 200:
                tally.failed(f"agent {index} turn {turn}: HTTP {response.status_code}: {response.text[:300]}")
                if response.status_code >= 500:
                    return
                break
            answer = response.json()
            message = answer["choices"][0]["message"]
            usage = answer["usage"]
            tally.requests += 1
            tally.completion_tokens += usage["completion_tokens"]
            tally.prompt_tokens += usage["prompt_tokens"]
            tally.max_prompt_tokens = max(tally.max_prompt_tokens, usage["prompt_tokens"])
            if not answer["choices"][0].get("logprobs"):
                tally.failed(f"agent {index} turn {turn}: no logprobs in the answer")
            calls = message.get("tool_calls") or []
            if tool_turn:
                tally.tool_turns += 1
                if len(calls) == 1 and calls[0]["function"]["name"] == "lookup":
                    tally.tool_calls_parsed += 1
                else:
                    tally.failed(f"agent {index} turn {turn}: the constrained tool call was not parsed: {message}")
                    break
                messages += [{"role": "assistant", "content": message.get("content"), "tool_calls": calls},
                             {"role": "tool", "tool_call_id": calls[0]["id"], "content": words(rng, rng.randint(100, 300))}]
            else:
                messages += [{"role": "assistant", "content": message.get("content") or ""},
                             {"role": "user", "content": words(rng, rng.randint(50, 200))}]
            if usage["prompt_tokens"] > MAX_CONTEXT_TOKENS - 1000:
                break


def update_weights(url: str, model: str, every: float, stop: threading.Event, record: list[float],
                   tally: Tally) -> None:
    """Replace the weights every `every` seconds with a perturbed copy of the model's (so generation goes on across
    real weight changes), until `stop` or an update fails (counted as a failure)."""
    import torch
    from safetensors.torch import load_file

    from rlvr import models
    from rlvr.serve import CPUWeightSyncClient

    base = load_file(Path(models.resolve(model)) / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    with CPUWeightSyncClient(url) as client:
        while not stop.wait(every):
            state = {name: tensor + 1e-3 * torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
                     if tensor.is_floating_point() else tensor for name, tensor in base.items()}
            if "lm_head.weight" not in state:  # tied (tiny-random): vLLM may keep its own lm_head
                state["lm_head.weight"] = state["model.embed_tokens.weight"]
            try:
                record.append(client.update_weights(state)["seconds"])
            except Exception as err:  # noqa: BLE001 (any failure of an update is the soak's finding)
                tally.failed(f"weight update {len(record) + 1}: {type(err).__name__}: {err}")
                return


def tree_rss_mb(pid: int) -> float:
    """RSS of the server's process tree (its process group: `launch` makes the server a group leader)."""
    total = 0
    for member in group_processes(pid):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{member}/status").read_text()
            total += int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))
    return total / 1024


def sample_memory(pid: int, every: float, stop: threading.Event, samples: list[tuple[float, float]]) -> None:
    start = time.monotonic()
    while True:
        samples.append((time.monotonic() - start, tree_rss_mb(pid)))
        if stop.wait(every):
            return


def memory_summary(samples: list[tuple[float, float]]) -> dict:
    """Peak, and the least-squares slope after the first tenth of the run (start-up allocations excluded)."""
    times = np.array([t for t, _ in samples])
    rss = np.array([m for _, m in samples])
    settled = times >= times[-1] / 10
    slope = float(np.polyfit(times[settled] / 60, rss[settled], 1)[0]) if settled.sum() >= 3 else float("nan")
    return {"peak_mb": float(rss.max()), "start_mb": float(rss[0]), "end_mb": float(rss[-1]),
            "slope_mb_per_min": slope, "samples": len(samples)}


def prefix_cache_hit_rate(url: str) -> float | None:
    """vLLM's counters: tokens found in the prefix cache / tokens looked up."""
    text = httpx.get(f"{url}/metrics", timeout=30).text

    def total(name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    queries = total("vllm:prefix_cache_queries_total")
    return total("vllm:prefix_cache_hits_total") / queries if queries else None


def soak(url: str, model: str, pid: int, seconds: float, conversations: int, update_every: float,
         sample_every: float) -> dict:
    tally, updates, samples = Tally(), [], []
    stop = threading.Event()
    threads = [threading.Thread(target=sample_memory, args=(pid, sample_every, stop, samples), daemon=True)]
    if update_every > 0:
        threads.append(threading.Thread(target=update_weights, args=(url, model, update_every, stop, updates, tally),
                                        daemon=True))
    for thread in threads:
        thread.start()

    async def run() -> None:
        deadline = time.monotonic() + seconds
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=conversations)) as client:
            await asyncio.gather(*(agent(i, client, url, model, deadline, tally) for i in range(conversations)))

    start = time.monotonic()
    asyncio.run(run())
    wall = time.monotonic() - start
    stop.set()
    for thread in threads:
        thread.join(timeout=600)
    try:
        healthy = httpx.get(f"{url}/health", timeout=30).status_code == 200
    except httpx.HTTPError:
        healthy = False
    return {
        "seconds": wall, "conversations_in_flight": conversations, "conversations": tally.conversations,
        "requests": tally.requests, "status": dict(tally.status), "failures": tally.failures,
        "requests_per_s": tally.requests / wall, "completion_tokens_per_s": tally.completion_tokens / wall,
        "prompt_tokens_per_s": tally.prompt_tokens / wall, "mean_prompt_tokens": tally.prompt_tokens / max(1, tally.requests),
        "max_prompt_tokens": tally.max_prompt_tokens, "tool_turns": tally.tool_turns,
        "tool_calls_parsed": tally.tool_calls_parsed, "weight_updates": len(updates),
        "weight_update_seconds_mean": float(np.mean(updates)) if updates else None,
        "prefix_cache_hit_rate": prefix_cache_hit_rate(url) if healthy else None, "memory": memory_summary(samples),
        "healthy_after": healthy,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=None, help="instead of --minutes")
    parser.add_argument("--conversations", type=int, default=16, help="conversations in flight at once")
    parser.add_argument("--update-every", type=float, default=20.0, help="seconds between weight updates (0: none)")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between memory samples")
    parser.add_argument("--server", default=None, help="root URL of a running rlvr serve (default: start one)")
    parser.add_argument("--server-pid", type=int, default=None, help="its pid (a process group leader), with --server")
    parser.add_argument("--serve-arg", action="append", default=[], help="a flag for the started server (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "soak_server.json")
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else 60 * args.minutes
    if (args.server is None) != (args.server_pid is None):
        parser.error("give --server and --server-pid together")
    started = None
    with contextlib.ExitStack() as stack:
        if args.server is None:
            started = stack.enter_context(launch(args.model, extra_args=args.serve_arg, timeout=1800))
        url, pid = (started.url, started.pid) if started else (args.server.rstrip("/"), args.server_pid)
        model = started.model if started else args.model
        result = soak(url, model, pid, seconds, args.conversations, args.update_every, args.sample_every)
        if started:
            result["server_death"] = started.death()
    if started:  # `launch` has stopped it: nothing of its process group may be left
        result["processes_left"] = group_processes(pid)
    report = {"model": args.model, "serve_args": args.serve_arg, "command": " ".join(sys.argv),
              "machine": {"platform": platform.platform(), "python": platform.python_version()}, **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    ok = (not result["failures"] and result["healthy_after"] and not result.get("processes_left")
          and result["status"].get("5xx", 0) == 0)
    print(f"soak {'passed' if ok else 'FAILED'}: {args.out}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
