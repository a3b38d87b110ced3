"""Peak memory (RSS) of one training micro-batch against sequence length and micro-batch token budget, with the
log-probabilities computed over the vocabulary in chunks (rlvr.trainer.policy.token_logprobs) and as one whole
log-softmax over every trained position (the trainer before issue 15, as verifiers' RLTrainer does).

Each point runs in a fresh subprocess: load the model, build one micro-batch of `budget // seq_len` sequences of
`seq_len` random tokens (the last 3/4 trained, as assistant turns after a prompt), run forward + backward of the
policy-gradient surrogate, and read the process's peak RSS (ru_maxrss) before and after the step.

    python benchmarks/train_memory.py [--models tiny-random smollm2-135m] [--quick]

Writes benchmarks/results/train_memory.json. tiny-random (2 layers, hidden 128, 49k vocabulary) is where the
logits dominate; SmolLM2-135M (30 layers, hidden 576, same vocabulary) adds real activations.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "train_memory.json"
GRID = {  # model -> (sequence lengths, micro-batch token budgets)
    "tiny-random": ((512, 1024, 2048, 4096), (4096, 16384)),
    "smollm2-135m": ((512, 2048), (2048,)),
}
QUICK = {"tiny-random": ((512, 2048), (4096,)), "smollm2-135m": ((512,), (512,))}
VOCAB = 49152  # both models'


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one_point(model_name: str, seq_len: int, budget: int, mode: str) -> dict:
    """Runs inside the subprocess."""
    import torch
    from transformers import AutoModelForCausalLM
    from verifiers.rl.trainer.utils import selective_log_softmax

    from rlvr.models import resolve
    from rlvr.trainer.policy import token_logprobs

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve(model_name), dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    samples = max(1, budget // seq_len)
    input_ids = torch.randint(0, model.config.vocab_size, (samples, seq_len))
    mask = torch.ones_like(input_ids)
    keep = torch.arange(seq_len // 4, seq_len - 1)  # positions whose next token is trained
    advantages = torch.randn(samples, keep.numel())
    before = peak_mb()
    start = time.perf_counter()
    if mode == "chunked":
        logprobs, _ = token_logprobs(model, input_ids, mask, keep, temperature=1.0)
    else:  # every trained position's logits at once, as the trainer did before issue 15
        logits = model(input_ids=input_ids, attention_mask=mask, logits_to_keep=keep).logits
        logprobs = selective_log_softmax(logits, input_ids[:, keep + 1])
    (-(logprobs * advantages).mean()).backward()
    seconds = time.perf_counter() - start
    return {"model": model_name, "seq_len": seq_len, "budget_tokens": budget, "samples": samples,
            "tokens": samples * seq_len, "trained_positions": samples * keep.numel(), "mode": mode,
            "vocab": model.config.vocab_size, "rss_before_step_mb": round(before, 1),
            "peak_rss_mb": round(peak_mb(), 1), "step_peak_over_before_mb": round(peak_mb() - before, 1),
            "seconds": round(seconds, 2)}


def available_mb() -> float:
    """MemAvailable: the machine is shared, and a point that needs more would invite the OOM killer."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def logits_estimate_mb(seq_len: int, budget: int, mode: str) -> float:
    """What the step adds over the model, roughly: three float32 (positions x vocabulary) tensors at once (logits,
    log-softmax, a gradient), for every trained position (whole) or one 512-position chunk (chunked)."""
    positions = max(1, budget // seq_len) * (seq_len - 1 - seq_len // 4)
    return 3 * (positions if mode == "whole" else min(positions, 512)) * VOCAB * 4 / 2**20


def run_point(model: str, seq_len: int, budget: int, mode: str) -> dict:
    need, free = logits_estimate_mb(seq_len, budget, mode), available_mb()
    if need > 0.6 * free:
        return {"model": model, "seq_len": seq_len, "budget_tokens": budget, "mode": mode,
                "not_run": f"needs ~{need:.0f} MB for logits alone; {free:.0f} MB available on the shared machine"}
    command = [sys.executable, __file__, "--point", model, str(seq_len), str(budget), mode]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode:
        return {"model": model, "seq_len": seq_len, "budget_tokens": budget, "mode": mode,
                "error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(GRID), choices=list(GRID))
    parser.add_argument("--quick", action="store_true", help="a few points per model")
    parser.add_argument("--point", nargs=4, help=argparse.SUPPRESS)  # internal: one measurement
    args = parser.parse_args()
    if args.point:
        model, seq_len, budget, mode = args.point
        print(json.dumps(one_point(model, int(seq_len), int(budget), mode)))
        return
    grid = QUICK if args.quick else GRID
    points = []
    for model in args.models:
        seq_lens, budgets = grid[model]
        for budget in budgets:
            for seq_len in seq_lens:
                if seq_len > budget:
                    continue
                for mode in ("chunked", "whole"):
                    point = run_point(model, seq_len, budget, mode)
                    points.append(point)
                    print(json.dumps(point), flush=True)
    from rlvr.io import atomic_write_json

    atomic_write_json(RESULTS, {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "what": "one micro-batch forward + backward in float32; chunked = rlvr.trainer.policy.token_logprobs "
                "(logprob_chunk_tokens=512, checkpointed chunks); whole = logits of every trained position at once",
        "points": points,
    })
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
