"""Two "machines" on loopback (docs/multinode.md): two `rlvr train --num-machines 2` launches, each with its own
working directory, one rank each, DDP over gloo on CPU, joined by torchrun's static rendezvous on a free port; the
rollout server a third process on its own port (`--server`), fp32 tiny-random; MT-GRPO on the choice environment.

Faults across the two machines, in one chained run: the rollout server (the user's, on its own port) killed and
started again by hand, the ranks waiting for it; then SIGTERM to machine 1's rank only, both machines stopping at the
same step with one checkpoint; then `--resume` on both machines, which finishes the run. It ends like one machine's
two ranks: the same batches, losses and weights, bit for bit (a batch the kill interrupted is generated again from
the same weights and seeds, and the resume restores every rank's state), so the same run checks both what the
faults leave and that two machines train like one. (A clean two-machine run of its own used to check the latter:
two launches more.)

What cannot run here: NCCL, so the weights reach the server by rlvr's CPU transport (a file in /dev/shm on loopback;
HTTP when the server's address is not loopback), not by the NCCL sync a GPU server takes. The reference run (one
machine, two ranks, `--num-processes 2`) is a session fixture (conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_machines import STEPS, Machines, assert_same_weights, final_weights, read_jsonl, trained_steps  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from test_fault_injection import check_stopped_run, launched_ranks  # noqa: E402

from rlvr.serve import ADMIN_HEADER, ADMIN_TOKEN_ENV  # noqa: E402
from rlvr.serve.launch import free_port, launch  # noqa: E402
from rlvr.trainer.rollout_client import nccl_client  # noqa: E402

# process starts take minutes on a loaded 2-core machine; the first test also pays for the server and the reference
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def test_the_nccl_weight_sync_client_sends_the_admin_token_a_server_on_another_host_asks_for(rollout_server,
                                                                                               monkeypatch):
    """What runs here of the cross-host NCCL sync: verifiers' client, its session carrying $RLVR_ADMIN_TOKEN (which a
    server bound to a non-loopback address asks for; this loopback one does not check it), opening its
    communicator on the server: the request reaches the NCCL route, which on this CPU server says NCCL needs CUDA."""
    monkeypatch.setenv(ADMIN_TOKEN_ENV, "secret")
    client = nccl_client(rollout_server.url, 60)
    assert client.session.headers[ADMIN_HEADER] == "secret"
    with pytest.raises(Exception, match="Request failed: 501.*NCCL weight sync needs CUDA"):
        client.init_communicator()
    monkeypatch.delenv(ADMIN_TOKEN_ENV)
    assert ADMIN_HEADER not in nccl_client(rollout_server.url, 60).session.headers


def wait_for_batch(machines: Machines, index: int, timeout: float = 900) -> None:
    """Until the main machine logged batch `index`; fails when a machine exits first."""
    import time

    deadline = time.monotonic() + timeout
    while not any(r["batch_index"] == index for r in read_jsonl(machines.run / "rollouts.jsonl")):
        for node in machines.nodes:
            assert node.proc.poll() is None, f"a machine exited with {node.proc.returncode}: {node.err()[-3000:]}"
        assert time.monotonic() < deadline, f"no batch {index} within {timeout} s"
        time.sleep(0.5)


ONLY_THE_PREEMPTIONS_CHECKPOINT = ("--set", "save_steps=1000")


def user_server(port: int, tmp_path: Path, name: str):
    return launch(model="tiny-random", port=port, extra_args=["--dtype", "float32"], log_file=tmp_path / name,
                  timeout=900)


def test_two_machines_wait_for_their_restarted_server_stop_together_on_one_sigterm_resume_and_end_like_one_machine(
        one_machine_run, tmp_path):
    """The faults of tests/faults/test_fault_injection.py with the ranks on two machines. The server is the user's
    (on its own host in a real run), so the ranks wait for it rather than restart it; a SIGTERM that reaches one
    machine's rank stops both at the step they agree on; the checkpoint resumes on both machines, and the run ends
    with the batches, losses and weights of one machine's two ranks."""
    run, port = tmp_path / "run", free_port()
    with user_server(port, tmp_path, "server-1.log") as server:
        machines = Machines(tmp_path, run, server.url, "faulty", *ONLY_THE_PREEMPTIONS_CHECKPOINT)
        wait_for_batch(machines, 1)
        os.killpg(os.getpgid(server.pid), signal.SIGKILL)  # as the OOM killer would, on the server's host
    with user_server(port, tmp_path, "server-2.log"):  # the user starts it again on its port
        wait_for_batch(machines, 3)
        ranks = launched_ranks(machines.nodes[1].proc.pid)
        assert list(ranks) == [1], ranks  # machine 1 runs rank 1 only
        os.kill(ranks[1], signal.SIGTERM)  # a preemption that reaches machine 1 only
        errs = machines.finish()
        main_err = " ".join(errs[0].split())  # the launcher's console wraps long lines
        assert "(--server) died" in main_err or "(--server) does not answer" in main_err, errs[0][-3000:]
        assert "answers again: the current weights are pushed and the batch generated again" in main_err
        for node, err in zip(machines.nodes, errs, strict=True):
            assert node.proc.returncode != 0, err[-3000:]
            assert err.count("rlvr: SIGTERM received") == (1 if node is machines.nodes[1] else 0), err[-3000:]
        stopped = check_stopped_run(run, "\n".join(errs), processes=2)  # one checkpoint with both ranks' states
        for err in errs:  # both machines stopped at that step
            assert f"stopped on SIGTERM at step {stopped}, checkpoint-{stopped} written" in " ".join(err.split())
        assert stopped < STEPS

        resumed = Machines(tmp_path, run, server.url, "resumed", *ONLY_THE_PREEMPTIONS_CHECKPOINT, "--resume")
        for node, err in zip(resumed.nodes, resumed.finish(), strict=True):
            assert node.proc.returncode == 0, err[-3000:]
    assert trained_steps(run) == list(range(1, STEPS + 1))
    assert [b["batch_index"] for b in read_jsonl(run / "rollouts.jsonl")] == list(range(STEPS))
    assert (run / "final" / "model.safetensors").is_file()
    ranks = json.loads((run / "ranks.json").read_text())  # the resumed launches'
    assert [(r["rank"], r["machine"], r["server"]) for r in ranks] == [(0, 0, "ok"), (1, 1, "ok")]

    # the same batches, rewards and losses as one machine's two ranks, and the same weights bit for bit
    assert read_jsonl(run / "rollouts.jsonl") == read_jsonl(one_machine_run / "rollouts.jsonl")
    ours, theirs = ([{k: r[k] for k in ("step", "loss", "reward", "grad_norm")} for r in read_jsonl(path / "metrics.jsonl")
                     if "loss" in r] for path in (run, one_machine_run))
    assert ours == theirs and len(ours) == STEPS
    assert_same_weights(run, one_machine_run)
    from rlvr import models

    start = load_file(Path(models.resolve("tiny-random")) / "model.safetensors")
    assert any(not torch.equal(start[name], weight) for name, weight in final_weights(run).items())  # it trained
    for machine in range(2):  # each machine wrote its own plan; nothing landed in a working directory
        assert (run / f"launch_plan-machine{machine}.json").is_file()
        for launch_name in ("faulty", "resumed"):
            assert list((tmp_path / f"{launch_name}-cwd{machine}").iterdir()) == []
