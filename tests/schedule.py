"""How `make test` spreads the suite over its pytest-xdist workers (docs/testing.md, "The parallel layout").

A unit of work is a module, or the modules that share a session server or run (that one starts once per run). A
unit is heavy when one of its tests starts a vLLM server or a training run (marker `slow`). Lanes: the first
`server_workers` workers take any unit; the others only light units, which keep the cores busy while the server
workers wait on their processes, without a server's memory (each worker that runs heavy units keeps its own session
servers: ~3 GB). Units go out longest first by the seconds each module took in the last full run (`MEASURED`;
`make test-durations` refreshes it), so that the last to run are short and the workers finish together
(longest-processing-time-first, Graham 1969).

The units reach xdist's scheduler (in the controller, which collects nothing) through a file: each worker writes
the units of its collection into $RLVR_TEST_UNITS_DIR, which the controller creates before the workers start.
xdist's own `--dist loadgroup` groups by a suffix it writes into the test ids, which pytest 9.2's structured ids
ignore: the groups silently fall apart (pytest-xdist issue #1386).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

MEASURED = Path(__file__).with_name("module_seconds.json")
# A module not in MEASURED yet (new since the last refresh): with slow tests it counts like a typical slow module.
UNMEASURED_SECONDS = {True: 60.0, False: 1.0}
UNITS_DIR_ENV = "RLVR_TEST_UNITS_DIR"


def measured_seconds(path: Path = MEASURED) -> dict[str, float]:
    """Module path -> seconds (setup + call + teardown, summed) in the last full `make test`; {} without the file."""
    return json.loads(path.read_text()) if path.is_file() else {}


def unit_seconds(modules_of: Mapping[str, Iterable[str]], slow_modules: set[str],
                 measured: Mapping[str, float]) -> dict[str, float]:
    """Unit -> its estimated seconds: its modules' measured seconds, UNMEASURED_SECONDS for those not measured."""
    return {unit: sum(measured.get(module, UNMEASURED_SECONDS[module in slow_modules]) for module in modules)
            for unit, modules in modules_of.items()}


def longest_first(seconds: Mapping[str, float]) -> list[str]:
    """The units in the order they go out: longest first, ties by name (the same order in every worker)."""
    return sorted(seconds, key=lambda unit: (-seconds[unit], unit))


def next_unit(queue: Iterable[str], heavy: set[str], *, light_only: bool) -> str | None:
    """The unit a worker takes next from the queue (units in order): the first one, or for a light lane the first
    light one; None when it has nothing left to take."""
    return next((unit for unit in queue if not (light_only and unit in heavy)), None)


# ------------------------------------------------------------------------------ from the workers to the controller
def prepare_units_dir(config) -> None:
    """In the controller, before the workers start (they inherit the environment); removed when the run ends."""
    if UNITS_DIR_ENV not in os.environ:
        os.environ[UNITS_DIR_ENV] = tempfile.mkdtemp(prefix="rlvr-test-units-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(UNITS_DIR_ENV), ignore_errors=True))


def publish_units(unit_of: Mapping[str, str], heavy: set[str]) -> None:
    """In a worker, after its collection: test id -> unit, and the heavy units. Every worker collects the same
    tests, so each writes the same content (its own file, written whole before it is renamed into place)."""
    directory = Path(os.environ[UNITS_DIR_ENV])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    partial = directory / f".{worker}.json.partial"
    partial.write_text(json.dumps({"unit_of": dict(unit_of), "heavy": sorted(heavy)}))
    partial.replace(directory / f"{worker}.json")


def read_units() -> tuple[dict[str, str], set[str]]:
    """In the controller, once every worker has collected: what the first worker published."""
    directory = Path(os.environ[UNITS_DIR_ENV])
    published = sorted(directory.glob("*.json"))
    if not published:
        raise RuntimeError(f"no worker published its units in {directory}: the suite's conftest.py must call "
                           "tests.schedule.publish_units in pytest_collection_modifyitems")
    record = json.loads(published[0].read_text())
    return record["unit_of"], set(record["heavy"])


def lanes_scheduler(config, log, *, server_workers: int):
    """pytest-xdist's scope scheduling over the published units, taken in collection order (the order conftest.py
    gives), with light lanes: workers gw{server_workers} and after take only light units, and stop when none is
    left."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitsAndLanes(LoadScopeScheduling):
        unit_of: dict[str, str] | None = None
        heavy: set[str] = set()

        def _split_scope(self, nodeid: str) -> str:
            if self.unit_of is None:  # called first once every worker has collected (xdist's schedule())
                self.unit_of, self.heavy = read_units()
            return self.unit_of[nodeid]

        def _assign_work_unit(self, node) -> None:
            light_only = int(node.gateway.id.removeprefix("gw")) >= server_workers
            unit = next_unit(self.workqueue, self.heavy, light_only=light_only)
            if unit is None:  # a light lane with no light unit left: the server workers finish the rest
                node.shutdown()
                return
            self.workqueue.move_to_end(unit, last=False)  # xdist's own assignment takes the queue's first unit
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # xdist would put the units with the most tests first
    return UnitsAndLanes(config, log)
