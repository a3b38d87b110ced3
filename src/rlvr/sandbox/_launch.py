"""Sandbox launcher: isolates itself, then runs one Python program as an unprivileged uid.

Started by `rlvr.sandbox.run_python` as `python -I -S _launch.py '<json config>'` with an empty environment.
It imports only the standard library (no site-packages, no rlvr) so nothing outside this file can change what
it does, and it is a separate process from the caller, so the caller's threads and event loop are never
forked (`preexec_fn` is not thread-safe).

Layers, each reported back so callers know what is really active:
  network      "namespace": unshare(CLONE_NEWNET), a network namespace with no interface up (not even
               loopback); "blocked-sockets": when namespaces are off or refused, a prelude replaces
               `socket.socket` before the program runs (best effort: `_socket` can bypass it).
  containment  "pid-namespace": unshare(CLONE_NEWPID); our forked child is pid 1 of the namespace and the
               kernel kills every process in it when pid 1 exits, so nothing the program forks (even after
               setsid) outlives the call. "uid-kill": no PID namespace, so after the program ends every
               process of its private uid is SIGKILLed with kill(-1) from that uid.
               "process-group": not root, so only the program's session is killed (a setsid escapes it).
  uid          a private unprivileged uid/gid per call when we are root (root ignores RLIMIT_NPROC; a
               private uid makes the process limit count only this call's processes and makes the project
               tree, owned by root, read-only to the program).
  rlimits      CPU seconds, address space, file size, process count, no core files, open files.

Result protocol: JSON objects, one per line, on the status fd given in the config; the caller merges them.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import time

# <linux/sched.h>
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# <linux/prctl.h>
PR_SET_PDEATHSIG = 1
SETUP_FAILED = 125
# Runs before the program when no network namespace is available. Python-level only, hence "best effort".
BLOCK_SOCKETS = """
import runpy, socket, sys
class _NoNetwork(socket.socket):
    def __init__(self, *args, **kwargs):
        raise PermissionError("network access is disabled in this sandbox")
socket.socket = _NoNetwork
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def report(fd: int, **fields) -> None:
    os.write(fd, (json.dumps(fields) + "\n").encode())


def exec_program(cfg: dict, status_fd: int, network: str) -> None:
    """In the forked child: limits, uid, then exec the program. Never returns."""
    try:
        os.setsid()
        mb = 1024 * 1024
        limits = {
            # SIGXCPU at the soft limit (so the caller can say why), SIGKILL a second later if it is caught.
            resource.RLIMIT_CPU: (cfg["cpu_seconds"], cfg["cpu_seconds"] + 1),
            resource.RLIMIT_AS: (cfg["memory_mb"] * mb,) * 2,
            resource.RLIMIT_FSIZE: (cfg["file_size_mb"] * mb,) * 2,
            resource.RLIMIT_NPROC: (cfg["max_processes"],) * 2,
            resource.RLIMIT_CORE: (0, 0),
            resource.RLIMIT_NOFILE: (64, 64),
        }
        for which, (soft, hard) in limits.items():
            resource.setrlimit(which, (soft, hard))
        os.chdir(cfg["workdir"])
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
        argv = [cfg["python"], "-I"]
        if network != "namespace":
            argv += ["-c", BLOCK_SOCKETS]
        argv.append(cfg["program"])
        os.set_inheritable(status_fd, False)  # closed by exec: the program never sees it
        os.execve(cfg["python"], argv, {})
    except BaseException as exc:  # noqa: BLE001 - any failure here must reach the caller, not vanish
        report(status_fd, setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)


def wait_status(pid: int) -> dict:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"exit_code": None, "signal": os.WTERMSIG(status)}
    return {"exit_code": os.WEXITSTATUS(status), "signal": None}


def namespace_init(cfg: dict, status_fd: int, network: str) -> None:
    """pid 1 of the new PID namespace: run the program as its child, report how it ended, exit.

    The program is not pid 1 itself because the kernel ignores default-action signals sent to pid 1
    (SIGXCPU, SIGXFSZ, a program's own SIGTERM), which would change how limits behave.
    """
    # If the launcher is killed (caller's backstop), take the whole namespace down with it.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    pid = os.fork()
    if pid == 0:
        exec_program(cfg, status_fd, network)
    report(status_fd, **wait_status(pid))
    os._exit(0)


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` (kill(-1) from that uid reaches exactly those), until none is left."""
    pid = os.fork()
    if pid == 0:
        os.setuid(uid)
        for _ in range(1000):  # processes forked while kill(-1) walks the process list survive one pass
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                os._exit(0)
        os._exit(1)
    os.waitpid(pid, 0)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    status_fd = cfg["status_fd"]
    libc = ctypes.CDLL(None, use_errno=True)
    use_ns = cfg["namespaces"]
    network = "namespace" if use_ns and libc.unshare(CLONE_NEWNET) == 0 else "blocked-sockets"
    pid_ns = use_ns and libc.unshare(CLONE_NEWPID) == 0
    if pid_ns:
        containment = "pid-namespace"
    else:
        containment = "uid-kill" if cfg["uid"] is not None else "process-group"
    report(status_fd, network=network, containment=containment, uid=cfg["uid"])

    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        if pid_ns:
            namespace_init(cfg, status_fd, network)
        exec_program(cfg, status_fd, network)

    timed_out = False

    def on_timeout(signum, frame):
        nonlocal timed_out
        timed_out = True
        os.kill(pid, signal.SIGKILL)  # with a PID namespace this is its pid 1: the kernel kills the rest

    signal.signal(signal.SIGALRM, on_timeout)
    signal.setitimer(signal.ITIMER_REAL, cfg["timeout"])
    status = wait_status(pid)  # with a PID namespace, returns only once every process in it is gone
    signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.monotonic() - start
    if not pid_ns:
        kill_group(pid)  # exec_program made the program a session and group leader
        if cfg["uid"] is not None:
            kill_uid(cfg["uid"])
    if not pid_ns or timed_out:  # else pid 1 reported the program's own status
        report(status_fd, **status)
    report(status_fd, timed_out=timed_out, elapsed=elapsed)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    main()
