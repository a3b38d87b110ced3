"""Helpers shared by the sandbox tests: looking at the host's processes from outside the sandbox, and running a
caller in a forked child."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def _processes_of(uid: int) -> list[int]:
    """Live pids running as `uid` (from /proc). Zombies are left out: they are dead, and once their killed
    parent is gone the machine's init reaps them on its own schedule."""
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we looked
        alive = fields["State"].split()[0] not in {"Z", "X"}
        if alive and int(fields["Uid"].split()[0]) == uid:
            pids.append(int(status.parent.name))
    return pids


@pytest.fixture
def processes_of() -> Callable[[int], list[int]]:
    return _processes_of


def _in_forked_child(work: Callable[[], dict]) -> dict:
    """`work()` run in a forked child (a new caller of the sandbox); its JSON-able result, or {"error": repr}."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - reported through the pipe
        try:
            payload = work()
        except BaseException as exc:  # noqa: BLE001
            payload = {"error": repr(exc)}
        os.write(write_end, json.dumps(payload).encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end) as pipe:
        return json.loads(pipe.read())


@pytest.fixture
def in_forked_child() -> Callable[[Callable[[], dict]], dict]:
    return _in_forked_child


@pytest.fixture(autouse=True)
def fresh_restart_budget(monkeypatch):
    """Each test starts with the sandbox's whole restart budget (5 within 60 s): some kill the server on purpose."""
    from rlvr.restarts import RestartBudget
    from rlvr.sandbox import core

    budget = RestartBudget("rlvr.sandbox: the sandbox server", limit=5, window_s=60.0)
    monkeypatch.setattr(core, "RESTARTS", budget)
    return budget
