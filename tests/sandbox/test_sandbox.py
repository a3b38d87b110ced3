"""The sandbox as a security boundary: each attack runs for real and must fail or be contained.

Attacks that depend on a namespace run twice: with namespaces (what this machine allows) and with
`namespaces=False`, which forces the fallbacks (blocked sockets, uid-wide kill, swept temp dirs) that other
machines get. The private filesystem has its own module (test_filesystem.py), the server its own
(test_server.py), seccomp too (test_seccomp.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.sandbox import SandboxConfig, SandboxError, arun_python, observation, run_python

REPO_ROOT = Path(__file__).resolve().parents[2]
BOTH_MODES = pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])


def run(code: str, **config) -> object:
    return run_python(textwrap.dedent(code), SandboxConfig(**config))


def test_program_output_and_exit_code_are_captured():
    result = run("""
        import sys
        print(6 * 7)
        print("warn", file=sys.stderr)
    """)
    assert result.ok
    assert (result.stdout, result.stderr, result.exit_code) == ("42\n", "warn\n", 0)
    assert result.isolation.uid is not None and result.isolation.uid != os.getuid()


def test_exception_is_reported_like_the_interpreter_does():
    result = run("raise ValueError('boom')")
    assert not result.ok
    assert result.exit_code == 1
    assert result.stderr == (
        'Traceback (most recent call last):\n  File "/sandbox/main.py", line 1, in <module>\n'
        "    raise ValueError('boom')\nValueError: boom\n"
    )


@pytest.mark.parametrize(
    ("code", "exit_code", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("exit(4)", 4, ""),  # site's exit(), as in a normal interpreter
        ("raise SystemExit('bye')", 1, "bye\n"),
        ("print(", 1, "SyntaxError: '(' was never closed"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGINT)", None, "KeyboardInterrupt"),
    ],
)
def test_exit_paths_match_a_plain_interpreter(code, exit_code, stderr):
    result = run(code)
    assert result.exit_code == exit_code
    assert result.signal == (signal.SIGINT if exit_code is None else None)
    assert stderr in result.stderr and "rlvr" not in result.stderr  # no frame of the sandbox's own code


def test_threads_atexit_and_unflushed_files_finish_as_in_a_normal_shutdown():
    result = run("""
        import atexit, threading, time
        atexit.register(print, "atexit ran")
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread done"))).start()
        log = open("/tmp/log.txt", "w")
        log.write("never closed")
    """)
    assert result.ok, result.stderr
    assert result.stdout == "thread done\natexit ran\n"


@pytest.mark.parametrize(
    "code",
    [
        "print('\ud800')",  # a lone surrogate in the program text
        "print('a\x00b')",  # a NUL byte in the program text
        "x = '\udcff'\n" * 3,
        "\ufeffprint(1)",  # a byte-order mark
        "# -*- coding: latin-1 -*-\nprint('é')",
    ],
    ids=["surrogate", "nul", "surrogate-escape", "bom", "coding-cookie"],
)
def test_any_program_text_gives_a_result_never_an_exception(code):
    result = run_python(code)
    assert result.exit_code in (0, 1)
    if result.exit_code:
        assert "SyntaxError" in result.stderr or "ValueError" in result.stderr
    assert observation(result, SandboxConfig())  # something the model can read


def test_large_program_texts_run_or_fail_as_programs():
    big = "x = 1\n" * 200_000 + "print(x)\n"  # 1.2 MB
    assert run_python(big).stdout == "1\n"
    over_quota = run_python(big, SandboxConfig(disk_mb=1))
    assert over_quota.exit_code == 1
    assert "Error: cannot write the program file /sandbox/main.py" in over_quota.stderr


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(code):
    result = run_python(code)
    assert result.exit_code is not None or result.signal is not None


def test_output_that_is_not_valid_text_comes_back_as_text():
    result = run("""
        import sys
        sys.stdout.buffer.write(b"bad \\xff\\xfe utf-8, nul \\x00, surrogate \\xed\\xa0\\x80 end")
        print("\\ud800")  # strict stdout: UnicodeEncodeError on stderr, as in a plain interpreter
    """)
    assert result.exit_code == 1
    assert result.stdout == "bad \ufffd\ufffd utf-8, nul \x00, surrogate \ufffd\ufffd\ufffd end"
    assert "UnicodeEncodeError" in result.stderr
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in result.stdout + result.stderr)


@pytest.mark.parametrize("code", ["while True: pass", "import time; time.sleep(60)"], ids=["busy", "sleep"])
def test_infinite_loop_is_killed_within_the_timeout(code):
    result = run(code, timeout=1.0)
    assert result.timed_out and not result.ok
    assert result.signal == signal.SIGKILL
    # killed at the timeout; the slack covers tearing the namespace down on a loaded 2-core machine
    assert 1.0 <= result.elapsed < 2.5


def test_cpu_limit_sends_sigxcpu():
    result = run("while True: pass", timeout=20.0, cpu_seconds=1)
    assert not result.timed_out
    assert result.signal == signal.SIGXCPU


def test_memory_bomb_is_stopped_by_the_address_space_limit():
    result = run(
        """
        chunks = []
        while True:
            chunks.append(bytearray(16 * 1024 * 1024))
        """,
        memory_mb=128,
        timeout=10.0,
    )
    assert not result.ok and not result.timed_out
    assert "MemoryError" in result.stderr


def test_file_size_limit_stops_large_writes():
    # CPython ignores SIGXFSZ, so the write fails with EFBIG instead of the process being killed.
    result = run("open('big.bin', 'wb').write(b'x' * (3 * 1024 * 1024))", file_size_mb=1)
    assert not result.ok
    assert "OSError: [Errno 27] File too large" in result.stderr


def test_output_flood_is_bounded_by_the_file_size_limit():
    result = run(
        "import sys\nwhile True: sys.stdout.write('x' * 65536)", file_size_mb=1, max_output_chars=1000
    )
    assert result.exit_code == 1 and "File too large" in result.stderr
    assert result.stdout == "x" * 1000 and result.stdout_truncated


@BOTH_MODES
def test_fork_bomb_is_contained_and_fully_killed(namespaces, processes_of):
    result = run(
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
        timeout=1.5,
        max_processes=8,
        namespaces=namespaces,
    )
    assert result.timed_out
    assert processes_of(result.isolation.uid) == []


@BOTH_MODES
def test_process_limit_applies_and_background_processes_die_with_the_call(namespaces, processes_of):
    # Children that detach (new session) and sleep: the process limit must stop the loop early, and none of
    # them may survive the call, not even the ones that left the program's process group.
    result = run(
        """
        import os, time
        started = 0
        for _ in range(50):
            try:
                if os.fork() == 0:
                    os.setsid()
                    time.sleep(60)
                    os._exit(0)
            except BlockingIOError:
                break
            started += 1
        print(started)
        """,
        max_processes=6,
        namespaces=namespaces,
    )
    assert result.ok, result.stderr
    assert 1 <= int(result.stdout) < 6
    assert processes_of(result.isolation.uid) == []
    expected = "pid-namespace" if namespaces else "uid-kill"
    assert result.isolation.containment == expected


@BOTH_MODES
def test_network_socket_cannot_reach_even_localhost(namespaces):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = run(
            f"""
            import socket
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            print("connected")
            """,
            namespaces=namespaces,
        )
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    assert not result.ok
    assert "connected" not in result.stdout
    expected = "namespace" if namespaces else "blocked-sockets"
    assert result.isolation.network == expected


@BOTH_MODES
def test_writes_outside_the_workdir_leave_the_project_untouched(namespaces):
    readme = REPO_ROOT / "README.md"
    before = hashlib.sha256(readme.read_bytes()).hexdigest()
    listing = sorted(p.name for p in REPO_ROOT.iterdir())
    result = run(
        f"""
        import os
        for path in [{str(REPO_ROOT / "pwned.txt")!r}, {str(readme)!r}, "/root/pwned.txt"]:
            try:
                with open(path, "a") as f:
                    f.write("pwned")
                print("WROTE", path)
            except OSError as e:
                print("refused", path, type(e).__name__)
        with open("scratch.txt", "w") as f:
            f.write("fine")
        print(os.getcwd())
        """,
        namespaces=namespaces,
    )
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["refused"] * 3
    assert hashlib.sha256(readme.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in REPO_ROOT.iterdir()) == listing
    if namespaces:
        assert lines[3] == "/sandbox"  # a directory of the call's own tmpfs, gone with it
    else:
        workdir = Path(lines[3])
        assert workdir.name.startswith("rlvr-sandbox-") and not workdir.exists()  # removed afterwards


@BOTH_MODES
def test_parent_secrets_are_invisible(monkeypatch, namespaces):
    monkeypatch.setenv("RLVR_TEST_SECRET", "hunter2")
    result = run(
        f"""
        import os
        print(sorted(os.environ))
        try:
            print(open("/proc/{os.getpid()}/environ", "rb").read())
        except OSError as e:
            print("refused", type(e).__name__)
        """,
        namespaces=namespaces,
    )
    assert result.ok, result.stderr
    assert "hunter2" not in result.stdout and "RLVR_TEST_SECRET" not in result.stdout
    # With a PID namespace our pid does not exist there; without one, another uid's environ is refused.
    expected = "FileNotFoundError" if namespaces else "PermissionError"
    assert result.stdout.splitlines()[-1] == f"refused {expected}"


def test_output_is_truncated_per_stream():
    result = run("import sys; print('x' * 10_000); print('y' * 50, file=sys.stderr)", max_output_chars=100)
    assert result.stdout == "x" * 100 and result.stdout_truncated
    assert result.stderr == "y" * 50 + "\n" and not result.stderr_truncated


def test_concurrent_calls_get_their_own_uid_and_results():
    async def main():
        return await asyncio.gather(*(arun_python(f"print({i} * 2)") for i in range(3)))

    results = asyncio.run(main())
    assert [r.stdout for r in results] == ["0\n", "2\n", "4\n"]
    assert len({r.isolation.uid for r in results}) == 3


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout", 0),
        ("memory_mb", -1),
        ("max_processes", True),
        ("max_output_chars", "10"),
        ("cpu_seconds", 0),
        ("disk_mb", 0),
        ("disk_mb", 1.5),
        ("packages", "yaml"),
        ("packages", ("../etc",)),
    ],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"SandboxConfig.{field}"):
        SandboxConfig(**{field: value})


def test_bad_python_and_code_types_are_explained(tmp_path):
    with pytest.raises(ValueError, match="not an executable"):
        SandboxConfig(python="/nonexistent/python")
    with pytest.raises(TypeError, match="as str"):
        run_python(b"print(1)")
    broken = tmp_path / "python"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    with pytest.raises(SandboxError, match="sandbox launcher failed: cannot start"):
        run_python("print(1)", SandboxConfig(python=str(broken)))
    not_python = tmp_path / "false"
    not_python.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    not_python.chmod(0o755)
    with pytest.raises(SandboxError, match="did not start: nope"):
        run_python("print(1)", SandboxConfig(python=str(not_python)))
