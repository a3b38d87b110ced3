"""The pre-forked sandbox server: nothing carries over between calls, a crashed server is replaced, and
concurrent, cancelled and forked callers all get their own results."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
import threading
import time

import pytest

from rlvr.sandbox import SandboxConfig, SandboxError, arun_python, run_python
from rlvr.sandbox import core as sandbox_core
from rlvr.serve.launch import descendants


def run(code: str, **config):
    return run_python(textwrap.dedent(code), SandboxConfig(**config))


def server_pid() -> int:
    run_python("pass")  # make sure one is running
    return sandbox_core._servers[sandbox_core.default_python()].process.pid


def test_nothing_of_a_call_is_seen_by_the_next(processes_of):
    first = run("""
        import builtins, json, math, os, random, subprocess, sys
        math.pi = 3
        builtins.planted = "from call 1"
        sys.modules["json"].planted = True
        sys.path.append("/tmp")
        os.environ["PLANTED"] = "1"
        for directory in ("/sandbox", "/tmp", "/dev/shm"):
            open(os.path.join(directory, "planted.txt"), "w").write("x")
        if os.fork() == 0:  # a detached process that would like to outlive the call
            os.setsid()
            import time; time.sleep(60)
        print(random.random())
    """)
    second = run("""
        import builtins, json, math, os, random, sys
        print(json.dumps({
            "pi": math.pi,
            "builtin": hasattr(builtins, "planted"),
            "module": hasattr(json, "planted"),
            "path": "/tmp" in sys.path,
            "env": "PLANTED" in os.environ,
            "files": [d for d in ("/sandbox", "/tmp", "/dev/shm") if os.listdir(d) not in ([], ["main.py"])],
            "pids": sorted(int(n) for n in os.listdir("/proc") if n.isdigit()),
            "random": random.random(),
        }))
    """)
    assert first.ok and second.ok, first.stderr + second.stderr
    seen = json.loads(second.stdout)
    assert seen["pi"] == pytest.approx(3.141592653589793)
    assert not (seen["builtin"] or seen["module"] or seen["path"] or seen["env"])
    assert seen["files"] == []
    assert len(seen["pids"]) == 1  # the program alone
    assert seen["random"] != float(first.stdout)  # each call's generator is seeded afresh
    assert processes_of(first.isolation.uid) == []


def test_a_killed_server_is_replaced_and_a_call_in_flight_still_finishes():
    old = server_pid()
    result: dict = {}
    caller = threading.Thread(
        target=lambda: result.update(r=run("import time; time.sleep(1); print('done')"))
    )
    caller.start()
    time.sleep(0.3)  # the call is running in its own supervisor, forked from the server
    os.kill(old, signal.SIGKILL)
    caller.join()
    assert result["r"].ok and result["r"].stdout == "done\n"

    after = run_python("print(6 * 7)")
    assert after.ok and after.stdout == "42\n"
    assert server_pid() != old


def test_a_call_sent_to_a_server_that_just_died_is_sent_again():
    # Right after SIGKILL the client may still see the server as alive and queue the call with it; the
    # call then comes back unanswered and goes to a new server (programs leave nothing behind: safe).
    for _ in range(5):
        os.kill(server_pid(), signal.SIGKILL)
        result = run_python("print('answered')")
        assert result.ok and result.stdout == "answered\n"


def test_a_server_killed_more_often_than_the_restart_budget_allows_fails_calls_with_a_clear_error(
        fresh_restart_budget, caplog):
    for restart in range(1, 6):
        os.kill(server_pid(), signal.SIGKILL)
        assert run_python("print('answered')").stdout == "answered\n"
        assert fresh_restart_budget.restarts == restart
    assert "restarting it (restart 5 of 5 within 60 s)" in caplog.text
    os.kill(old := server_pid(), signal.SIGKILL)
    with pytest.raises(SandboxError, match=rf"sandbox launcher failed: rlvr.sandbox: the sandbox server \(pid {old}\) "
                                           r"died \(exit code -9\), and was restarted 5 times in the last 60 s"):
        run_python("print('answered')")
    fresh_restart_budget.window_s = 1e-9  # the window has passed: the next call starts a server again
    assert run_python("print('answered')").stdout == "answered\n"


def test_concurrent_async_calls_run_at_the_same_time():
    # Each program records when it ran; with 8 in flight they must overlap (not one after another).
    code = "import time, json\nstart = time.time()\ntime.sleep(1.0)\nprint(json.dumps([start, time.time()]))"

    async def main():
        return await asyncio.gather(*(arun_python(code) for _ in range(8)))

    results = asyncio.run(main())
    spans = [json.loads(r.stdout) for r in results]
    assert max(start for start, _ in spans) < min(end for _, end in spans)
    assert len({r.isolation.uid for r in results}) == 8


def test_threads_calling_the_blocking_api_get_their_own_results():
    results: dict[int, str] = {}

    def call(i: int) -> None:
        results[i] = run_python(f"print({i} ** 2)").stdout

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"{i**2}\n" for i in range(12)}


def test_cancelling_an_async_call_kills_its_program():
    uids_before = _our_sandbox_uids()

    async def main():
        task = asyncio.create_task(arun_python("import os; print(os.getuid(), flush=True)\nwhile True: pass"))
        deadline = time.monotonic() + 30
        while not _our_sandbox_uids() - uids_before:  # the program runs (and is seen: the check below can fail)
            assert time.monotonic() < deadline, "the sandboxed program never appeared"
            await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while _our_sandbox_uids() - uids_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _our_sandbox_uids() - uids_before == set()


def _our_sandbox_uids() -> set[int]:
    """The sandbox uids of this process's descendants (its sandbox server's programs): another pytest worker's
    sandboxed programs run beside these under uids of their own."""
    uids = set()
    for pid in descendants(os.getpid()):
        try:
            uids.add(os.stat(f"/proc/{pid}").st_uid)
        except FileNotFoundError:  # gone meanwhile
            continue
    return {uid for uid in uids if uid >= sandbox_core.UID_BASE}


def test_a_forked_caller_starts_its_own_server(in_forked_child):
    parent_server = server_pid()

    def call() -> dict:
        result = run_python("print('from the child')")
        return {"stdout": result.stdout, "server": sandbox_core._servers[sandbox_core.default_python()].process.pid}

    payload = in_forked_child(call)
    assert payload.get("stdout") == "from the child\n", payload
    assert payload["server"] != parent_server
    assert server_pid() == parent_server and run_python("print(1)").ok


def test_allowed_packages_are_importable_and_others_are_not():
    code = "import yaml; print(yaml.safe_load('a: 1'))"
    allowed = run(code, packages=("yaml", "_yaml"))
    assert allowed.ok, allowed.stderr
    assert allowed.stdout == "{'a': 1}\n"
    refused = run(code)
    assert "ModuleNotFoundError: No module named 'yaml'" in refused.stderr
    with pytest.raises(SandboxError, match="package 'no_such_package' is not installed"):
        run("print(1)", packages=("no_such_package",))
