"""Two ranks meeting at a real rendezvous store (tests/multinode/test_options.py). In a module of their own: each
rank is a spawned process that imports the module holding its target, and this one imports rlvr.trainer.nodes alone
(the test module's imports, the CLI and the trainer, cost each rank ~10 s of CPU more)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

from rlvr.trainer.nodes import NodeError, agree, rank_facts


def rank_main(rank: int, store_port: int, plan: dict, out: str) -> None:
    """One rank as torchrun would start it: its environment, then the agreement through the store."""
    os.environ.update(RANK=str(rank), GROUP_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(store_port))
    try:
        result = {"every": agree(rank_facts(plan, num_machines=2, resume_from=None, plan_name="launch_plan.json",
                                            server_wait_s=0))}
    except NodeError as err:
        result = {"error": str(err)}
    Path(out).write_text(json.dumps(result))


def run_two_ranks(tmp_path: Path, plans: list[dict]) -> list[dict]:
    """Two processes meet at a real TCPStore (what torchrun hosts on the main process's port) and compare facts."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60), wait_for_workers=False)
    context = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"rank{rank}.json" for rank in range(2)]
    processes = [context.Process(target=rank_main, args=(rank, store.port, plans[rank], str(outs[rank])))
                 for rank in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    return [json.loads(out.read_text()) for out in outs]
