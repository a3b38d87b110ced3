"""The seccomp filter (libseccomp's binding, Debian python3-seccomp, installed by scripts/setup.sh): the
syscalls an attacker wants fail with EPERM, what programs need (threads, fork, exec) still works."""

from __future__ import annotations

import errno
import json
import os
import textwrap

import pytest

from rlvr.sandbox import SandboxConfig, run_python

CLONE_NEWUSER = 0x10000000
# Syscall numbers, with harmless arguments: each would succeed or fail for another reason without the filter.
SYSCALLS = {
    "x86_64": {"ptrace": 101, "mount": 165, "unshare": 272, "keyctl": 250, "bpf": 321, "perf_event_open": 298,
               "userfaultfd": 323, "io_uring_setup": 425, "clone": 56, "setns": 308, "memfd_create": 319},
    "aarch64": {"ptrace": 117, "mount": 40, "unshare": 97, "keyctl": 219, "bpf": 280, "perf_event_open": 241,
                "userfaultfd": 282, "io_uring_setup": 425, "clone": 220, "setns": 268, "memfd_create": 279},
}  # fmt: skip
PROBE = """
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    nr = NUMBERS
    attempts = {
        "ptrace": (nr["ptrace"], 0, 0, 0, 0),  # PTRACE_TRACEME
        "mount": (nr["mount"], b"none", b"/tmp", b"tmpfs", 0, None),
        "unshare": (nr["unshare"], 0x10000000),  # CLONE_NEWUSER: the usual first step to kernel bugs
        "keyctl": (nr["keyctl"], 0, -3, 1),  # KEYCTL_GET_KEYRING_ID, session keyring, create
        "bpf": (nr["bpf"], 0, None, 0),
        "perf_event_open": (nr["perf_event_open"], None, 0, -1, -1, 0),
        "userfaultfd": (nr["userfaultfd"], 0),
        "io_uring_setup": (nr["io_uring_setup"], 1, None),
        "clone": (nr["clone"], 0x10000000 | 17, None, None, None, None),  # CLONE_NEWUSER | SIGCHLD
        "setns": (nr["setns"], 0, 0),
        "memfd_create": (nr["memfd_create"], b"ram", 0),  # RAM beyond the address-space limit and quota
    }
    errors = {}
    for name, args in attempts.items():
        ctypes.set_errno(0)
        result = libc.syscall(*args)
        if result == 0 and name == "clone":
            os._exit(0)  # the child, had the clone succeeded
        errors[name] = ctypes.get_errno() if result == -1 else "succeeded"
    print(json.dumps(errors))
"""


def probe(**config) -> dict:
    numbers = SYSCALLS[os.uname().machine]
    code = textwrap.dedent(PROBE).replace("NUMBERS", repr(numbers))
    result = run_python(code, SandboxConfig(**config))
    assert result.ok, result.stderr
    return {"isolation": result.isolation, "errors": json.loads(result.stdout)}


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_dangerous_syscalls_are_denied(namespaces):
    outcome = probe(namespaces=namespaces)
    assert outcome["isolation"].seccomp == "filter"
    assert outcome["errors"] == dict.fromkeys(SYSCALLS[os.uname().machine], errno.EPERM)


def test_without_the_filter_an_unprivileged_program_could_make_a_user_namespace():
    # What the filter is for: the kernel itself lets the private uid create a user namespace here.
    outcome = probe(seccomp=False)
    assert outcome["isolation"].seccomp == "off"
    assert outcome["errors"]["unshare"] == "succeeded"


def test_threads_fork_and_exec_still_work_under_the_filter():
    result = run_python(
        textwrap.dedent("""
        import os, subprocess, sys, threading
        out = []
        t = threading.Thread(target=out.append, args=("thread",))  # clone3 -> ENOSYS -> glibc uses clone
        t.start(); t.join()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        out.append(subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout)
        print(out)
        """)
    )
    assert result.ok, result.stderr
    assert result.stdout == "['thread', 7, '42\\n']\n"
    assert result.isolation.seccomp == "filter"
