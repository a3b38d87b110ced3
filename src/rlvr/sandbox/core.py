"""Run untrusted Python in an isolated, resource-limited process: the client of the sandbox server.

The first call in a process starts a sandbox server (`_server.py`, a pre-forked Python on the interpreter
the programs use) and keeps it for later calls; each call hands the server a socket and two memory files
for stdout/stderr, sends the program, and reads one JSON line back. The server forks a fresh process tree
per call, isolated by `_jail.py` (namespaces, a private filesystem, seccomp) and limited by rlimits; see
docs/sandbox.md for the layers and what each guarantees. A server that died is started again on the next
call (and a call it dropped is sent again: nothing a program does survives it, so re-running is safe); calls it
had already handed to their own process finish on their own. A hung server (one that does not take the calls it is
handed) is killed when a call times out without having been read, and replaced on the next call. Restarts are
logged and bounded (`RESTARTS`, rlvr.restarts); when they are spent, calls raise SandboxError.
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import itertools
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
from dataclasses import dataclass
from pathlib import Path

from rlvr.restarts import RestartBudget, RestartsSpent

SERVER = Path(__file__).with_name("_server.py")
# Private uids for sandboxed programs: far above ordinary and container-mapped ranges, one per call.
UID_BASE = 1_000_000_000
UID_SPAN = 1 << 20
_uid_counter = itertools.count()
SERVER_START_SECONDS = 60.0  # start-up imports and the filesystem view; minutes only on a crushed machine
# How long past its own timeout a call may take (namespace teardown on a loaded machine) before the caller
# gives up on it; hanging up makes the supervisor kill the call's namespace at once.
GRACE_SECONDS = 10.0
SERVER_EXIT_SECONDS = 2.0  # how long an unanswered call waits to see whether the server died
MAX_ATTEMPTS = 2  # a call the server dropped because it died is sent once more, to a new server
# Restarts of this process's sandbox servers (all interpreters), each logged: a start costs well under a second and
# calls in flight survive it, so only a server killed again and again (5 times in a minute) is given up on.
RESTARTS = RestartBudget("rlvr.sandbox: the sandbox server", limit=5, window_s=60.0)


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): bad configuration, a server that cannot start."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one call. Defaults fit GSM8K-style arithmetic scripts."""

    timeout: float = 5.0  # wall clock, seconds
    cpu_seconds: int | None = None  # None: ceil(timeout) + 1, so the wall clock normally fires first
    memory_mb: int = 512  # address space per process (RLIMIT_AS)
    file_size_mb: int = 16  # largest file the program may write, including its stdout/stderr
    max_processes: int = 32  # RLIMIT_NPROC for the private uid (threads count too)
    max_output_chars: int = 4096  # per stream, kept from the start
    disk_mb: int = 64  # all of /sandbox, /tmp and /dev/shm together (one tmpfs; RAM, freed after the call)
    packages: tuple[str, ...] = ()  # site-packages of the interpreter the program may import, by name
    namespaces: bool = (
        True  # namespaces + private filesystem when the kernel allows; False forces the fallback
    )
    seccomp: bool = (
        True  # deny ptrace, mount, bpf, keyctl, namespaces, ... (when python3-seccomp is installed)
    )
    python: str | None = None  # None: the system's python3 (default_python())

    def __post_init__(self) -> None:
        positive = {
            "timeout": self.timeout,
            "memory_mb": self.memory_mb,
            "file_size_mb": self.file_size_mb,
            "max_processes": self.max_processes,
            "max_output_chars": self.max_output_chars,
            "disk_mb": self.disk_mb,
        }
        if self.cpu_seconds is not None:
            positive["cpu_seconds"] = self.cpu_seconds
        for name, value in positive.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive number, got {value!r}")
        for name in ("disk_mb", "memory_mb", "file_size_mb", "max_processes", "max_output_chars"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"SandboxConfig.{name} must be a whole number, got {getattr(self, name)!r}")
        if isinstance(self.packages, str) or not all(
            isinstance(p, str) and p.isidentifier() for p in self.packages
        ):
            raise ValueError(
                f"SandboxConfig.packages must be a tuple of top-level package names, got {self.packages!r}"
            )
        if self.python is not None and not os.access(self.python, os.X_OK):
            raise ValueError(
                f"SandboxConfig.python={self.python!r} is not an executable file: pass a Python interpreter path"
            )

    @property
    def effective_cpu_seconds(self) -> int:
        return self.cpu_seconds if self.cpu_seconds is not None else math.ceil(self.timeout) + 1


