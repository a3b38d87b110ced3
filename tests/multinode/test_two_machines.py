"""Two "machines" on loopback (docs/multinode.md): two `rlvr train --num-machines 2` launches, each with its own
working directory, one rank each, DDP over gloo on CPU, joined by torchrun's static rendezvous on a free port; the
rollout server a third process on its own port (`--server`), fp32 tiny-random; MT-GRPO on the choice environment.

What cannot run here: NCCL, so the weights reach the server by rlvr's CPU transport (a file in /dev/shm on loopback;
HTTP when the server's address is not loopback), not by the NCCL sync a GPU server takes. The reference run (one
machine, two ranks, `--num-processes 2`) is a session fixture (conftest.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_machines import STEPS, Machines, assert_same_weights, final_weights, read_jsonl  # noqa: E402

from rlvr.serve import ADMIN_HEADER, ADMIN_TOKEN_ENV  # noqa: E402
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


def test_two_machines_train_the_same_batches_as_one_machine_and_end_with_its_weights(rollout_server, one_machine_run,
                                                                                      tmp_path):
    run = tmp_path / "run"
    machines = Machines(tmp_path, run, rollout_server.url, "clean")
    errs = machines.finish()
    for node, err in zip(machines.nodes, errs, strict=True):
        assert node.proc.returncode == 0, err[-3000:]
    ranks = json.loads((run / "ranks.json").read_text())
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
        assert list((tmp_path / f"clean-cwd{machine}").iterdir()) == []


