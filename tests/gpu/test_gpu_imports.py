"""What the GPU checks import must import on a GPU machine's own Python: torch, transformers, peft, accelerate, no
verifiers and no vLLM (verifiers' RL package pulls vLLM in; a training-only GPU machine has neither). Runs
everywhere (no `gpu` mark), so that a new import in these modules is caught before a GPU machine is at hand."""

from __future__ import annotations

import json
import subprocess
import sys

GPU_CHECK_MODULES = ["rlvr.models", "rlvr.trainer.policy", "rlvr.trainer.loss", "rlvr.trainer.producer"]
ABSENT_ON_GPU_MACHINES = ["verifiers", "vllm", "liger_kernel", "wandb", "openai", "datasets", "deepspeed"]


def test_the_gpu_checks_modules_import_without_verifiers_or_vllm():
    code = (f"import sys, json\nfor m in {GPU_CHECK_MODULES!r}: __import__(m)\n"
            f"print(json.dumps(sorted(m for m in {ABSENT_ON_GPU_MACHINES!r} if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
