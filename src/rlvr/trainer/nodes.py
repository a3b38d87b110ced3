"""Training across machines (docs/multinode.md): where the ranks go, checks before anything slow starts, and the
checks every rank takes part in once the process group is up.

rlvr launches nothing of its own: `rlvr train` runs on every machine with the same options plus that machine's rank,
and starts its ranks with torchrun (CPU, gloo) or `accelerate launch` (GPU configs; DeepSpeed with its `standard`
multi-node launcher, which is torchrun again), whose static rendezvous on the main process's address and port joins
the machines. The rollout server runs on its own host (`--server`); only rank 0 talks to it.

- `Nodes`: the machine options (`--num-machines`, `--machine-rank`, `--main-process-ip`, `--main-process-port`),
  checked with what to change (`check`), as torchrun and accelerate arguments.
- `wait_for_main`: on a machine of rank > 0, the main process's rendezvous port answers before the ranks start, or
  one line says it does not (rather than torchrun's timeout traceback).
- `agree`: every rank's resolved plan, package versions, launch environment, checkpoint to resume, view of the run
  directory and of the rollout server, all-gathered at start; any difference stops every rank with one line per
  difference, naming the ranks and machines on each side.
- `peer_lost` / `lost_peers_message`: a collective that failed because another machine's ranks are gone.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_PORT = 29500  # torchrun's and accelerate's default main process port
MAIN_WAIT_S = 300.0  # how long a machine of rank > 0 waits for the main process to start listening
SERVER_WAIT_S = 300.0  # how long each rank waits for the rollout server's /health at start
GATHER_WAIT_S = SERVER_WAIT_S + 300.0  # for every rank's facts: each may wait for the server first
# Distributions whose versions must be equal on every rank: they decide the model's numerics, the loss, the
# collectives and the rollouts' parsing.
PACKAGES = ("rlvr", "verifiers", "torch", "transformers", "accelerate", "deepspeed", "peft")
# Launch settings read from the environment that change what a rank computes (the rest of the environment, such as
# paths and host names, may differ between machines).
AGREED_ENV = ("ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_DEEPSPEED",
              "ACCELERATE_DEEPSPEED_ZERO_STAGE", "DS_ACCELERATOR", "OMP_NUM_THREADS", "WANDB_MODE")
# What gloo and the socket layer say when the other end of a collective is gone (process killed, machine down).
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Connection refused",
             "Socket Timeout", "Timed out waiting")


class NodeError(ValueError):
    """Machines or ranks that cannot train together, with what to change (this module imports no torch at load:
    `rlvr train` checks its options before anything slow starts)."""


@dataclass(frozen=True)
class Nodes:
    """Where this machine's ranks go: `num_machines` machines, this one `machine_rank` (0 hosts the rendezvous and
    rank 0, which talks to the rollout server), joined at `main_process_ip`:`main_process_port`."""

    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int = DEFAULT_PORT

    @property
    def several(self) -> bool:
        return self.num_machines > 1

    def check(self, num_processes: int, *, server: str | None, run_dir: str | None, offline: bool = False) -> None:
        """The usual mistakes, each with what to change; `num_processes` counts every machine's ranks (accelerate's
        meaning), `run_dir` is None when the user did not give one."""
        if self.num_machines < 1:
            raise NodeError(f"--num-machines {self.num_machines}: give at least 1")
        if not 0 <= self.machine_rank < self.num_machines:
            raise NodeError(f"--machine-rank {self.machine_rank} with --num-machines {self.num_machines}: give 0 to "
                              f"{self.num_machines - 1}, a different one on each machine (0 on the main process's)")
        if not 0 < self.main_process_port < 65536:
            raise NodeError(f"--main-process-port {self.main_process_port}: give a TCP port, 1 to 65535")
        if not self.several:
            return
        if num_processes < self.num_machines or num_processes % self.num_machines:
            raise NodeError(f"--num-processes {num_processes} over --num-machines {self.num_machines}: give the "
                              "number of ranks on all machines together, the same number on each (e.g. "
                              f"--num-processes {self.num_machines * max(1, num_processes // self.num_machines)})")
        if not self.main_process_ip:
            raise NodeError(f"--num-machines {self.num_machines} needs --main-process-ip: an address of the machine "
                              "with --machine-rank 0 that every machine can reach (the same on all)")
        if offline:
            raise NodeError("--num-machines with --dataset: the offline algorithms (sft, oreo) train in one process")
        if not server:
            raise NodeError(f"--num-machines {self.num_machines} needs --server: start the rollout server on its own "
                              "host (`rlvr serve --model MODEL --host 0.0.0.0 --port 8000` with an admin token, "
                              "docs/multinode.md) and give every machine its URL")
        if run_dir is None:
            raise NodeError(f"--num-machines {self.num_machines} needs --run-dir on storage every machine sees (a "
                              "shared file system): the default runs/train-TIME differs from machine to machine")

    def torchrun_args(self, num_processes: int) -> list[str]:
        """torchrun's options for this machine's share of `num_processes` ranks (static rendezvous, as accelerate's
        configs say `rdzv_backend: static`: machine 0 hosts the store on the main port)."""
        if not self.several:
            return ["--standalone", "--nproc_per_node", str(num_processes)]
        return ["--nnodes", str(self.num_machines), "--node_rank", str(self.machine_rank), "--master_addr",
                str(self.main_process_ip), "--master_port", str(self.main_process_port), "--nproc_per_node",
                str(num_processes // self.num_machines)]

    def accelerate_args(self) -> list[str]:
        """`accelerate launch` options (they override the config file's)."""
        if not self.several:
            return []
        return ["--num_machines", str(self.num_machines), "--machine_rank", str(self.machine_rank),
                "--main_process_ip", str(self.main_process_ip), "--main_process_port", str(self.main_process_port)]

    def check_accelerate_config(self, loaded: Any, path: Path) -> None:
        """The accelerate config fits these machines: a config written for several machines is not run on one by
        mistake, and DeepSpeed across machines uses its `standard` launcher (torchrun on every machine, as `rlvr
        train` runs on every machine) rather than pdsh, which starts every machine's ranks from one over ssh."""
        from accelerate.utils import DistributedType

        machines = int(loaded.num_machines or 1)
        if machines > 1 and not self.several:
            raise NodeError(f"accelerate config {path} is for {machines} machines (num_machines: {machines}) but "
                              f"--num-machines is 1: run rlvr train on each machine with --num-machines {machines} "
                              "--machine-rank R --main-process-ip ADDR, or use a one-machine config")
        if (self.several and loaded.distributed_type == DistributedType.DEEPSPEED
                and (loaded.deepspeed_config or {}).get("deepspeed_multinode_launcher") != "standard"):
            raise NodeError(f"accelerate config {path}: DeepSpeed across machines needs deepspeed_multinode_launcher: "
                              "standard under deepspeed_config (rlvr train starts each machine's ranks with torchrun; "
                              "rlvr's zero2_multinode.yaml / zero3_multinode.yaml set it)")


def wait_for_main(nodes: Nodes, timeout: float = MAIN_WAIT_S, pause: float = 1.0) -> None:
    """On a machine of rank > 0: return once the main process's rendezvous port accepts a connection (machine 0's
    torchrun listens there from its start), or raise NodeError after `timeout` seconds. A bare connection, closed at
    once, leaves the rendezvous store as it was (checked by a two-machine run after it)."""
    if not nodes.several or nodes.machine_rank == 0:
        return
    where = f"{nodes.main_process_ip}:{nodes.main_process_port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((str(nodes.main_process_ip), nodes.main_process_port), timeout=5.0).close()
            return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise NodeError(
                    f"machine rank {nodes.machine_rank}: the main process {where} (machine rank 0) did not answer "
                    f"within {timeout:g} s ({err}). Start rlvr train with --machine-rank 0 on that machine, check "
                    "that --main-process-ip is its address as this machine reaches it (127.0.0.1 only when every "
                    "machine is this one) and that the port is open between the machines") from err
        time.sleep(pause)


# ---------------------------------------------------------------- every rank, once the process group is up

def plan_file(run_dir: str | Path, machine_rank: int, name: str) -> Path:
    """Where the launcher of machine `machine_rank` writes the resolved plan for its ranks: one file per machine
    in the run directory, so that machines neither overwrite each other's nor read another machine's plan."""
    stem, dot, suffix = name.rpartition(".")
    return Path(run_dir) / f"{stem}-machine{machine_rank}{dot}{suffix}"


def versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def server_answer(url: str, timeout: float = SERVER_WAIT_S, pause: float = 2.0) -> str:
    """"ok" once `url`/health answers 200 (polled for up to `timeout` s: the server may still be starting), else
    what the last try met."""
    import httpx

    deadline, problem = time.monotonic() + timeout, "not tried"
    while True:
        try:
            status = httpx.get(f"{url.rstrip('/')}/health", timeout=10.0).status_code
            if status == 200:
                return "ok"
            problem = f"HTTP {status}"
        except httpx.HTTPError as err:
            problem = f"{type(err).__name__}: {err}"[:160]
        if time.monotonic() >= deadline:
            return problem
        time.sleep(pause)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted keys with JSON-encoded leaves (so that 1 and 1.0, or "1" and 1, stay apart)."""
    if isinstance(value, dict) and value:
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: json.dumps(value, sort_keys=True, default=str)}


def rank_facts(plan: dict, *, num_machines: int, resume_from: str | None, plan_name: str,
               server_wait_s: float = SERVER_WAIT_S) -> dict:
    """What this rank must agree on with every other: under "agree", the resolved plan, package versions (and the
    environment package's), launch settings, the checkpoint it would resume and which machines' plan files it sees in
    the run directory (all of them when it is shared); under "where", who it is (not compared)."""
    env_package = plan.get("env") or ""
    package_versions = versions(PACKAGES + ((env_package,) if env_package else ()))
    run_dir = plan["run_dir"]
    seen = [k for k in range(num_machines) if plan_file(run_dir, k, plan_name).is_file()]
    server = plan.get("server")
    return {
        "agree": {"plan": plan, "versions": package_versions,
                  "environment": {name: os.environ.get(name) for name in AGREED_ENV},
                  "resume_from": resume_from, "plan_files_seen": seen},
        "server": server_answer(server, server_wait_s) if server else None,
        "where": {"rank": int(os.environ.get("RANK", 0)), "machine": int(os.environ.get("GROUP_RANK", 0)),
                  "host": socket.gethostname()},
    }


def describe(ranks: list[dict]) -> str:
    """"ranks 0-1 (machine 0, host a)" for a group of ranks' "where" records."""
    numbers = sorted(r["rank"] for r in ranks)
    spans, start = [], numbers[0]
    for previous, current in zip(numbers, [*numbers[1:], None], strict=True):
        if current != previous + 1:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
            start = current
    machines = sorted({(r["machine"], r["host"]) for r in ranks})
    on = ", ".join(f"machine {m}, host {h}" for m, h in machines)
    return f"rank{'s' if len(numbers) > 1 else ''} {','.join(spans)} ({on})"


def disagreements(facts: list[dict], limit: int = 8) -> list[str]:
    """One line per value that differs between ranks: the key, then each value with the ranks that hold it."""
    flat = [flatten(f["agree"]) for f in facts]
    keys = sorted(set().union(*flat))
    lines = []
    for key in keys:
        groups: dict[str, list[dict]] = {}
        for f, values in zip(facts, flat, strict=True):
            groups.setdefault(values.get(key, "(missing)"), []).append(f["where"])
        if len(groups) > 1:
            sides = "; ".join(f"{value} on {describe(ranks)}" for value, ranks in groups.items())
            lines.append(f"{key}: {sides}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines


def server_problem(facts: list[dict]) -> str | None:
    """Rank 0 generates every rollout: it must reach the server; the other ranks' view says where the fault lies."""
    main = next(f for f in facts if f["where"]["rank"] == 0)
    if main["server"] in (None, "ok"):
        return None
    url = main["agree"]["plan"].get("server")
    reached = [f["where"] for f in facts if f["server"] == "ok"]
    seen_from = (f"it answers from {describe(reached)} but rank 0 generates the rollouts: give a URL that machine "
                 "0 reaches" if reached else
                 "no rank reaches it: start it (`rlvr serve --model MODEL --host 0.0.0.0 --port PORT` on its host, "
                 "with --admin-token or $RLVR_ADMIN_TOKEN when not on loopback) and give its address as the "
                 "machines reach it")
    return f"the rollout server {url} does not answer /health from rank 0 ({main['server']}); {seen_from}"


def store_gather(facts: dict, timeout: float = GATHER_WAIT_S) -> list[dict]:
    """Every rank's `facts`, through the rendezvous store of the launch (torchrun's, at MASTER_ADDR:MASTER_PORT,
    where every rank already connects): no process group is opened, so the trainer later opens its own with the
    backend its accelerate config asks for (gloo, NCCL, DeepSpeed). Keys are per launch attempt; `timeout` bounds
    the wait for a rank that never arrives."""
    from torch.distributed import PrefixStore, TCPStore

    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                     timeout=timedelta(seconds=timeout), wait_for_workers=False)
    store = PrefixStore(f"rlvr-agree/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    store.set(str(facts["where"]["rank"]), json.dumps(facts))
    keys = [str(rank) for rank in range(int(os.environ["WORLD_SIZE"]))]
    store.wait(keys)
    return [json.loads(store.get(key)) for key in keys]


def agree(facts: dict, gather: Callable[[dict], list[dict]] = store_gather) -> list[dict]:
    """Gather this rank's `facts` from every rank (`store_gather`) and raise NodeError naming every difference, or
    a server rank 0 cannot reach; every rank raises the same error. Returns every rank's facts."""
    every = sorted(gather(facts), key=lambda f: f["where"]["rank"])
    lines = disagreements(every)
    if lines:
        raise NodeError("the ranks disagree on the run (run rlvr train with the same options, packages and shared "
                          "--run-dir on every machine):\n  " + "\n  ".join(lines))
    problem = server_problem(every)
    if problem:
        raise NodeError(problem)
    return every


def peer_lost(err: BaseException) -> bool:
    """Whether a failed collective (gloo, NCCL) means that another rank is gone."""
    import torch.distributed as dist

    text = str(err)
    return isinstance(err, getattr(dist, "DistNetworkError", ())) or any(p in text for p in PEER_LOST)


def lost_peers_message(err: BaseException, run_dir: str | Path, resume: str) -> str:
    """One line for a rank whose collective failed because another machine's ranks are gone."""
    from rlvr.trainer.checkpoint import newest_checkpoint

    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    newest = newest_checkpoint(Path(run_dir))
    kept = f"the newest checkpoint is {newest}" if newest else "no checkpoint was written yet"
    rank, machine = os.environ.get("RANK", "0"), os.environ.get("GROUP_RANK", "0")
    return (f"rank {rank} (machine {machine}): another rank is gone ({first}): a machine stopped or was killed, so "
            f"training stopped; {kept}. Continue on every machine with: {resume}")

