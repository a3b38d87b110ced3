"""Start `rlvr serve` as a subprocess for tests, benchmarks and scripts, and stop every process it spawned.

The server runs in its own process group (vLLM spawns an engine-core process beside the API server), so stopping
the group stops both. Every process of the group carries ``RLVR_SERVE_OWNER=<pid of the launcher>`` in its
environment, so a test session can check that nothing it started is still alive (`servers_started_by`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from rlvr.serve.protocol import ADMIN_TOKEN_ENV

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("rlvr.serve")
OWNER_ENV = "RLVR_SERVE_OWNER"
LOG_TAIL_LINES = 60
EXIT_WAIT_S = 2.0  # how long a server whose connection broke gets to be reaped
# vLLM's --dtype values (vllm/config/model.py ModelDType).
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


class ServeLaunchError(RuntimeError):
    """The server did not become healthy."""


@dataclass(frozen=True)
class Server:
    url: str  # root, e.g. http://127.0.0.1:8000
    model: str  # served model name (the name given to launch)
    port: int
    pid: int
    log_file: Path
    # The launched process, when this process started it: `exit_code` tells a dead server from a hung one.
    process: subprocess.Popen | None = field(default=None, compare=False, repr=False)

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """The server's exit status once it has exited (negative: killed by that signal), waiting up to `wait_s`
        seconds for it; None while it runs or when this process did not start it."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=wait_s) if wait_s > 0 else self.process.poll()
        except subprocess.TimeoutExpired:
            return None

    def death(self, wait_s: float = 0.0) -> str | None:
        """"died (exit code N)" once the server has exited (waited for up to `wait_s` seconds), with the engine's
        last error from its log when it logged one ("died (exit code 0; the engine's last error: RuntimeError:
        ...)": the API server exits cleanly once its engine has died, so the code alone says nothing); None while
        it runs or when this process did not start it."""
        code = self.exit_code(wait_s)
        if code is None:
            return None
        error = engine_error(self.log_file)
        cause = f"; the engine's last error: {error}" if error else ""
        return f"died ({describe_exit(code)}{cause})"

    def kill(self) -> None:
        """SIGKILL the server's process group (API server and engine core) and reap it: a hung server may not
        answer SIGTERM. Only for a server this process started."""
        if self.process is None:
            raise ValueError(f"the server at {self.url} was not started by this process")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # start_new_session=True: the server leads its own group
        self.process.wait(timeout=30)

    @property
    def base_url(self) -> str:
        """The OpenAI API base (what `vf-eval -b` and `AsyncOpenAI(base_url=...)` take)."""
        return f"{self.url}/v1"


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code}, killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


# vLLM 0.32 logs an engine's death as "EngineCore encountered a fatal error." (vllm/v1/engine/core.py) followed by
# the traceback; a worker's death as "Worker proc NAME died unexpectedly ..." (vllm/v1/executor/multiproc_executor.py).
ENGINE_FATAL = "EngineCore encountered a fatal error"
WORKER_DIED = re.compile(r"Worker proc \S+ died unexpectedly[^,]*")
# The last line of a traceback: "RuntimeError: message", "vllm.v1.engine.exceptions.EngineDeadError: ...".
EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?:: .*)?$")
ENGINE_ERROR_SCAN_BYTES = 256 * 1024
ENGINE_ERROR_MAX_CHARS = 300


