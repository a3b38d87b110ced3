"""A rollout server of our own for the training tests: training changes its weights, and the shared session
servers must keep theirs. fp32, like the trainer on CPU (vLLM's CPU default is bf16), so that the server's
logprobs can be compared with the trainer's to float32 rounding."""

import pytest

from rlvr.serve import launch


@pytest.fixture(scope="session")
def training_server(tiny_model):
    with launch(model="tiny-random", extra_args=["--dtype", "float32"]) as server:
        yield server
