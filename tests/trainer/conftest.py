"""A rollout server of our own for the training tests: training changes its weights, and the shared session
servers must keep theirs."""

import pytest

from rlvr.serve import launch


@pytest.fixture(scope="session")
def training_server(tiny_model):
    # vLLM's CPU default dtype (bf16). With --dtype float32 the CPU weight reload leaves the served logprobs
    # unchanged (measured: diff after sync == diff before); reported to the serve owner.
    with launch(model="tiny-random") as server:
        yield server