def engine_error(log_file: Path) -> str | None:
    """The error the engine last died of, from the end of a server log: the exception that ends the traceback logged
    with vLLM's last "EngineCore encountered a fatal error" (the lines after it that carry the same log prefix),
    else its last "Worker proc ... died unexpectedly"; None when the log has neither (a server killed from outside)."""
    try:
        with open(log_file, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - ENGINE_ERROR_SCAN_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    fatal = [i for i, line in enumerate(lines) if ENGINE_FATAL in line]
    if fatal:
        prefix = lines[fatal[-1]].split(ENGINE_FATAL)[0]
        error = None
        for line in itertools.takewhile(lambda line: line.startswith(prefix), lines[fatal[-1] + 1:]):
            if match := EXCEPTION_LINE.match(line[len(prefix):].rstrip()):
                error = match.group(0)
        if error is not None:
            return error[:ENGINE_ERROR_MAX_CHARS]
    worker_deaths = [m.group(0) for line in lines if (m := WORKER_DIED.search(line))]
    return worker_deaths[-1] if worker_deaths else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_log_file(model: str, port: int) -> Path:
    from rlvr.models import rlvr_home

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model.strip("/"))[-80:]
    return rlvr_home() / "logs" / f"serve-{safe}-{port}.log"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.is_file():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _processes() -> Iterator[tuple[int, int, int, bytes]]:
    """(pid, parent pid, process group, environment) of every live process (Linux /proc; zombies skipped; the
    environment empty where it cannot be read: another user's or a non-dumpable process)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            environ = b""
        # /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may contain spaces, so split after the last ")".
        state, ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if state not in ("Z", "X"):
            yield int(entry.name), int(ppid), int(pgrp), environ


def group_processes(pgid: int) -> list[int]:
    return [pid for pid, _, pgrp, _ in _processes() if pgrp == pgid]


def descendants(root: int) -> dict[int, list[bytes]]:
    """pid -> environment (NAME=value entries) of every live descendant of process `root`: its children, theirs, ..."""
    table = {pid: (ppid, environ) for pid, ppid, _, environ in _processes()}
    found: dict[int, list[bytes]] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier and pid not in found}
        found.update({pid: table[pid][1].split(b"\0") for pid in frontier})
    return found


def servers_started_by(owner_pid: int) -> list[int]:
    """Pids of live server processes (API server and engine core) started by `launch` in process `owner_pid`."""
    marker = f"{OWNER_ENV}={owner_pid}".encode()
    return [pid for pid, _, _, environ in _processes() if marker in environ.split(b"\0")]


def _stop_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the server's process group (vLLM shuts its engine down), SIGKILL whatever outlives `grace`."""
    pgid = proc.pid  # start_new_session=True: the server leads its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        if not group_processes(pgid):
            break
        time.sleep(0.2)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def _wait_healthy(proc: subprocess.Popen, url: str, timeout: float, log_file: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServeLaunchError(
                f"rlvr serve exited with code {proc.returncode} before becoming healthy; log {log_file}:\n"
                f"{log_tail(log_file)}"
            )
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise ServeLaunchError(
        f"rlvr serve did not answer {url}/health within {timeout:.0f} s (raise timeout= on a busy machine); "
        f"log {log_file}:\n{log_tail(log_file)}"
    )


@contextmanager
def serve_process(
    command: Sequence[str],
    *,
    model: str,
    port: int,
    url: str,
    log_file: Path,
    env: dict[str, str],
    timeout: float,
    stop_grace: float,
) -> Iterator[Server]:
    """Run an OpenAI-compatible server command in its own process group until the block exits."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        log.write(f"\n==> {' '.join(command)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(command), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        _wait_healthy(proc, url, timeout, log_file)
        yield Server(url=url, model=model, port=port, pid=proc.pid, log_file=log_file, process=proc)
    finally:
        _stop_group(proc, stop_grace)


def server_problem(url: str, started: Server | None = None, health_timeout: float = 10.0) -> str | None:
    """What is wrong with the server at `url` ("died (...)", "does not answer /health ...", "answers /health with
    HTTP N"), None when it is healthy. `started`: the server, when this process launched it (its exit is checked)."""
    died = started and started.death()
    if died:
        return died
    try:
        status = httpx.get(f"{url}/health", timeout=health_timeout).status_code
    except httpx.HTTPError as err:
        # A server killed mid-request has closed its sockets a moment before it can be reaped: a refused or reset
        # connection may come first, so its exit is waited for briefly before calling it silent.
        return (started and started.death(EXIT_WAIT_S)) or (
            f"does not answer {url}/health within {health_timeout:.0f} s ({type(err).__name__})")
    return None if status == 200 else f"answers {url}/health with HTTP {status}"


def relaunch(server: Server, problem: str, start: Callable[[], Server], restart: int, max_restarts: int) -> Server:
    """Restart number `restart` of `max_restarts` of `server` after `problem`, logged with its log file: a hung server
    (still running: it holds the port and its memory) is killed first; `start()` launches the new one (raising
    ServeLaunchError when it does not come up)."""
    logger.warning(f"the rollout server {server.url} {problem}: restarting it (restart {restart} of {max_restarts}; "
                   f"its log: {server.log_file})")
    if server.exit_code() is None:
        server.kill()
    return start()


class KeptServer:
    """A server `launch`ed by this process that can be restarted on its port (`keep_serving`): `url`, `base_url`,
    `model` and `port` are the current server's, and stay the same across restarts.

    `restart(problem)`: at most `max_restarts` times in all, each logged with the problem and the log file; False
    when they are spent or the new server did not come up (then the caller stops, naming `problem`).
    """

    def __init__(self, start: Callable[[int | None], Server], max_restarts: int = 2):
        self._start = start
        self.max_restarts = max_restarts
        self.restarts = 0
        self.server = start(None)

    url = property(lambda self: self.server.url)
    base_url = property(lambda self: self.server.base_url)
    model = property(lambda self: self.server.model)
    port = property(lambda self: self.server.port)
    log_file = property(lambda self: self.server.log_file)

    def problem(self, health_timeout: float = 10.0) -> str | None:
        return server_problem(self.url, self.server, health_timeout)

    def restart(self, problem: str) -> bool:
        if self.restarts >= self.max_restarts:
            return False
        self.restarts += 1
        try:
            self.server = relaunch(self.server, problem, lambda: self._start(self.server.port), self.restarts,
                                   self.max_restarts)
        except ServeLaunchError as err:
            logger.error(f"the rollout server did not come back: {str(err).splitlines()[0]}")
            self.restarts = self.max_restarts
            return False
        logger.warning(f"the rollout server is back at {self.url}")
        return True


@contextmanager
def keep_serving(model: str, *, max_restarts: int = 2, **launch_args) -> Iterator[KeptServer]:
    """`launch(model, **launch_args)` as a `KeptServer`: each restart runs with the same arguments on the same port;
    whichever server runs when the block exits is stopped."""
    with contextlib.ExitStack() as stack:
        yield KeptServer(lambda port: stack.enter_context(launch(model, port=port, **launch_args)), max_restarts)


def dtype_args(dtype: str | torch.dtype | None, extra_args: Sequence[str]) -> list[str]:
    """``["--dtype", NAME]`` for `launch(dtype=...)`: a vLLM dtype name or a torch dtype (``torch.float32``)."""
    if dtype is None:
        return []
    name = str(dtype).removeprefix("torch.")
    if name not in VLLM_DTYPES:
        raise ValueError(
            f"launch(dtype={dtype!r}): vLLM serves weights as one of {', '.join(VLLM_DTYPES)} "
            "(or a torch dtype among float32, bfloat16, float16)"
        )
    if any(arg == "--dtype" or arg.startswith("--dtype=") for arg in extra_args):
        raise ValueError(f"launch(dtype={dtype!r}) and --dtype in extra_args: give the dtype once")
    return ["--dtype", name]


def launcher_env(admin_token: str | None = None) -> dict[str, str]:
    """This process's environment, marked with the owner pid; the admin token travels here, not in argv."""
    env = {**os.environ, OWNER_ENV: str(os.getpid())}
    env.pop(ADMIN_TOKEN_ENV, None)
    if admin_token is not None:
        env[ADMIN_TOKEN_ENV] = admin_token
    return env


@contextmanager
def launch(
    model: str,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = 300,
    *,
    host: str = "127.0.0.1",
    admin_token: str | None = None,
    log_file: Path | None = None,
    stop_grace: float = 30,
    dtype: str | torch.dtype | None = None,
) -> Iterator[Server]:
    """Run `rlvr serve --model MODEL` until the block exits; yields a `Server` once `/health` answers 200.

    `extra_args` go to `rlvr serve` (and on to vLLM). The admin token travels in the environment, never on the
    command line, so it shows in neither `ps` nor the log.

    `dtype`: the dtype the server holds the weights in (vLLM ``--dtype``): a name (``"float32"``) or a torch
    dtype. None leaves it to vLLM, which on CPU serves a float32 checkpoint in bfloat16; a trainer passes its
    training dtype so that the sampler's logprobs are the trainer's (no bf16/fp32 mismatch in the PPO ratio)
    and weight sync converts nothing.
    """
    dtype_flags = dtype_args(dtype, extra_args)
    port = port or free_port()
    command = [
        sys.executable,
        "-m",
        "rlvr.serve",
        "--model",
        model,
        "--host",
        host,
        "--port",
        str(port),
        *dtype_flags,
        *extra_args,
    ]
    connect_host = (
        "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    )  # a wildcard bind answers on loopback
    with serve_process(
        command,
        model=model,
        port=port,
        url=f"http://{connect_host}:{port}",
        log_file=Path(log_file) if log_file else default_log_file(model, port),
        env=launcher_env(admin_token),
        timeout=timeout,
        stop_grace=stop_grace,
    ) as server:
        yield server
