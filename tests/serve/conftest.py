"""Session-end check: no server process that this test session launched is still alive."""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # Session fixtures (tiny_server, smol_server) are torn down before this hook runs.
    from rlvr.serve import servers_started_by

    left = servers_started_by(os.getpid())
    if left:
        session.config.get_terminal_writer().line(
            f"rlvr serve processes outlived the test session (pids {left}): launch() must stop its process group",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