@dataclass(frozen=True)
class Isolation:
    """What was really active for a call (reported by the server, never assumed)."""

    network: (
        str  # "namespace" (no interface at all) | "blocked-sockets" (socket.socket replaced; best effort)
    )
    containment: str  # "pid-namespace" | "uid-kill" | "process-group"
    uid: int | None  # the private uid the program ran as; None = the caller's own uid
    filesystem: str  # "private" (own root, nothing of the host but the interpreter) | "host-swept" | "host"
    ipc: str  # "namespace" | "swept" (the uid's SysV objects removed after the call) | "host"
    disk_quota_mb: int | None  # total size of the writable directories; None = no quota (the host's disks)
    seccomp: str  # "filter" | "unavailable" (no libseccomp binding for the interpreter) | "off"


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    elapsed: float  # seconds, from forking the call's first process until its last one is gone
    isolation: Isolation

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def default_python() -> str:
    """The system's python3 (a small, root-owned tree to expose read-only), else the caller's own."""
    return shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def _private_uid() -> int | None:
    """A uid of our own per call when we are root; otherwise we cannot switch and keep ours."""
    if os.geteuid() != 0:
        return None
    return UID_BASE + (os.getpid() * 7919 + next(_uid_counter)) % UID_SPAN


class _Server:
    """A running sandbox server of this process, for one interpreter."""

    def __init__(self, python: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.python = python
        self.control = ours
        self._stderr = tempfile.TemporaryFile()  # read only when start-up fails
        try:
            self.process = subprocess.Popen(
                [python, "-I", "-S", str(SERVER), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                env={},  # secrets in our environment never reach a program
                pass_fds=(theirs.fileno(),),
                cwd="/",
            )
        except OSError as exc:
            ours.close()
            raise SandboxError(f"sandbox launcher failed: cannot start {python}: {exc}") from exc
        finally:
            theirs.close()
        ours.settimeout(SERVER_START_SECONDS)
        try:
            hello = json.loads(ours.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as exc:
            hello = {"error": f"{type(exc).__name__}: {exc}"}
        if not hello.get("ready"):
            self.close()
            self._stderr.seek(0)
            detail = hello.get("error") or self._stderr.read().decode(errors="replace")[-2000:] or "no output"
            raise SandboxError(
                f"sandbox launcher failed: the sandbox server on {python} did not start: {detail}"
            )
        ours.settimeout(None)
        self.failure: str | None = None  # why this process killed it (hung), for the restart's log line

    def submit(self, call: socket.socket, stdout_fd: int, stderr_fd: int) -> bool:
        """Hand one call to the server; False when it is gone."""
        try:
            socket.send_fds(self.control, [b"call"], [call.fileno(), stdout_fd, stderr_fd])
            return True
        except OSError:
            return False

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill_hung(self, waited: float) -> None:
        """Kill a server that did not take a call for `waited` seconds; the next call starts a new one. The calls it
        had taken run in their own processes and finish."""
        self.failure = f"(pid {self.process.pid}) did not take a call for {waited:g} s and was killed"
        self.process.kill()
        self.process.wait()

    def why_gone(self) -> str:
        return self.failure or f"(pid {self.process.pid}) died (exit code {self.process.returncode})"

    def close(self) -> None:
        """Closing the control socket ends the server (its running calls finish on their own)."""
        self.control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_servers: dict[str, _Server] = {}
_servers_lock = threading.Lock()


def _server_for(python: str) -> _Server:
    with _servers_lock:
        server = _servers.get(python)
        if server is None or not server.alive():
            if server is not None:
                server.close()
                try:
                    RESTARTS.spend(server.why_gone())
                except RestartsSpent as spent:
                    raise SandboxError(f"sandbox launcher failed: {spent}") from None
            server = _servers[python] = _Server(python)
        return server


def _drop_servers_after_fork() -> None:
    # A forked child must not share its parent's server (their calls would interleave on one socket);
    # the parent keeps the server, the child starts its own on its first call.
    global _servers_lock
    for server in _servers.values():
        server.control.close()
    _servers.clear()
    _servers_lock = threading.Lock()


def _close_servers() -> None:
    for server in _servers.values():
        server.close()
    _servers.clear()


os.register_at_fork(after_in_child=_drop_servers_after_fork)
atexit.register(_close_servers)


class _Call:
    """One call's request and output files, shared by the blocking and the async paths."""

    def __init__(self, code: str, config: SandboxConfig | None):
        if not isinstance(code, str):
            raise TypeError(f"run_python(code=...) takes the program text as str, got {type(code).__name__}")
        self.config = config = config or SandboxConfig()
        self.python = config.python or default_python()
        # Any str encodes with surrogatepass; the program then gets the SyntaxError `python` gives for
        # such a file, as a result, instead of an encoding error here.
        source = code.encode("utf-8", "surrogatepass")
        header = {
            "uid": _private_uid(),
            "timeout": config.timeout,
            "cpu_seconds": config.effective_cpu_seconds,
            "memory_mb": config.memory_mb,
            "file_size_mb": config.file_size_mb,
            "max_processes": config.max_processes,
            "disk_mb": config.disk_mb,
            "packages": list(config.packages),
            "namespaces": config.namespaces,
            "seccomp": config.seccomp,
            "code_bytes": len(source),
        }
        self.request = json.dumps(header).encode() + b"\n" + source
        # Memory files, not pipes: RLIMIT_FSIZE bounds how much the program writes, we read only what we
        # keep, and they live nowhere on disk.
        self.stdout_fd = os.memfd_create("rlvr-sandbox-stdout")
        self.stderr_fd = os.memfd_create("rlvr-sandbox-stderr")

    def submit(self, server: _Server) -> socket.socket | None:
        """A connected call socket, or None when the server is gone."""
        for fd in (self.stdout_fd, self.stderr_fd):
            os.ftruncate(fd, 0)  # a retried call starts with empty output
        ours, theirs = socket.socketpair()
        try:
            if server.submit(theirs, self.stdout_fd, self.stderr_fd):
                return ours
            ours.close()
            return None
        finally:
            theirs.close()

    def retry(self, reply: bytes, server: _Server) -> bool:
        """Whether to send again: no answer, because the server died with our request in its queue (its
        sockets close a moment before it can be reaped, hence the short wait)."""
        if reply:
            return False
        try:
            server.process.wait(timeout=SERVER_EXIT_SECONDS)
            return True
        except subprocess.TimeoutExpired:
            return False  # the server lives: the call's own supervisor failed; reported as such

    def timeout_error(self, sock: socket.socket, server: _Server) -> SandboxError:
        """The error of a call that got no answer in time. When its request was never read (still queued on its
        socket: no supervisor took the call), the server is hung and is killed, to be replaced on the next call."""
        waited = self.config.timeout + GRACE_SECONDS
        unread = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        if unread and server.alive():
            server.kill_hung(waited)
        if server.failure is not None:  # this call or another one it held found it hung
            return SandboxError(f"the sandbox server {server.failure}; the next call starts a new one")
        return SandboxError(f"sandbox call did not finish within its {self.config.timeout}s timeout + "
                            f"{GRACE_SECONDS}s grace")

    def result(self, reply: bytes) -> SandboxResult:
        try:
            status = json.loads(reply)
        except ValueError:
            status = {"setup_error": f"no answer from the sandbox server (got {reply[:200]!r})"}
        if "setup_error" in status:
            raise SandboxError(f"sandbox launcher failed: {status['setup_error']}")
        stdout, stdout_cut = _read_bounded(self.stdout_fd, self.config.max_output_chars)
        stderr, stderr_cut = _read_bounded(self.stderr_fd, self.config.max_output_chars)
        return SandboxResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=status["exit_code"],
            signal=status["signal"],
            timed_out=status["timed_out"],
            stdout_truncated=stdout_cut,
            stderr_truncated=stderr_cut,
            elapsed=status["elapsed"],
            isolation=Isolation(**status["isolation"]),
        )

    def close(self) -> None:
        os.close(self.stdout_fd)
        os.close(self.stderr_fd)


def _read_bounded(fd: int, max_chars: int) -> tuple[str, bool]:
    """First `max_chars` characters of a captured stream and whether anything was cut. Always text: invalid
    UTF-8 (raw bytes, surrogates written through .buffer) becomes U+FFFD, NULs stay."""
    # UTF-8 uses at most 4 bytes a character; one more byte tells us whether there was more.
    raw = os.pread(fd, 4 * max_chars + 1, 0)
    text = raw.decode("utf-8", errors="replace")
    truncated = len(text) > max_chars or len(raw) > 4 * max_chars
    return text[:max_chars], truncated


def _receive_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def run_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandboxed process and return what it printed.

    Blocking; use `arun_python` from async code. Whatever the program text is or does, the outcome is a
    SandboxResult; SandboxError only when the sandbox itself fails (bad interpreter, server cannot start).
    """
    call = _Call(code, config)
    try:
        for _ in range(MAX_ATTEMPTS):
            server = _server_for(call.python)
            sock = call.submit(server)
            reply = b""
            if sock is not None:
                with sock:
                    sock.settimeout(call.config.timeout + GRACE_SECONDS)
                    try:
                        sock.sendall(call.request)
                        reply = _receive_all(sock)
                    except TimeoutError:
                        raise call.timeout_error(sock, server) from None
                    except OSError:
                        pass  # the supervisor never read it: its server died
            if not call.retry(reply, server):
                break
        return call.result(reply)
    finally:
        call.close()


async def arun_python(code: str, config: SandboxConfig | None = None) -> SandboxResult:
    """`run_python` for async code: waits on the call's socket in the event loop (no thread per call), so
    32 concurrent rollouts run 32 programs at once. Cancelling it kills the program."""
    call = _Call(code, config)
    loop = asyncio.get_running_loop()
    try:
        for _ in range(MAX_ATTEMPTS):
            server = _servers.get(call.python)
            if server is None or not server.alive():  # starting one blocks: not on the event loop
                server = await asyncio.to_thread(_server_for, call.python)
            sock = call.submit(server)
            reply = b""
            if sock is not None:
                with sock:
                    sock.setblocking(False)
                    try:
                        async with asyncio.timeout(call.config.timeout + GRACE_SECONDS):
                            await loop.sock_sendall(sock, call.request)
                            chunks = []
                            while chunk := await loop.sock_recv(sock, 65536):
                                chunks.append(chunk)
                            reply = b"".join(chunks)
                    except TimeoutError:
                        raise call.timeout_error(sock, server) from None
                    except OSError:
                        pass  # the supervisor never read it: its server died
            if reply or not await asyncio.to_thread(call.retry, reply, server):
                break
        return call.result(reply)
    finally:
        call.close()
