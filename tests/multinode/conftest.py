"""Fixtures of the two-machine loopback tests: the rollout server, a process on its own port (the session's fp32
tiny-random training server), and the reference run (one machine, two ranks)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_machines import STEPS, WAIT_S, Training, environment, train_command, trained_steps  # noqa: E402


@pytest.fixture(scope="session")
def rollout_server(training_server):
    """The third "host": every run pushes its weights before its first batch, so the shared training server serves
    each run as a server of its own would."""
    return training_server


@pytest.fixture(scope="session")
def one_machine_run(rollout_server, tmp_path_factory) -> Path:
    """The reference: one machine, two ranks (`rlvr train --num-processes 2`, torchrun --standalone)."""
    tmp = tmp_path_factory.mktemp("one_machine")
    run = tmp / "run"
    training = Training(train_command(run, rollout_server.url, "--num-processes", "2"), tmp / "cwd",
                        tmp / "stderr.txt", **environment())
    err = training.finish(WAIT_S)
    assert training.proc.returncode == 0, err[-3000:]
    assert trained_steps(run) == list(range(1, STEPS + 1))
    return run


