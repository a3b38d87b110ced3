"""What the two-machine loopback tests use (docs/multinode.md): the `rlvr train` command lines, two "machines" as two
launches, and the checks of a run directory. The fixtures built on them are in conftest.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from rlvr.serve.launch import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from test_fault_injection import Training, read_jsonl  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).resolve().parent / "choice_tiny.toml"
# The chained fault run sends its SIGTERM once batch 3 is logged and must stop before the last step: with 5 steps
# the two left took 2 s each on an idle machine, less than the test's poll and /proc walk, and the run ended
# before the signal landed (exit 0, 2026-11-28 13:18). 7 steps leave three.
STEPS = 7
WAIT_S = 900  # process starts take minutes on a loaded 2-core machine


def train_command(run: Path, server_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", "train", "--config", str(CONFIG), "--set", f"max_steps={STEPS}",
            "--server", server_url, "--run-dir", str(run), *extra]


def environment() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "trainer"), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1"}


class Machines:
    """`rlvr train` on two "machines": one launch per machine rank, each in its own working directory, meeting at
    the main process's free port."""

    def __init__(self, tmp: Path, run: Path, server_url: str, name: str, *extra: str):
        port = free_port()
        self.run, self.nodes = run, []
        for rank in range(2):
            command = train_command(run, server_url, "--num-processes", "2", "--num-machines", "2", "--machine-rank",
                                    str(rank), "--main-process-ip", "127.0.0.1", "--main-process-port", str(port),
                                    *extra)
            self.nodes.append(Training(command, tmp / f"{name}-cwd{rank}", tmp / f"{name}-machine{rank}.txt",
                                       **environment()))

    def finish(self, timeout: float = WAIT_S) -> list[str]:
        return [node.finish(timeout) for node in self.nodes]


def trained_steps(run: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "final" / "model.safetensors")


def assert_same_weights(run: Path, reference: Path) -> None:
    ours, theirs = final_weights(run), final_weights(reference)
    assert ours.keys() == theirs.keys()
    different = [name for name in ours if not torch.equal(ours[name], theirs[name])]
    assert not different, different


