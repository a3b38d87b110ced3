"""`rlvr.serve.launch.descendants` on real processes: every generation below a process is found, with its
environment, and nothing beside or above it (the fault tests find torchrun's ranks with it, the sandbox tests the
programs of their own sandbox server)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from rlvr.serve.launch import descendants


def test_children_and_grandchildren_with_their_environment_and_nothing_beside_them():
    # sh starts a sleeping grandchild, prints its pid and waits for it; a second sleep is a sibling, not below sh
    parent = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "RLVR_TEST_MARK": "below"})
    sibling = subprocess.Popen(["sleep", "60"])
    grandchild = int(parent.stdout.readline())
    try:
        below = descendants(parent.pid)
        assert set(below) == {grandchild}
        assert b"RLVR_TEST_MARK=below" in below[grandchild]
        mine = descendants(os.getpid())
        assert {parent.pid, grandchild, sibling.pid} <= set(mine)
        assert os.getpid() not in mine
    finally:
        for proc in (parent, sibling):
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)
