"""Helpers shared by the sandbox tests: looking at the host's processes from outside the sandbox."""

from __future__ import annotations

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
