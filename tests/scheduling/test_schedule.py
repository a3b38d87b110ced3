"""The suite's schedule over pytest-xdist workers (tests/schedule.py): units longest first, light lanes."""

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.schedule import UNITS_DIR_ENV, longest_first, measured_seconds, next_unit, unit_seconds


def test_a_unit_counts_its_modules_measured_seconds_and_a_default_for_new_ones():
    modules_of = {"tiny_server": ["a.py", "b.py"], "c.py": ["c.py"], "new_slow.py": ["new_slow.py"],
                  "new_fast.py": ["new_fast.py"]}
    seconds = unit_seconds(modules_of, slow_modules={"a.py", "b.py", "new_slow.py"},
                           measured={"a.py": 100.0, "b.py": 20.5, "c.py": 3.0})
    assert seconds == {"tiny_server": 120.5, "c.py": 3.0, "new_slow.py": 60.0, "new_fast.py": 1.0}
    assert longest_first(seconds) == ["tiny_server", "new_slow.py", "c.py", "new_fast.py"]


def test_ties_go_by_name_so_every_worker_orders_alike():
    assert longest_first({"b": 5.0, "a": 5.0, "c": 9.0}) == ["c", "a", "b"]


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.floats(0, 1e4), max_size=20))
def test_longest_first_is_a_descending_permutation(seconds):
    order = longest_first(seconds)
    assert sorted(order) == sorted(seconds)
    assert all(seconds[a] >= seconds[b] for a, b in zip(order, order[1:], strict=False))


def test_a_server_lane_takes_the_first_unit_and_a_light_lane_the_first_light_one():
    queue, heavy = ["tiny_server", "t/b.py", "t/c.py", "t/d.py"], {"tiny_server", "t/c.py"}
    assert next_unit(queue, heavy, light_only=False) == "tiny_server"
    assert next_unit(queue, heavy, light_only=True) == "t/b.py"
    assert next_unit(["tiny_server", "t/c.py"], heavy, light_only=True) is None
    assert next_unit([], heavy, light_only=False) is None


def test_the_committed_measurement_is_module_seconds(tmp_path):
    measured = measured_seconds()
    assert measured, "tests/module_seconds.json is missing: `make test-durations` after a full `make test`"
    assert all(module.endswith(".py") and seconds >= 0 for module, seconds in measured.items())
    (tmp_path / "m.json").write_text(json.dumps({"x.py": 1.5}))
    assert measured_seconds(tmp_path / "m.json") == {"x.py": 1.5}
    assert measured_seconds(tmp_path / "absent.json") == {}


SUITE_CONFTEST = """
import os
import pytest
from tests.schedule import UNITS_DIR_ENV, lanes_scheduler, prepare_units_dir, publish_units

def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        prepare_units_dir(config)

def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # heavy_a and heavy_b share a unit (as tiny_server's modules do)
        module = {item.nodeid: item.nodeid.split("::")[0] for item in items}
        unit = {nodeid: "shared" if "heavy_a" in name or "heavy_b" in name else name for nodeid, name in module.items()}
        publish_units(unit, {name for name in unit.values() if "light" not in name})

def pytest_xdist_make_scheduler(config, log):
    return lanes_scheduler(config, log, server_workers=2)

@pytest.fixture(autouse=True)
def record_worker(request):
    with open(os.environ["WHO_RAN"], "a") as out:
        out.write(request.node.nodeid.split("::")[0] + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    yield
"""


def test_real_workers_keep_a_unit_together_and_heavy_units_off_the_light_lane(tmp_path):
    """pytest-xdist's own workers (3, two server lanes) on a small suite: one heavy unit of two modules, one heavy
    module, six light modules. Every test runs once, the shared unit on one worker, nothing heavy on gw2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(SUITE_CONFTEST)
    heavy = "import time\n" + "".join(f"def test_{i}():\n    time.sleep(0.2)\n" for i in range(3))
    light = "import time\n" + "".join(f"def test_{i}():\n    time.sleep(0.05)\n" for i in range(2))
    for name in ["heavy_a", "heavy_b", "heavy_c", *(f"light_{i}" for i in range(6))]:
        (suite / f"test_{name}.py").write_text(heavy if "heavy" in name else light)
    who_ran = tmp_path / "who_ran.txt"
    env = {name: value for name, value in os.environ.items()  # not the outer run's units or worker
           if name != UNITS_DIR_ENV and not name.startswith("PYTEST_XDIST")}
    env |= {"WHO_RAN": str(who_ran), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider",
                             "-q", "--rootdir", str(suite), str(suite)],
                            cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    runs = [line.split() for line in who_ran.read_text().splitlines()]
    assert sorted(module for module, _ in runs) == sorted(
        [f"test_heavy_{x}.py" for x in "abc" for _ in range(3)] + [f"test_light_{i}.py" for i in range(6) for _ in range(2)])
    shared = {worker for module, worker in runs if module in ("test_heavy_a.py", "test_heavy_b.py")}
    assert len(shared) == 1 and shared <= {"gw0", "gw1"}
    assert {worker for module, worker in runs if "heavy" in module} <= {"gw0", "gw1"}
    assert "gw2" in {worker for module, worker in runs if "light" in module}
