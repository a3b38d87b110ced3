"""`rlvr.serve.engine.watch_parent` on real processes: a watched process outlives the thread that started it (what
PR_SET_PDEATHSIG, used before, did not: a server restarted from a worker thread died with the thread) and dies
within a second once the process that started it is SIGKILLed (nobody cleans up), also when that happened before
the watch began (the child still importing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = "import sys, time; from rlvr.serve.engine import watch_parent; watch_parent(int(sys.argv[1])); time.sleep(120)"
# The parent starts the child from a thread that ends at once, reports the child's pid, then lives on.
PARENT = f"""
import os, subprocess, sys, threading, time
started = []
thread = threading.Thread(target=lambda: started.append(subprocess.Popen([sys.executable, "-c", {CHILD!r}, str(os.getpid())])))
thread.start()
thread.join()
print(started[0].pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_watched_process_outlives_its_starting_thread_and_dies_with_its_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        time.sleep(3)  # the starting thread has ended long ago; the parent still lives
        assert alive(child)
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30  # the watch polls every 0.5 s; generous for a loaded machine
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)
