"""Multi-machine options and checks without a training run (rlvr.trainer.nodes; docs/multinode.md): the usual mistakes
named before anything slow starts, the torchrun / accelerate command lines of each machine (accelerate's own parser
and DeepSpeed command builder turn the shipped multi-machine ZeRO configs into torchrun on every machine), the wait
for an unreachable main process, and the agreement check over a real rendezvous store with two real processes."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.serve.launch import free_port
from rlvr.trainer import ConfigError
from rlvr.trainer.nodes import (
    NodeError,
    Nodes,
    disagreements,
    lost_peers_message,
    peer_lost,
    plan_file,
    server_problem,
    wait_for_main,
)
from rlvr.trainer.run import accelerate_config, launch_command

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rendezvous import run_two_ranks  # noqa: E402

TWO = Nodes(num_machines=2, machine_rank=1, main_process_ip="10.0.0.1", main_process_port=29555)


def test_the_usual_mistakes_are_named_with_the_fix():
    ok = dict(server="http://10.0.0.9:8000", run_dir="/shared/run")
    TWO.check(4, **ok)  # two ranks on each of two machines
    Nodes().check(1, server=None, run_dir=None)  # one machine needs none of it
    cases = [
        (Nodes(2, 2, "10.0.0.1"), 2, ok, "--machine-rank 2 with --num-machines 2: give 0 to 1"),
        (Nodes(0), 1, ok, "--num-machines 0: give at least 1"),
        (Nodes(2, 0, "10.0.0.1", 70000), 2, ok, "--main-process-port 70000"),
        (Nodes(2, 0, "10.0.0.1"), 3, ok, r"--num-processes 3 over --num-machines 2: .*\(e.g. --num-processes 2\)"),
        (Nodes(2, 0, "10.0.0.1"), 1, ok, "--num-processes 1 over --num-machines 2"),
        (Nodes(2, 0, None), 2, ok, "needs --main-process-ip"),
        (Nodes(2, 0, "10.0.0.1"), 2, dict(ok, server=None), "needs --server: start the rollout server on its own host"),
        (Nodes(2, 0, "10.0.0.1"), 2, dict(ok, run_dir=None), "needs --run-dir on storage every machine sees"),
    ]
    for nodes, processes, options, message in cases:
        with pytest.raises(NodeError, match=message):
            nodes.check(processes, **options)
    with pytest.raises(NodeError, match="offline algorithms"):
        Nodes(2, 0, "10.0.0.1").check(2, **ok, offline=True)


def test_rlvr_train_names_a_mistake_in_one_line_before_loading_anything(tmp_path):
    result = CliRunner().invoke(app, ["train", "--env", "choice_env", "--model", "tiny-random", "--num-processes", "2",
                                      "--num-machines", "2", "--machine-rank", "1", "--main-process-ip", "127.0.0.1",
                                      "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "--num-machines 2 needs --server" in result.output
    assert not (tmp_path / "run").exists()


def test_each_machine_starts_its_share_of_the_ranks_with_torchrun_at_the_main_process():
    cpu = accelerate_config(4, cuda=False, nodes=TWO)
    assert cpu.name == "cpu_ddp.yaml"  # one machine's CPU config: the command line says how many machines
    command, env = launch_command(cpu, 4, ["-m", "rlvr.cli", "train"], TWO)
    assert command[1:] == ["-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "1", "--master_addr",
                           "10.0.0.1", "--master_port", "29555", "--nproc_per_node", "2", "-m", "rlvr.cli", "train"]
    assert env == {"ACCELERATE_USE_CPU": "true"}


@pytest.mark.parametrize("stage", [2, 3])
def test_the_multi_machine_zero_configs_become_torchrun_on_every_machine(stage):
    """accelerate's own parser and DeepSpeed launch preparation (what `accelerate launch` runs) on the shipped config
    and the options `rlvr train` adds: torchrun's arguments for this machine, its rank, the main process, 8 GPUs each."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    default = accelerate_config(16, cuda=True, bf16=True, nodes=TWO)
    assert default.name == "zero2_multinode.yaml"
    config = default.with_name(f"zero{stage}_multinode.yaml")
    assert accelerate_config(16, config, cuda=True, bf16=True, nodes=TWO) == config
    command, env = launch_command(config, 16, ["-m", "rlvr.cli", "train"], TWO)
    assert command[1:3] == ["-m", "accelerate.commands.launch"] and env == {}
    args, defaults, mp_from_config_flag = _validate_launch_command(launch_command_parser().parse_args(command[3:]))
    assert args.use_deepspeed and args.deepspeed_multinode_launcher == "standard"
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as accelerate's launch_command
    pdsh, ds_env = prepare_deepspeed_cmd_env(args)
    assert pdsh is None  # no `deepspeed --hostfile` command: accelerate runs torchrun's own `run(args)` with these
    assert (args.nnodes, args.node_rank, args.nproc_per_node) == ("2", 1, "8")
    assert (args.rdzv_backend, args.rdzv_endpoint) == ("static", "10.0.0.1:29555")  # machine 0 hosts the store
    assert args.module and args.training_script == "rlvr.cli" and args.training_script_args == ["train"]
    assert ds_env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(stage)
    assert ds_env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_accelerate_configs_that_do_not_fit_the_machines_are_refused():
    one_machine = accelerate_config(8, cuda=True, bf16=True)  # zero2.yaml: pdsh across machines
    with pytest.raises(ConfigError, match="needs deepspeed_multinode_launcher: standard"):
        accelerate_config(16, one_machine, cuda=True, bf16=True, nodes=TWO)
    several = one_machine.with_name("zero3_multinode.yaml")
    with pytest.raises(ConfigError, match="is for 2 machines .* but --num-machines is 1"):
        accelerate_config(16, several, cuda=True, bf16=True)


