"""The sandbox server: a pre-forked Python ("zygote") that runs each call in a fresh, isolated process tree.

Started once per interpreter by `rlvr.sandbox.core` as `python -I -S _server.py <control fd>` with an empty
environment, on the interpreter the programs use (by default the system's /usr/bin/python3). Standard
library only: it never imports rlvr or anything from site-packages. It imports the modules programs use
most, computes the read-only filesystem view (`_jail.read_only_view`) and the seccomp filter once, says
"ready" on the control socket, then forks per call. No call runs in the server itself and the server keeps
no state between calls, so each call starts from the same untouched process.

Processes of one call:
  server       receives (call socket, stdout fd, stderr fd) on the control socket and forks a supervisor;
               exits when the control socket closes (its client is gone)
  supervisor   reads the request from the call socket, unshares the call's namespaces (mount, UTS, IPC,
               PID, network), forks init, enforces the wall-clock limit, answers one JSON line; kills the
               call at once if the client hangs up (caller cancelled or timed out)
  init         pid 1 of the call's PID namespace: builds the private root, forks the program, reports how
               it ended; when it exits the kernel kills whatever is left in the namespace
  program      own session, stdio, rlimits, private uid, seccomp; then runs the code in this interpreter
Without namespaces (refused by the kernel, or SandboxConfig(namespaces=False)) the supervisor forks the
program directly in a host temporary directory, and afterwards kills every process of the private uid
and sweeps what that uid left in /tmp, /var/tmp, /dev/shm and SysV IPC.

Protocol: the control socket is SOCK_SEQPACKET; each call is one message carrying three fds. On the call
socket the client writes one JSON header line (limits, uid, `code_bytes`) followed by the program text
(UTF-8 with surrogates passed through); the supervisor answers one JSON line: the isolation record plus
exit_code / signal / timed_out / elapsed, or setup_error when the sandbox itself failed.
"""

import gc
import importlib
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _jail  # noqa: E402
import _program  # noqa: E402

del sys.path[0]

# What model-written programs import most (GSM8K arithmetic): imported once here, shared by every call.
PRELOAD = (
    "bisect", "cmath", "collections", "dataclasses", "datetime", "decimal", "fractions", "functools", "heapq",
    "itertools", "json", "math", "operator", "random", "re", "statistics", "string", "traceback", "typing",
)  # fmt: skip
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
SETUP_FAILED = 125
REQUEST_SECONDS = 30.0  # a client that has not sent its whole request by then is gone
MAX_HEADER_BYTES = 1 << 16
MAX_FD = 2**31 - 1  # closerange's upper bound: close_range(2) visits only the open ones
MB = 1024 * 1024


def _initial_signals() -> dict:
    handlers = {}
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if handler is not None:
            handlers[signum] = handler
    return handlers


INITIAL_SIGNALS = _initial_signals()  # Python's own start-up dispositions, restored for every program


class Setup:
    """What the server computes once and every call shares (read-only after start-up)."""

    def __init__(self):
        for name in PRELOAD:
            importlib.import_module(name)
        import site  # noqa: PLC0415 - -S skips site.main(); programs still expect exit(), quit(), help()

        site.setquit()
        site.setcopyright()
        site.sethelper()
        self.sys_path = list(sys.path)
        self.syscall_filter = _jail.syscall_filter()
        self.view = _jail.read_only_view([])


class Call:
    """One request, as the supervisor read it, and what its processes need."""

    def __init__(self, setup: Setup, fds: list[int]):
        self.conn = socket.socket(fileno=fds[0])
        self.stdout_fd, self.stderr_fd = fds[1], fds[2]
        self.conn.settimeout(REQUEST_SECONDS)
        with self.conn.makefile("rb") as reader:
            header = reader.readline(MAX_HEADER_BYTES)
            if not header.endswith(b"\n"):
                raise ConnectionError("incomplete request header")
            self.request = json.loads(header)
            self.source = reader.read(self.request["code_bytes"])
            if len(self.source) != self.request["code_bytes"]:
                raise ConnectionError("incomplete program text")
        self.conn.settimeout(None)
        self.uid = self.request["uid"]
        self.sys_path = setup.sys_path
        self.view = setup.view
        self.syscall_filter = setup.syscall_filter if self.request["seccomp"] else None
        self.seccomp_state = (
            "filter" if self.syscall_filter else ("unavailable" if self.request["seccomp"] else "off")
        )

    def allow_packages(self, namespaced: bool) -> None:
        """Add the allowed packages to the view and to sys.path (their site directories, in order)."""
        paths = _jail.package_paths(self.request["packages"])
        if namespaced:
            self.view = _jail.read_only_view(paths)
        dirs = [os.path.dirname(p) for p in paths]
        self.sys_path = self.sys_path + sorted(set(dirs), key=dirs.index)

    def answer(self, **fields) -> None:
        """Send the one-line answer and end the supervisor."""
        try:
            self.conn.sendall(json.dumps(fields).encode() + b"\n")
        finally:
            os._exit(0)


