"""Fixtures of the GPU checks (tests/gpu, marker `gpu`): the device they run on and tiny-random on CPU and on it.

Every test here compares the training-side code on a CUDA device with the same code on CPU in float32 (the path
the rest of the suite checks). The root conftest skips them where no CUDA device is at hand.

RLVR_GPU_CHECK_DEVICE=cpu runs them with "cpu" as the device: a dry run of the checks' own logic on a machine
without a GPU (CPU against CPU agrees trivially, so it proves nothing about CUDA). `make gpu-check` never sets it.
"""

from __future__ import annotations

import os

import pytest
import torch

DEVICES = ("cuda", "cpu")


@pytest.fixture(scope="session")
def device() -> torch.device:
    name = os.environ.get("RLVR_GPU_CHECK_DEVICE", "cuda")
    if name not in DEVICES:
        pytest.fail(f"RLVR_GPU_CHECK_DEVICE={name!r}: use 'cuda' (the default) or 'cpu' (a dry run of the checks' "
                    "logic on a machine without a GPU)", pytrace=False)
    return torch.device(name)


@pytest.fixture(scope="session")
def cpu_policy(tiny_model):
    """tiny-random as the trainer loads it for full fine-tuning in float32, on CPU: the reference side."""
    from rlvr.trainer.policy import load_policy

    policy, _ = load_policy(str(tiny_model), bf16=False)
    return policy.eval()
