"""Run untrusted Python in a separate, isolated, resource-limited process (one process per call).

The isolation itself happens in `_launch.py` (a stdlib-only script run as its own process); this module
prepares the working directory, starts the launcher, bounds the output and turns what came back into a
`SandboxResult`. See `_launch.py` for the layers (network namespace, PID namespace, private uid, rlimits).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = Path(__file__).with_name("_launch.py")
PROGRAM_NAME = "main.py"
# Private uids for sandboxed programs: far above ordinary and container-mapped ranges, one per call.
UID_BASE = 1_000_000_000
UID_SPAN = 1 << 20
_uid_counter = itertools.count()
# How long past its own timeout the launcher may take (start-up, killing a namespace) before the caller
# kills it; killing the launcher kills the namespace through PR_SET_PDEATHSIG.
LAUNCHER_GRACE_SECONDS = 10.0


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): bad configuration, launcher crash."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one call. Defaults fit GSM8K-style arithmetic scripts."""

    timeout: float = 5.0  # wall clock, seconds
    cpu_seconds: int | None = None  # None: ceil(timeout) + 1, so the wall clock normally fires first
    memory_mb: int = 512  # address space (RLIMIT_AS)
    file_size_mb: int = 16  # largest file the program may write, including its stdout/stderr
    max_processes: int = 32  # RLIMIT_NPROC for the private uid (threads count too)
    max_output_chars: int = 4096  # per stream, kept from the start
    namespaces: bool = True  # network + PID namespaces when the kernel allows; False forces the fallbacks
    python: str | None = None  # None: find_python() picks one the program's uid can run

    def __post_init__(self) -> None:
        positive = {
            "timeout": self.timeout,
            "memory_mb": self.memory_mb,
            "file_size_mb": self.file_size_mb,
            "max_processes": self.max_processes,
            "max_output_chars": self.max_output_chars,
        }
        if self.cpu_seconds is not None:
            positive["cpu_seconds"] = self.cpu_seconds
        for name, value in positive.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive number, got {value!r}")
        if self.python is not None and not os.access(self.python, os.X_OK):
            raise ValueError(
                f"SandboxConfig.python={self.python!r} is not an executable file: pass a Python interpreter path"
            )

    @property
    def effective_cpu_seconds(self) -> int:
        return self.cpu_seconds if self.cpu_seconds is not None else math.ceil(self.timeout) + 1


@dataclass(frozen=True)
class Isolation:
    """What was really active for a call (see _launch.py): reported, never assumed."""

    network: str  # "namespace" | "blocked-sockets"
    containment: str  # "pid-namespace" | "uid-kill" | "process-group"
    uid: int | None  # the private uid the program ran as; None = the caller's own uid


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    elapsed: float  # seconds, program start to end, measured by the launcher
    isolation: Isolation

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _private_uid() -> int | None:
    """A uid of our own per call when we are root; otherwise we cannot switch and keep ours."""
    if os.geteuid() != 0:
        return None
    return UID_BASE + (os.getpid() * 7919 + next(_uid_counter)) % UID_SPAN


def _usable_by_others(path: str) -> bool:
    """Whether an unprivileged uid can execute `path`: o+x on the file and on every directory above it
    (a venv interpreter often links into /root, which other uids cannot enter)."""
    real = Path(os.path.realpath(path))
    return all(p.exists() and p.stat().st_mode & stat.S_IXOTH for p in [real, *real.parents])


def find_python(unprivileged: bool) -> str:
    """The interpreter for sandboxed programs: ours when the program's uid can run it, else the system's."""
    if not unprivileged:
        return sys.executable
    candidates = [sys.executable, shutil.which("python3", path=os.defpath)]
    for candidate in candidates:
        if candidate and _usable_by_others(candidate):
            return candidate
    raise SandboxError(
        f"no Python interpreter that an unprivileged uid can execute (tried {candidates}): "
        "install a system python3 or pass SandboxConfig(python=...) with a world-executable interpreter"
    )


def _read_bounded(stream, max_chars: int) -> tuple[str, bool]:
    """First `max_chars` characters of a captured stream and whether anything was cut."""
    stream.seek(0)
    # UTF-8 uses at most 4 bytes a character; one more byte tells us whether there was more.
    raw = stream.read(4 * max_chars + 1)
    text = raw.decode("utf-8", errors="replace")
    truncated = len(text) > max_chars or len(raw) > 4 * max_chars
    return text[:max_chars], truncated


def _read_status(fd: int) -> dict:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    status: dict = {}
    for line in b"".join(chunks).decode().splitlines():
        status.update(json.loads(line))
    return status


def run_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandboxed process and return what it printed.

    Blocking; use `arun_python` from async code. Raises SandboxError only when the sandbox itself fails;
    errors of the program (exceptions, limits, timeout) are in the result.
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python(code=...) takes the program text as str, got {type(code).__name__}")
    config = config or SandboxConfig()
    uid = _private_uid()
    workdir = Path(tempfile.mkdtemp(prefix="rlvr-sandbox-"))
    status_r, status_w = os.pipe()
    try:
        (workdir / PROGRAM_NAME).write_text(code, encoding="utf-8")
        if uid is not None:
            os.chown(workdir, uid, uid)  # the program's only writable directory
        launch_config = {
            "status_fd": status_w,
            "workdir": str(workdir),
            "program": PROGRAM_NAME,
            "python": config.python or find_python(unprivileged=uid is not None),
            "uid": uid,
            "timeout": config.timeout,
            "cpu_seconds": config.effective_cpu_seconds,
            "memory_mb": config.memory_mb,
            "file_size_mb": config.file_size_mb,
            "max_processes": config.max_processes,
            "namespaces": config.namespaces,
        }
        # Output goes to unlinked temp files rather than pipes: RLIMIT_FSIZE bounds how much the program can
        # write, and we never buffer more than we keep.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            launcher = subprocess.Popen(
                [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(launch_config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env={},  # secrets in our environment never reach the program
                pass_fds=(status_w,),
                cwd=workdir,
            )
            os.close(status_w)
            status_w = -1
            try:
                launcher.wait(timeout=config.timeout + LAUNCHER_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
                raise SandboxError(
                    f"sandbox launcher did not finish within {config.timeout}s + {LAUNCHER_GRACE_SECONDS}s grace"
                ) from None
            status = _read_status(status_r)
            stdout, stdout_cut = _read_bounded(out, config.max_output_chars)
            stderr, stderr_cut = _read_bounded(err, config.max_output_chars)
        if "setup_error" in status or launcher.returncode != 0 or "timed_out" not in status:
            raise SandboxError(
                f"sandbox launcher failed (exit {launcher.returncode}): "
                f"{status.get('setup_error') or stderr or 'no status reported'}"
            )
        return SandboxResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=status["exit_code"],
            signal=status["signal"],
            timed_out=status["timed_out"],
            stdout_truncated=stdout_cut,
            stderr_truncated=stderr_cut,
            elapsed=status["elapsed"],
            isolation=Isolation(
                network=status["network"], containment=status["containment"], uid=status["uid"]
            ),
        )
    finally:
        os.close(status_r)
        if status_w != -1:
            os.close(status_w)
        shutil.rmtree(workdir, ignore_errors=True)


async def arun_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """`run_python` off the event loop: rollouts keep running while a program executes."""
    return await asyncio.to_thread(run_python, code, config)
