"""MT-GRPO on the choice environment with tiny-random for the fault-injection tests: run in a subprocess (or under
`accelerate launch` with two processes) so that a test can signal it or kill its server. Without --server,
run_training starts the server itself (in the main process)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))

from choice_env import load_environment  # noqa: E402
from train_script import config  # noqa: E402

import rlvr.trainer.run as run_module  # noqa: E402
from rlvr.serve.launch import servers_started_by  # noqa: E402
from rlvr.trainer import run_training  # noqa: E402


def killing_the_server_in_sync(recipe: type, step: int) -> type:
    """`recipe` whose weight push at `step` meets a dying server: a thread SIGKILLs the server's process group (API
    server and engine core, as the OOM killer would) as the push starts. Once per run; the push's failure is
    reported on stderr for the test to check that the kill hit the sync."""

    class KillsTheServerInSync(recipe):
        killed = False

        def push_weights(self, model) -> None:
            if self.state.global_step != step or KillsTheServerInSync.killed:
                return super().push_weights(model)
            KillsTheServerInSync.killed = True
            server = servers_started_by(os.getpid())[0]
            killer = threading.Thread(target=os.killpg, args=(os.getpgid(server), signal.SIGKILL))
            killer.start()
            try:
                super().push_weights(model)
            except Exception as err:
                sys.stderr.write(f"fault_script: the weight sync at step {step} failed ({type(err).__name__})\n")
                raise
            finally:
                killer.join()

    return KillsTheServerInSync


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--save-steps", type=int, default=1000)
    parser.add_argument("--report-to", default="none")
    parser.add_argument("--kill-server-in-sync-at-step", type=int)
    args = parser.parse_args()
    if args.kill_server_in_sync_at_step is not None:
        recipe_for = run_module.trainer_class
        run_module.trainer_class = lambda cfg: killing_the_server_in_sync(recipe_for(cfg),
                                                                          args.kill_server_in_sync_at_step)
    cfg = config(args.run_dir, args.steps, args.save_steps, micro_batch_size=4, report_to=args.report_to)
    try:
        run_training(load_environment(), "tiny-random", cfg, server_url=args.server)
    except SystemExit as stop:  # Preempted; under accelerate launch torchrun reports only the first rank's status
        sys.stderr.write(f"fault_script: rank {os.environ.get('RANK', '0')} exits with status {stop.code}\n")
        raise


if __name__ == "__main__":
    main()
