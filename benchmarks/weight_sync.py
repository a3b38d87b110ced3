"""CPU weight sync into `rlvr serve`: a trainer's wall time per update, where it goes, and that the update is right.

For each served dtype (--dtypes; "float32" is what a trainer gets with `launch(dtype=torch.float32)`, "auto" is
vLLM's own choice, bfloat16 on CPU) this starts one `rlvr serve` of --model, loads the model in float32 with
transformers into ordinary memory (as a trainer holds it), and --repeats times: changes every weight in place (a
stand-in for an optimizer step) and times `CPUWeightSyncClient.update_weights(model.state_dict())` for each of
--transports, taking turns: "file" (the default on one machine: one file in /dev/shm overwritten in place),
"file-per-update" (`keep_file=False`: a new file written and deleted per update) and "http" (the bytes sent).
Per update it records

- `seconds`: the whole call, as the trainer waits for it;
- `write_seconds`: preparing the tensors and writing the file (file transport) or serialising them (http);
- `load_seconds`: the server's part: pause generation, reload in the vLLM worker, reset the prefix cache, resume;
- `reload_seconds`: the worker's `reload_weights` alone (vLLM: weight loaders, CPU weight repacking);
- the 1-minute load average, since the machine may be shared.

The first update of each client is reported apart (`first`): it creates the file. After the last update the
server's prompt logprobs of a fixed text are compared with a transformers forward of the same weights
(`max_abs_logprob_diff`); `max_abs_logprob_diff_at_start` is the same comparison before any update (the
checkpoint's weights on both sides), the gap that the served dtype alone makes.

    .venv/bin/python benchmarks/weight_sync.py [--model smollm2-135m] [--dtypes float32,auto] [--repeats 8]

Writes benchmarks/results/weight_sync.json (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import torch

from rlvr import models
from rlvr.io import atomic_write_json
from rlvr.serve import CPUWeightSyncClient, launch

REPO = Path(__file__).resolve().parents[1]
PROBE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Weight sync must land every tensor, the tied head too."
)
STEP_SCALE = 1e-3
TRANSPORTS = ("file", "file-per-update", "http")


def trainer_model(model: str) -> torch.nn.Module:
    """The model in float32, each parameter in its own freshly allocated memory (not a view of the checkpoint)."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(models.resolve(model), dtype=torch.float32)
    with torch.no_grad():
        for param in policy.parameters():
            param.data = param.data.clone()
    return policy


@torch.no_grad()
def fake_optimizer_step(policy: torch.nn.Module, generator: torch.Generator) -> None:
    for param in policy.parameters():
        param.add_(STEP_SCALE * torch.randn(param.shape, generator=generator))


@torch.no_grad()
def logprob_gap(server_url: str, served_name: str, policy: torch.nn.Module, tokenizer) -> float:
    """max |server - transformers| over the probe text's prompt logprobs (the trainer's sync check does the same)."""
    ids = tokenizer(PROBE_TEXT)["input_ids"]
    response = httpx.post(
        f"{server_url}/v1/completions",
        json={"model": served_name, "prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0},
        timeout=120,
    )
    response.raise_for_status()
    entries = response.json()["choices"][0]["prompt_logprobs"]
    served = [entry[str(token)]["logprob"] for token, entry in zip(ids[1:], entries[1:], strict=True)]
    logprobs = torch.log_softmax(policy(torch.tensor([ids])).logits[0].float(), dim=-1)
    expected = [logprobs[i, token].item() for i, token in enumerate(ids[1:])]
    return max(abs(a - b) for a, b in zip(served, expected, strict=True))


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(url: str, transports: list[str], policy: torch.nn.Module, repeats: int) -> dict:
    """Per transport: its first update and `repeats` more, the transports taking turns (in rotating order) after
    each fake optimizer step, so that load from other processes falls on all of them alike."""
    generator = torch.Generator().manual_seed(0)
    runs: dict[str, list[dict]] = {transport: [] for transport in transports}
    with ExitStack() as stack:
        clients = {
            transport: stack.enter_context(
                CPUWeightSyncClient(
                    url,
                    transport=transport.removesuffix("-per-update"),
                    keep_file=transport != "file-per-update",
                )
            )
            for transport in transports
        }
        for i in range(repeats + 1):
            fake_optimizer_step(policy, generator)
            state = policy.state_dict()
            for transport in transports[i % len(transports) :] + transports[: i % len(transports)]:
                answer = clients[transport].update_weights(state)
                run = {
                    key: answer[key] for key in ("seconds", "write_seconds", "load_seconds", "reload_seconds")
                }
                run["load_average_1m"] = os.getloadavg()[0]
                runs[transport].append(run)
                print(
                    f"  {transport} {'first' if i == 0 else f'{i}/{repeats}'}: {run['seconds']:.2f} s "
                    f"(write {run['write_seconds']:.2f}, load {run['load_seconds']:.2f} of which reload "
                    f"{run['reload_seconds']:.2f}; load average {run['load_average_1m']:.1f})",
                    flush=True,
                )
    return {
        transport: {
            "first": done[0],
            "runs": done[1:],
            **{key: summary([r[key] for r in done[1:]]) for key in done[0]},
        }
        for transport, done in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--dtypes", default="float32,auto", help="served dtypes (launch(dtype=...)), comma-separated"
    )
    parser.add_argument("--transports", default="file", help=f"comma-separated, of {', '.join(TRANSPORTS)}")
    parser.add_argument("--repeats", type=int, default=8, help="timed updates per transport, after the first")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the server to start")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "weight_sync.json")
    args = parser.parse_args()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or not set(transports) <= set(TRANSPORTS):
        parser.error(f"--transports takes {', '.join(TRANSPORTS)}, got {args.transports!r}")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models.resolve(args.model))
    state = trainer_model(args.model).state_dict()
    report: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "model": args.model,
        "num_tensors": len(state),
        "megabytes": sum(t.numel() * t.element_size() for t in state.values()) / 2**20,
        "trainer_dtype": "float32",
        "served": {},
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
        },
    }
    for dtype in dtypes:
        print(f"rlvr serve --model {args.model} --dtype {dtype}", flush=True)
        started = time.perf_counter()
        with launch(args.model, timeout=args.timeout, dtype=dtype) as server:
            print(f"  up in {time.perf_counter() - started:.0f} s", flush=True)
            policy = trainer_model(args.model)
            result: dict = {
                "max_abs_logprob_diff_at_start": logprob_gap(server.url, server.model, policy, tokenizer)
            }
            result.update(measure(server.url, transports, policy, args.repeats))
            result["max_abs_logprob_diff"] = logprob_gap(server.url, server.model, policy, tokenizer)
            print(
                f"  max |server - transformers| logprob: {result['max_abs_logprob_diff']:.2e} "
                f"(before any update: {result['max_abs_logprob_diff_at_start']:.2e})",
                flush=True,
            )
        report["served"][dtype] = result
        atomic_write_json(args.out, report)  # after each server: a later failure keeps what was measured
    for dtype, result in report["served"].items():
        for transport in transports:
            r = result[transport]
            print(
                f"{args.model} served in {dtype}, {transport}: {r['seconds']['median']:.2f} s per update "
                f"(write {r['write_seconds']['median']:.2f}, server {r['load_seconds']['median']:.2f}, "
                f"of which reload {r['reload_seconds']['median']:.2f}); logprob gap "
                f"{result['max_abs_logprob_diff']:.1e} (at start {result['max_abs_logprob_diff_at_start']:.1e})"
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