def report(fd: int, **fields) -> None:
    os.write(fd, (json.dumps(fields) + "\n").encode())


def or_report_and_exit(status_fd: int, step, *args):
    """Run a setup step of a child process; a failure is the sandbox's, reported and fatal to the child."""
    try:
        return step(*args)
    except BaseException as exc:  # noqa: BLE001 - any failure here must reach the caller, not vanish
        report(status_fd, setup_error=f"{step.__name__}: {type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)


def wait_status(pid: int) -> dict:
    _, status = os.waitpid(pid, 0)
    return decode_status(status)


def decode_status(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"exit_code": None, "signal": os.WTERMSIG(status)}
    return {"exit_code": os.WEXITSTATUS(status), "signal": None}


def limits(request: dict) -> dict:
    cpu = request["cpu_seconds"]
    return {
        # SIGXCPU at the soft limit (so the caller can say why), SIGKILL a second later if it is caught.
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_AS: (request["memory_mb"] * MB,) * 2,
        resource.RLIMIT_FSIZE: (request["file_size_mb"] * MB,) * 2,
        resource.RLIMIT_NPROC: (request["max_processes"],) * 2,
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_NOFILE: (64, 64),
    }


def prepare_program(call: Call, workdir: str, namespaced: bool, status_fd: int) -> _program.Program:
    """In the program's process: its session, stdio, limits, uid, seccomp; then only fds 0-2 stay open."""

    def isolate_program() -> None:
        os.setsid()
        os.chdir(workdir)
        os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        os.dup2(call.stdout_fd, 1)
        os.dup2(call.stderr_fd, 2)
        for which, value in limits(call.request).items():
            resource.setrlimit(which, value)
        if call.uid is not None:
            os.setgroups([])
            os.setgid(call.uid)
            os.setuid(call.uid)
            # Changing uid made us non-dumpable, which hides the program's own children in /proc from
            # it (hidepid) and differs from an exec'ed interpreter; core dumps stay off (RLIMIT_CORE).
            _jail.libc.prctl(PR_SET_DUMPABLE, 1)
        if call.syscall_filter is not None:
            call.syscall_filter.load()  # sets no_new_privs too
        os.closerange(3, status_fd)
        os.closerange(status_fd + 1, MAX_FD)

    or_report_and_exit(status_fd, isolate_program)
    os.close(status_fd)
    return _program.Program(
        source=call.source,
        path=os.path.join(workdir, "main.py"),
        sys_path=call.sys_path,
        signals=INITIAL_SIGNALS,
        block_network=not namespaced,
    )


def run_init(call: Call, status_fd: int) -> _program.Program:
    """pid 1 of the call's PID namespace: build the private root, run the program as a child, report.

    The program is not pid 1 itself because the kernel ignores default-action signals sent to pid 1
    (SIGXCPU, SIGXFSZ, a program's own SIGTERM), which would change how limits behave."""
    # If the supervisor dies, take the whole namespace down with it.
    _jail.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    or_report_and_exit(status_fd, _jail.enter_private_root, call.view, call.uid, call.request["disk_mb"])
    or_report_and_exit(status_fd, _jail.cap_sysv_shm, call.request["disk_mb"])
    pid = os.fork()
    if pid == 0:
        return prepare_program(call, _jail.WRITABLE[0], True, status_fd)
    report(status_fd, **wait_status(pid))
    os._exit(0)


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) from that uid reaches exactly those, in one atomic pass;
    processes forked while it walks the process list survive it, so repeat until /proc shows none alive.
    (kill(-1) itself cannot say when it is done: it fails with ESRCH only when no other process exists.)"""
    pid = os.fork()
    if pid == 0:
        os.setuid(uid)
        me = os.getpid()
        for _ in range(1000):
            os.kill(-1, signal.SIGKILL)
            if not [p for p in _jail.live_processes_of(uid) if p != me]:
                os._exit(0)
        os._exit(1)
    os.waitpid(pid, 0)


def reap_children() -> None:
    """Wait for every child left: the program's orphans, adopted as subreaper, all killed by kill_uid."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def wait_or_kill(pid: int, call: Call, namespaced: bool) -> tuple[int, bool, bool]:
    """Wait for `pid` (init, or the program itself without namespaces) until the call's timeout; SIGKILL
    it on timeout or when the client hangs up. Returns (wait status, timed out, client gone)."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(call.conn, select.POLLIN)  # the client never writes again: readable means closed
    deadline = time.monotonic() + call.request["timeout"]
    timed_out = gone = False
    while True:
        left = deadline - time.monotonic()
        events = dict(poller.poll(max(left, 0) * 1000)) if left > 0 else {}
        if pidfd in events:
            break
        if events or left <= 0:
            timed_out, gone = not events, bool(events)
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # init: the kernel kills the namespace
            break
    if not namespaced:
        # The program leads its process group; until it is reaped its pid (= the group's id) cannot be
        # reused, so this reaches only what it left in its group.
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    return status, timed_out, gone


def isolation(call: Call, namespaced: bool) -> dict:
    private_uid = call.uid is not None
    return {
        "network": "namespace" if namespaced else "blocked-sockets",
        "containment": "pid-namespace" if namespaced else ("uid-kill" if private_uid else "process-group"),
        "uid": call.uid,
        "filesystem": "private" if namespaced else ("host-swept" if private_uid else "host"),
        "ipc": "namespace" if namespaced else ("swept" if private_uid else "host"),
        "disk_quota_mb": call.request["disk_mb"] if namespaced else None,
        "seccomp": call.seccomp_state,
    }


def supervise(setup: Setup, fds: list[int]) -> _program.Program:
    """The supervisor of one call. Never returns, except in the program's process (with its Program)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        call = Call(setup, fds)
    except (OSError, ValueError, KeyError):
        os._exit(1)  # the client is gone or sent something else: nobody to answer
    namespaced = call.request["namespaces"] and _jail.unshare_call_namespaces()
    if call.request["packages"]:
        try:
            call.allow_packages(namespaced)
        except (OSError, ValueError) as exc:
            call.answer(setup_error=str(exc))
    workdir = _jail.WRITABLE[0] if namespaced else tempfile.mkdtemp(prefix="rlvr-sandbox-")
    if not namespaced and call.uid is not None:
        os.chown(workdir, call.uid, call.uid)  # the program's only writable directory it owns
        # Orphans of the program become our children (not the machine's init's): reaped once killed.
        _jail.libc.prctl(PR_SET_CHILD_SUBREAPER, 1)

    status_r, status_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        call.conn.close()
        os.close(status_r)
        if namespaced:
            return run_init(call, status_w)
        return prepare_program(call, workdir, False, status_w)
    os.close(status_w)

    status, timed_out, gone = wait_or_kill(pid, call, namespaced)
    elapsed = time.monotonic() - start
    if not namespaced:
        if call.uid is not None:
            kill_uid(call.uid)
            reap_children()
            _jail.sweep_uid(call.uid)  # workdir included: it is the uid's
        shutil.rmtree(workdir, ignore_errors=True)
    if gone:
        os._exit(0)
    with os.fdopen(status_r) as pipe:
        reported = {}
        for line in pipe:
            reported.update(json.loads(line))
    if "setup_error" in reported:
        call.answer(setup_error=reported["setup_error"])
    if timed_out:
        outcome = {"exit_code": None, "signal": signal.SIGKILL}
    elif namespaced:
        if "exit_code" not in reported:
            call.answer(setup_error=f"sandbox init ended without a status ({decode_status(status)})")
        outcome = reported
    else:
        outcome = decode_status(status)
    call.answer(**outcome, timed_out=timed_out, elapsed=elapsed, isolation=isolation(call, namespaced))


def serve(control: socket.socket) -> list[int]:
    """The server loop. Returns only in a forked supervisor, with the call's three fds."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    while True:
        message, fds, _, _ = socket.recv_fds(control, 16, 3)
        if not message:
            os._exit(0)  # the client closed the control socket: it is gone
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            control.close()
            return fds
        for fd in fds:
            os.close(fd)


def main() -> _program.Program:
    control = socket.socket(fileno=int(sys.argv[1]))
    try:
        setup = Setup()
    except BaseException as exc:  # noqa: BLE001 - reported to the client, which raises SandboxError
        control.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        os._exit(1)
    control.send(json.dumps({"ready": True, "seccomp": setup.syscall_filter is not None}).encode())
    gc.freeze()  # keep the preloaded objects out of collections, so forks share their pages
    return supervise(setup, serve(control))


if __name__ == "__main__":
    # Reached only in a program's process: run it. Its SystemExit ends this script, so the interpreter
    # shuts down exactly as after `python main.py`.
    main().run()
