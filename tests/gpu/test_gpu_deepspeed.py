"""DeepSpeed ZeRO-2 and ZeRO-3 on one GPU with rlvr's shipped accelerate configs (bf16): one optimizer step of
tiny-random through accelerate's DeepSpeed engine (`zero_step.py`, started by `accelerate launch`, as `rlvr train
--num-processes` starts training) gives a finite loss, bf16 module weights over float32 master partitions, one
DeepSpeed step, and master weights moved by Adam's first step (about lr each).

The trainer's own loop under ZeRO on DeepSpeed's CPU accelerator is tests/trainer/test_step.py; this is the same
engine on CUDA with NCCL and bf16, which the CPU run does not reach.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "src" / "rlvr" / "trainer" / "accelerate"
SCRIPT = Path(__file__).resolve().parent / "zero_step.py"
LR = 1e-3  # zero_step.LR


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("stage", [2, 3])
def test_one_zero_step_on_one_gpu_with_the_shipped_config(tiny_model, device, stage):
    if importlib.util.find_spec("deepspeed") is None:
        pytest.fail(f"DeepSpeed is not installed for {sys.executable}: on a GPU machine without a registry, run "
                    "`make gpu-bundle` where one is reachable and carry build/gpu-check along (Makefile)",
                    pytrace=False)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / f"zero{stage}.yaml"),
               "--num_processes", "1", "--main_process_port", str(free_port()), str(SCRIPT)]
    result = subprocess.run(command, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["zero_stage"] == stage and out["device"] == device.type
    assert out["loss"] == out["loss"] and abs(out["loss"]) < 1e3  # finite
    assert out["logprobs_dtype"] == "torch.float32"  # the log-softmax runs in float32 under DeepSpeed's bf16 too
    assert out["deepspeed_steps"] == 1 and out["skipped_steps"] == 0
    assert out["module_dtypes"] == ["torch.bfloat16"] and out["master_dtypes"] == ["torch.float32"]
    assert out["master_changed_fraction"] > 0.9
    assert out["master_max_change"] == pytest.approx(LR, rel=0.01)  # Adam's first step moves a weight by ~lr