def test_a_machine_waits_for_the_main_process_then_names_it_when_it_never_answers():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(NodeError, match=rf"machine rank 1: the main process 127.0.0.1:{port} \(machine rank 0\) did "
                                        r"not answer within 1 s .*--main-process-ip"):
        wait_for_main(Nodes(2, 1, "127.0.0.1", port), timeout=1, pause=0.2)
    assert time.monotonic() - start < 30
    with socket.create_server(("127.0.0.1", 0)) as listening:  # answers: returns at once
        wait_for_main(Nodes(2, 1, "127.0.0.1", listening.getsockname()[1]), timeout=1)
    wait_for_main(Nodes(2, 0, "127.0.0.1", port), timeout=1)  # machine 0 hosts it: nothing to wait for


def facts(rank: int, machine: int, **plan) -> dict:
    return {"agree": {"plan": {"server": "http://10.0.0.9:8000", "training": {"learning_rate": 1e-3}, **plan},
                      "versions": {"torch": "2.13.0"}, "resume_from": None},
            "server": "ok", "where": {"rank": rank, "machine": machine, "host": f"node{machine}"}}


def test_disagreements_name_each_value_with_its_ranks_and_machines():
    ranks = [facts(0, 0), facts(1, 0), facts(2, 1, training={"learning_rate": 2e-3}), facts(3, 1)]
    ranks[3]["agree"]["versions"]["torch"] = "2.12.0"
    lines = disagreements(ranks)
    assert lines == [
        "plan.training.learning_rate: 0.001 on ranks 0-1,3 (machine 0, host node0, machine 1, host node1); "
        "0.002 on rank 2 (machine 1, host node1)",
        'versions.torch: "2.13.0" on ranks 0-2 (machine 0, host node0, machine 1, host node1); "2.12.0" on rank 3 '
        "(machine 1, host node1)",
    ]
    assert disagreements([facts(0, 0), facts(1, 1)]) == []


def test_a_server_rank_0_cannot_reach_is_named_with_the_ranks_that_reach_it():
    ranks = [facts(0, 0), facts(1, 1)]
    assert server_problem(ranks) is None
    ranks[0]["server"] = "ConnectError: [Errno 111] Connection refused"
    assert server_problem(ranks) == (
        "the rollout server http://10.0.0.9:8000 does not answer /health from rank 0 (ConnectError: [Errno 111] "
        "Connection refused); it answers from rank 1 (machine 1, host node1) but rank 0 generates the rollouts: give "
        "a URL that machine 0 reaches")
    ranks[1]["server"] = "ConnectTimeout: timed out"
    assert "no rank reaches it: start it (`rlvr serve --model MODEL --host 0.0.0.0" in server_problem(ranks)


def test_ranks_agree_through_the_rendezvous_store_or_all_stop_with_the_same_named_difference(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for machine in range(2):
        plan_file(run_dir, machine, "launch_plan.json").write_text("{}")
    plan = {"env": "choice_env", "model": "tiny-random", "run_dir": str(run_dir), "server": None,
            "training": {"learning_rate": 1e-3}}
    same = run_two_ranks(tmp_path, [plan, plan])
    assert same[0] == same[1] and [f["where"]["rank"] for f in same[0]["every"]] == [0, 1]
    assert same[0]["every"][0]["agree"]["plan_files_seen"] == [0, 1]  # the run directory is shared
    assert same[0]["every"][0]["agree"]["versions"]["torch"]

    other = {**plan, "training": {"learning_rate": 2e-3}}
    differ = run_two_ranks(tmp_path, [plan, other])
    assert differ[0] == differ[1]  # every rank stops with the same message
    assert differ[0]["error"].splitlines() == [
        "the ranks disagree on the run (run rlvr train with the same options, packages and shared --run-dir on every "
        "machine):",
        f"  plan.training.learning_rate: 0.001 on rank 0 (machine 0, host {socket.gethostname()}); 0.002 on rank 1 "
        f"(machine 1, host {socket.gethostname()})",
    ]


def test_a_collective_that_lost_its_peer_is_told_from_other_failures(tmp_path):
    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:11948: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging")
    assert peer_lost(gloo) and peer_lost(RuntimeError("... Connection closed by peer [127.0.0.1]:1234"))
    assert not peer_lost(RuntimeError("CUDA out of memory"))
    (tmp_path / "checkpoint-2").mkdir()
    message = lost_peers_message(gloo, tmp_path, "rlvr train ... --resume")
    assert "\n" not in message
    assert message.startswith("rank 0 (machine 0): another rank is gone ([/pytorch/third_party/gloo")
    assert message.endswith(f"the newest checkpoint is {tmp_path / 'checkpoint-2'}. Continue on every machine "
                            "with: rlvr train ... --resume")
