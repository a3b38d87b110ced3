"""A server started by `launch()` does not outlive its owner, even when the owner is SIGKILLed (no cleanup runs):
the server process watches its parent and terminates when it dies (rlvr.serve.engine.watch_parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rlvr.serve.launch import servers_started_by

pytestmark = pytest.mark.slow

OWNER = """
import time
from rlvr.serve import launch
with launch(model="tiny-random", extra_args=["--kv-cache-gb", "0.5"]) as server:
    print(server.url, flush=True)
    time.sleep(600)
"""


def test_server_stops_when_its_owner_is_killed(tiny_model):
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().startswith("http://"), "the owner never reported its server"
        servers = servers_started_by(owner.pid)
        assert servers, "launch() started no server process"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 60
    while any(os.path.exists(f"/proc/{pid}") for pid in servers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in servers if os.path.exists(f"/proc/{pid}")]
