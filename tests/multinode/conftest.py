"""Fixtures of the two-machine loopback tests: the rollout server, a process on its own port (fp32 tiny-random), and
the reference run (one machine, two ranks)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_machines import STEPS, WAIT_S, Training, environment, train_command, trained_steps  # noqa: E402


@pytest.fixture(scope="session")
def rollout_server():
    from rlvr.serve.launch import launch

    with launch(model="tiny-random", extra_args=["--dtype", "float32"], timeout=600) as server:
        yield server


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


