"""Faults a long run survives or names (docs/architecture.md, "Faults and what a run does"):

- `ServerWatch`: when generation or a weight sync fails, tells whether the rollout server died (exit code, when
  this run started it) or does not answer `/health`. A server this run started is restarted (bounded, logged), the
  user's `--server` waited for (bounded back-off, logged; `$RLVR_SERVER_WAIT_MAX_PAUSE_S` caps the pause between
  health checks, unset by default: 5, 10, 20, ... s; the test suite sets 1 s, so that a restarted server is found
  within a second rather than up to 40 s after it answers); the trainer then pushes the current weights and
  generates the batch again. When that fails, training stops with one line naming the server and what happened,
  the tail of its log and the command that continues the run (`ServerDown`).
- `Preemption`: SIGTERM / SIGINT ask training to stop at the next step boundary (every process agrees on the step),
  write a checkpoint there and exit with 128 + the signal number (`Preempted`), printing the resume command.
- `wandb_in_run_dir`: wandb writes its files under the run directory, not the current directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from rlvr.trainer.rollout_client import ServerError, start_command

if TYPE_CHECKING:
    from rlvr.serve.launch import Server

logger = logging.getLogger(__name__)
SERVER_LOG_LINES = 20
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
MAX_PAUSE_ENV = "RLVR_SERVER_WAIT_MAX_PAUSE_S"


def resume_command(run_dir: str | Path, argv: Sequence[str] | None = None) -> str:
    """The command that continues this run from its newest checkpoint: the `rlvr train` command line with
    `--run-dir` and `--resume` added where missing; `rlvr study` and `rlvr pipeline` command lines as they are
    (they resume an interrupted cell from its checkpoint themselves); any other program gets the Python call."""
    argv = list(sys.argv if argv is None else argv)
    program = Path(argv[0]).name if argv else ""
    from_cli = program == "rlvr" or (program == "__main__.py" and Path(argv[0]).parent.name == "cli")
    if from_cli and argv[1:2] in (["study"], ["pipeline"]):
        return shlex.join(["rlvr", *argv[1:]]) + f" (it resumes {run_dir} from its newest checkpoint)"
    if from_cli and argv[1:2] == ["train"] and len(argv) > 2:  # an accelerate worker gets `train` alone
        args = argv[1:]
        if not {"--run-dir", "-o"} & set(args) and not any(a.startswith("--run-dir=") for a in args):
            args += ["--run-dir", str(run_dir)]
        if "--resume" not in args:
            args.append("--resume")
        return shlex.join(["rlvr", *args])
    return (f"the same command with --resume and --run-dir {run_dir} (Python: run_training(..., "
            f"run_dir={str(run_dir)!r}, resume=True))")


class ServerDown(ServerError):
    """The rollout server died or stopped answering; the message names it and says how to continue."""


class ServerWatch:
    """The rollout server as the trainer's supervisor sees it (main process only).

    url: the server's root URL. resume: the command that continues the run. model: the model it serves.
    started: the `rlvr.serve.launch.Server` this run started (its process and log), None for the user's `--server`.
    restart: starts a new server for the run (with the run's model, dtype and arguments) and returns it; at most
    `max_restarts` times per run. The user's server is waited for instead: health checks with a doubling pause
    from `first_wait_s`, at most `max_pause_s` (default $RLVR_SERVER_WAIT_MAX_PAUSE_S, else no cap), at most
    `wait_s` seconds in all.
    """

    def __init__(self, url: str, resume: str, model: str, started: Server | None = None, *,
                 restart: Callable[[], Server] | None = None, max_restarts: int = 2, wait_s: float = 300.0,
                 first_wait_s: float = 5.0, health_timeout: float = 10.0, max_pause_s: float | None = None):
        self.url, self.resume, self.model, self.started = url, resume, model, started
        self.restart, self.max_restarts, self.restarts = restart, max_restarts, 0
        self.wait_s, self.first_wait_s, self.health_timeout = wait_s, first_wait_s, health_timeout
        self.max_pause_s = max_pause_s if max_pause_s is not None else max_pause_from_env()

    def diagnosis(self) -> str | None:
        """What is wrong with the server ("died (exit code N; the engine's last error: ...)", "does not answer
        /health ..."), None if healthy."""
        from rlvr.serve.launch import server_problem

        return server_problem(self.url, self.started, self.health_timeout)

    def message(self, problem: str) -> str:
        if self.started is not None:
            from rlvr.serve.launch import log_tail

            head = (f"the rollout server {self.url} that this run started {problem}; training stopped. Continue "
                    f"from the newest checkpoint with: {self.resume}")
            tail = log_tail(self.started.log_file, SERVER_LOG_LINES)
            return f"{head}\n  last {SERVER_LOG_LINES} lines of its log {self.started.log_file}:\n{tail}"
        port = self.url.rsplit(":", 1)[-1]
        return (f"the rollout server {self.url} (--server) {problem}; training stopped. Restart it "
                f"({start_command(self.model, port)}), then continue from the newest checkpoint with: {self.resume}")

    def check(self, cause: BaseException | None = None) -> None:
        """Raise `ServerDown` (from `cause`) when the server is dead or silent; return when it is healthy, so that
        the caller re-raises a failure that was not the server's."""
        problem = self.diagnosis()
        if problem is not None:
            raise ServerDown(self.message(problem)) from cause

    def recover(self, cause: BaseException) -> str | None:
        """After a failed generation or weight sync: None when the server is healthy (the failure is not its own);
        else the URL of a server that answers again (restarted, or the user's, waited for), or `ServerDown`."""
        problem = self.diagnosis()
        if problem is None:
            return None
        if self.started is not None:
            return self.restarted(problem, cause)
        return self.waited_for(problem, cause)

    def restarted(self, problem: str, cause: BaseException) -> str:
        from rlvr.serve.launch import ServeLaunchError, relaunch

        while self.restart is not None and self.restarts < self.max_restarts:
            self.restarts += 1
            try:
                self.started = relaunch(self.started, problem, self.restart, self.restarts, self.max_restarts)
            except ServeLaunchError as err:
                problem = f"did not come back ({str(err).splitlines()[0]})"
                continue
            self.url = self.started.url
            logger.warning(f"the rollout server is back at {self.url}: the current weights are pushed and the batch "
                           "generated again")
            return self.url
        if self.restarts:
            problem = f"{problem}, after {self.restarts} restart(s)"
        raise ServerDown(self.message(problem)) from cause

    def waited_for(self, problem: str, cause: BaseException) -> str:
        waited, pause = 0.0, self.first_wait_s
        while waited < self.wait_s:
            pause = min(pause, self.max_pause_s, self.wait_s - waited)
            logger.warning(f"the rollout server {self.url} (--server) {problem}: waiting {pause:g} s for it "
                           f"({waited:g} of {self.wait_s:g} s waited)")
            time.sleep(pause)
            waited += pause
            pause *= 2
            if self.diagnosis() is None:
                logger.warning(f"the rollout server {self.url} answers again: the current weights are pushed and the "
                               "batch generated again")
                return self.url
        raise ServerDown(self.message(f"{problem} (waited {waited:g} s)")) from cause


def max_pause_from_env() -> float:
    """$RLVR_SERVER_WAIT_MAX_PAUSE_S as seconds (> 0); unset: no cap."""
    value = os.environ.get(MAX_PAUSE_ENV, "").strip()
    if not value:
        return float("inf")
    try:
        pause = float(value)
    except ValueError:
        pause = 0.0
    if not pause > 0:
        raise ValueError(f"${MAX_PAUSE_ENV}={value!r}: the longest pause between health checks of a --server that "
                         f"is waited for must be a number of seconds > 0; unset it for no cap")
    return pause


class LauncherServer:
    """The server `rlvr train --num-processes` starts in the launcher, outside the ranks. To them it is a `--server`,
    waited for when it stops answering; so the launcher, which owns it, restarts it on its port when it dies (at most
    `max_restarts` times per run, each logged with its log file). The main rank, waiting, finds it back, pushes the
    weights and generates the batch again (`ServerWatch.waited_for`).

    start(port): a new server (None: any free port), kept running until the launcher exits.
    """

    def __init__(self, start: Callable[[int | None], Server], max_restarts: int = 2):
        self.start, self.max_restarts, self.restarts = start, max_restarts, 0
        self.server = start(None)

    def check(self) -> None:
        """Restart the server if it has died and restarts are left; call it while the ranks run."""
        death = self.server.death()
        if death is None or self.restarts >= self.max_restarts:
            return
        self.restarts += 1
        logger.warning(f"the rollout server {self.server.url} {death}: restarting it (restart "
                       f"{self.restarts} of {self.max_restarts}; its log: {self.server.log_file})")
        try:
            self.server = self.start(self.server.port)
        except Exception as err:  # the ranks' wait for it runs out and names it (ServerDown)
            self.restarts = self.max_restarts
            logger.error(f"the rollout server did not come back: {err}")
            return
        logger.warning(f"the rollout server is back at {self.server.url}")


def tell(message: str) -> None:
    """A notice on stderr that never stops the stop: when a session ends, its terminal or pipe closes as the
    SIGTERM arrives, and a BrokenPipeError raised inside the handler would abort the step without a checkpoint."""
    try:
        sys.stderr.write(message)
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (EPIPE) or a closed file object
        pass


class Preempted(SystemExit):
    """Training stopped on a signal after writing a checkpoint; the exit status is 128 + the signal number (143 for
    SIGTERM, 130 for SIGINT), as a shell reports a process killed by it."""


class Preemption(TrainerCallback):
    """Stop at a step boundary on SIGTERM / SIGINT, with a checkpoint (transformers saves it when a callback sets
    `control.should_save`, then leaves the loop on `should_training_stop`).

    The handler only records the signal: the step in progress (its generation, its gradient step, a checkpoint
    being written) finishes. At each step end the processes agree on it (a max over ranks: a signal seen by any
    process stops all of them at the same step); a stop waits for the end of the batch's `num_iterations` passes,
    since a checkpoint between them cannot be resumed. A second signal stops the process at once.
    """

    def __init__(self, accelerator, num_iterations: int):
        self.accelerator = accelerator
        self.num_iterations = num_iterations
        self.received: int | None = None  # the signal this process received
        self.stop_signal: int | None = None  # the signal all processes agreed on, once training stops for it
        self.stopped_at: int | None = None

    def handle(self, signum: int, _frame) -> None:
        if self.received is not None:  # the second one: stop now, as without rlvr
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received = signum
        tell(f"\nrlvr: {signal.Signals(signum).name} received: stopping after this step with a checkpoint (send it "
             "again to stop at once)\n")

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """Route SIGTERM and SIGINT to `handle` while the block runs, then restore them. Python takes signal
        handlers in the main thread only: elsewhere (a run trained from a worker thread) signals keep their effect."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self.handle) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def agreed_signal(self) -> int:
        """The largest signal number any process received (0: none); every process must call it at every step."""
        import torch

        flag = torch.tensor([self.received or 0], device=self.accelerator.device)
        if self.accelerator.num_processes > 1:
            flag = self.accelerator.gather(flag)
        return int(flag.max())

    def on_step_end(self, args, state, control, **kwargs):
        signum = self.agreed_signal()
        if signum and state.global_step % self.num_iterations == 0 and state.global_step < state.max_steps:
            control.should_save = True
            control.should_training_stop = True
            self.stop_signal, self.stopped_at = signum, state.global_step
        return control

    def preempted(self, resume: str) -> Preempted:
        name = signal.Signals(self.stop_signal).name
        tell(f"rlvr: stopped on {name} at step {self.stopped_at}, checkpoint-{self.stopped_at} written. Continue "
             f"with: {resume}\n")
        return Preempted(128 + self.stop_signal)


def train_preemptibly(trainer, run_dir: Path, checkpoint: str | None, num_iterations: int):
    """`trainer.train()` (resuming `checkpoint`) with SIGTERM / SIGINT stopping it at a step boundary with a
    checkpoint, and wandb under the run directory. Returns (train()'s output, the `Preemption`): the caller raises
    `preemption.preempted(...)` when `stopped_at` is set, after its own clean-up."""
    preemption = Preemption(trainer.accelerator, num_iterations)
    trainer.add_callback(preemption)
    with wandb_in_run_dir(run_dir), preemption.signals():
        output = trainer.train(resume_from_checkpoint=checkpoint)
    return output, preemption


@contextlib.contextmanager
def wandb_in_run_dir(run_dir: Path) -> Iterator[None]:
    """wandb (offline or online) writes its `wandb/` folder under the run directory: transformers' WandbCallback
    calls `wandb.init()` without a `dir`, so wandb reads WANDB_DIR when training begins. Set for the block only;
    a WANDB_DIR the user set is kept."""
    if "WANDB_DIR" in os.environ:
        yield
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    os.environ["WANDB_DIR"] = str(run_dir.resolve())
    try:
        yield
    finally:
        os.environ.pop("WANDB_DIR", None)
