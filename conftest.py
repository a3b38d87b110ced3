"""Fixtures shared by the core tests (tests/) and every environment package's tests (environments/*/tests)."""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.budget import area_of, budget_shares

REPO_ROOT = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------- parallel workers (xdist)
# `make test` runs the suite in pytest-xdist workers (docs/testing.md). Each worker is its own pytest session: its own
# session servers, tmp_path root and fixtures; ports are picked free by the kernel (port 0), caches shared across
# workers are filled under a lock (rlvr.io.exclusive). What a worker's environment needs besides, set before
# anything imports torch: its share of the cores, for the vLLM engines it starts (vLLM's default binds every engine
# to the same core) and for torch's threads (on a busy 2-core machine one thread was 10x faster than two: the note
# in rlvr/suite/offline.py).
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... inside `pytest -n N`


def worker_cores(worker: str, workers: int, cores: list[int]) -> list[int]:
    """Worker `gwI`'s slice of the cores: an equal share each, at least one core."""
    index = int(worker.removeprefix("gw"))
    share = max(1, len(cores) // workers)
    start = (index * share) % len(cores)
    return cores[start:start + share]


if WORKER is not None:
    _cores = worker_cores(WORKER, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
                          sorted(os.sched_getaffinity(0)))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, _cores)))
    os.environ.setdefault("OMP_NUM_THREADS", str(len(_cores)))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The public data samples (`../shared/data` beside the repo, or $RLVR_SHARED_DATA). Missing = failure."""
    path = Path(os.environ.get("RLVR_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not (path / "README.md").is_file():
        pytest.fail(
            f"public data samples not found at {path}: put the shared/ folder beside the repository "
            "or set RLVR_SHARED_DATA to its data/ folder",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from rlvr import models

    return models.prepare("tiny-random")


@pytest.fixture(scope="session")
def smol_model() -> Path:
    from rlvr import models

    return models.prepare("smollm2-135m")


# Every server the suite starts (the session servers, a module's own, one that `rlvr train` or a study starts in a
# subprocess) gets a 0.5 GiB KV cache instead of rlvr serve's 2 GiB default: that holds far more than the tests'
# short sequences (tiny-random: ~1M tokens, SmolLM2: ~23k, above its 8,192-token context), and two workers' servers
# at 2 GiB each brought a 24 GB machine into kernel reclaim. Their start-up may wait 10 min: 45 s on an idle
# machine, but 5 min was seen to pass before the first log line on one loaded by other work.
os.environ.setdefault("RLVR_KV_CACHE_GB", "0.5")
# And runs the model inline, in vLLM's engine-core process (`rlvr serve --cpu-engine inline`), not in a worker process
# the engine core polls: on this 2-core machine, with another job beside it, a tiny-random server started on ~25 s of
# CPU instead of ~35 and generated 2,048 tokens on 1.7 s of CPU instead of 6 (the engine core's polling), with the
# same tokens and logprobs (docs/testing.md). The layout the product defaults to, vLLM's own, is kept where it is
# what a test checks: tests/serve/test_process_tree.py (and the inline one beside it), test_weight_sync.py.
os.environ.setdefault("RLVR_CPU_ENGINE", "inline")
# DeepSpeed's CPU op, built by scripts/setup.sh into this venv's extension cache (the ZeRO tests load it from there;
# in the machine-wide default cache another clone's build replaced it and the next run compiled it again, ~1 min).
if sys.prefix != sys.base_prefix:  # in a venv (make gpu-check may run a system Python whose prefix is read-only)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
# A run waiting for its --server (the fault and two-machine tests kill it and start it again) checks its health at
# least every second instead of after 5, 10, 20, 40 s: the doubling pause found a restarted server up to 40 s late
# (rlvr.trainer.faults; the product's default, no cap, is tested in tests/faults/test_faults.py).
os.environ.setdefault("RLVR_SERVER_WAIT_MAX_PAUSE_S", "1")
SESSION_SERVER_TIMEOUT_S = 600


class SessionServer:
    """A session server, started when a test first reads it and stopped after the last test of its unit of work
    that asks for it (`pytest_runtest_teardown`): the unit's tests run one after another in one process (the order
    of `share_session_servers`), so the server starts once, and a worker does not keep it while it runs other units. Reads
    of a running server's fields (`url`, `base_url`, `model`, `port`, `exit_code()`, ...) go to `rlvr.serve.Server`.
    """

    def __init__(self, model: str, *extra_args: str):
        self._model, self._extra_args = model, extra_args
        self._context = self._server = None

    def __getattr__(self, name: str):  # only for names this object does not have itself
        if self._server is None:
            from rlvr.serve import launch

            self._context = launch(model=self._model, extra_args=list(self._extra_args),
                                   timeout=SESSION_SERVER_TIMEOUT_S)
            self._server = self._context.__enter__()
        return getattr(self._server, name)

    def stop(self) -> None:
        if self._context is not None:
            context, self._context, self._server = self._context, None, None
            context.__exit__(None, None, None)


# One per process; the training server is not among them: it is used by most slow modules, so it lives for the
# whole session (a restart costs more than its memory).
SESSION_SERVERS = {
    "tiny_server": SessionServer("tiny-random"),
    "smol_server": SessionServer("smollm2-135m"),
}


@pytest.fixture(scope="session")
def tiny_server(tiny_model):
    """One `rlvr serve` of tiny-random, shared by the tests of a session. Never change its weights."""
    yield SESSION_SERVERS["tiny_server"]
    SESSION_SERVERS["tiny_server"].stop()


@pytest.fixture(scope="session")
def smol_server(smol_model):
    """One `rlvr serve` of SmolLM2-135M, shared by the tests of a session. Never change its weights."""
    yield SESSION_SERVERS["smol_server"]
    SESSION_SERVERS["smol_server"].stop()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Stop a session server after the last test of its unit of work that uses it (`share_session_servers` marks
    it), or when this process leaves the unit (under xdist, `nextitem` is the next test this worker was given).
    A unit's tests run in order in one process, so each session server starts once per unit in between."""
    leaving = nextitem is None or nextitem.stash.get(UNIT_KEY, None) != item.stash.get(UNIT_KEY, None)
    for name, server in SESSION_SERVERS.items():
        if leaving or name in item.stash.get(LAST_USE_KEY, ()):
            server.stop()


def uses(item, fixture: str) -> bool:
    """Whether a test uses the fixture, by name or as the parameter of one (`request.getfixturevalue(param)`)."""
    callspec = getattr(item, "callspec", None)
    return fixture in item.fixturenames or (callspec is not None and fixture in callspec.params.values())


@pytest.fixture(scope="session")
def training_server(tiny_model):
    """One fp32 `rlvr serve` of tiny-random that training runs share (the trainer tests', the CLI's, the environments',
    rlvr view's): a run pushes its weights before its first batch, so what an earlier run left there does not matter,
    and the shared servers above keep theirs. fp32 like the trainer on CPU (vLLM's CPU default is bf16), so that
    the server's logprobs can be compared with the trainer's to float32 rounding. With vLLM's token-in route
    (`--enable-scale-out`, which adds routes and changes nothing else) for the verifiers v1 bridge's runs."""
    from rlvr.serve import launch
    from rlvr.v1.bridge import SERVE_FLAGS

    with launch(model="tiny-random", extra_args=["--dtype", "float32", *SERVE_FLAGS],
                timeout=SESSION_SERVER_TIMEOUT_S) as server:
        yield server


@pytest.fixture(scope="session")
def mt_grpo_run(training_server, tmp_path_factory) -> Path:
    """One real run for the tests that read a run directory (the token log's, rlvr view's; read only): the trainer
    tests' script (tests/trainer/train_script.py), 2 MT-GRPO steps of tiny-random on `training_server`."""
    import subprocess
    import sys

    run_dir = tmp_path_factory.mktemp("mt_grpo") / "run"
    result = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "trainer" / "train_script.py"), "--server",
                             training_server.url, "--run-dir", str(run_dir), "--algo", "mt_grpo", "--steps", "2"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="session")
def vf_install():
    """Run verifiers' own `vf-install ENV -p environments` (it runs `uv pip install -e`; uv is in this venv)."""
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent

    def install(env_id: str) -> None:
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix}
        proc = subprocess.run(
            [str(bin_dir / "vf-install"), env_id, "-p", "environments"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    return install


@pytest.fixture(scope="session")
def vf_eval():
    """Run verifiers' own `vf-eval` CLI against a server; returns (metadata, rows) of the results it saved."""
    import json
    import subprocess
    import sys

    def run(env_id: str, server, workdir: Path, *, num_examples: int, rollouts: int, env_args=None,
            max_tokens: int = 48) -> tuple[dict, list[dict]]:
        command = [
            str(Path(sys.executable).parent / "vf-eval"), env_id, "-m", server.model, "-b", server.base_url,
            "-n", str(num_examples), "-r", str(rollouts), "-t", str(max_tokens), "-a", json.dumps(env_args or {}), "-s",
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PRIME_API_KEY": "unused"}
        proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        # vf-eval saves under ./outputs/evals/<env>--<model>/<run id>/ when run outside the repository
        (run_dir,) = (workdir / "outputs" / "evals" / f"{env_id}--{server.model}").iterdir()
        rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
        metadata = json.loads((run_dir / "metadata.json").read_text())
        assert metadata["num_examples"] == num_examples and metadata["rollouts_per_example"] == rollouts
        assert len(rows) == num_examples * rollouts and len({r["example_id"] for r in rows}) == num_examples
        return metadata, rows

    return run


# Fixtures that start a vLLM server (a minute or more each on CPU): a test that uses one is slow, and must say so,
# so that `make test-fast` (-m "not slow") never starts a server. Slow modules mark themselves with
# `pytestmark = pytest.mark.slow`.
SERVER_FIXTURES = frozenset({"tiny_server", "smol_server", "training_server"})


# End-to-end runs of a whole benchmark pipeline (20+ minutes each on 2 cores) carry `long` (and `slow`): `make test`
# leaves them to `make test-long`, which keeps the suite's time bounded. Registered here (pyproject's list is part of
# the setup stamp).
def pytest_configure(config):
    config.addinivalue_line("markers", "long: whole pipelines end to end (20+ min) and the extra seeds of learning "
                            "checks: `make test-long`, not `make test`")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) reports; workers send reports
        config.pluginmanager.register(DirectoryTimes(), "rlvr-directory-times")
        if config.getoption("dist", "no") == "loadgroup":
            from tests.schedule import prepare_units_dir

            prepare_units_dir(config)  # before the workers start: they publish their units there


# The GPU checks (tests/gpu, marker `gpu`) run where torch sees a CUDA device (`make gpu-check`); elsewhere they are
# skipped, saying so. RLVR_GPU_CHECK_DEVICE=cpu runs them on CPU: a dry run of their logic (tests/gpu/conftest.py).
GPU_SKIP_REASON = "needs a CUDA device (make gpu-check on a GPU machine)"


def skip_gpu_tests_without_cuda(items) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or os.environ.get("RLVR_GPU_CHECK_DEVICE") == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


@pytest.hookimpl(tryfirst=True)  # the order before xdist's worker sends its collection
def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_cuda(items)
    unmarked = [item for item in items
                if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None]
    for item in unmarked:  # still kept out of the fast profile, and named so that the module gets its mark
        item.add_marker(pytest.mark.slow)
        item.warn(pytest.PytestUnknownMarkWarning(
            f"{item.nodeid} starts a vLLM server but is not marked slow: add `pytestmark = pytest.mark.slow`"))
    # in any run: the order keeps each session server's tests together (see SessionServer)
    share_session_servers(items)


# ------------------------------------------------------------------------------------------ scheduling the workers
# `make test`'s workers (tests/schedule.py): each module is one unit of work (its module fixtures start once), and
# the modules that share tiny_server (and the smol_server beside it in tests/serve) or mt_grpo_run's run are one
# unit each, so that those start once per run. The training_server's modules stay apart: together they are the
# largest share of the suite, one unit would decide the run's length alone; spread over the workers they cost one
# more server start each. Units go out longest first; workers past $RLVR_SERVER_WORKERS take light units only.
SHARED_UNITS = {"tiny_server": "tiny_server", "smol_server": "tiny_server", "mt_grpo_run": "mt_grpo_run"}
SERVER_WORKERS = int(os.environ.get("RLVR_SERVER_WORKERS", "2"))
UNIT_KEY = pytest.StashKey[str]()  # each test's unit of work
LAST_USE_KEY = pytest.StashKey[tuple]()  # the session servers whose unit's last use is this test


def share_session_servers(items) -> None:
    """Put the items in scheduling order (units longest first, stable within a unit) and, in a worker of
    `make test`, publish each test's unit for the controller's scheduler."""
    from tests.schedule import UNITS_DIR_ENV, longest_first, measured_seconds, publish_units, unit_seconds

    shared = defaultdict(set)
    slow_modules = set()
    for item in items:
        shared[item.path] |= {SHARED_UNITS[name] for name in SHARED_UNITS.keys() & set(getattr(item, "fixturenames", ()))}
        if item.get_closest_marker("slow") is not None:
            slow_modules.add(module_of(item))
    unit, modules_of = {}, defaultdict(set)
    for item in items:
        units = sorted(shared[item.path])  # mt_grpo_run before tiny_server, were a module to use both
        unit[item] = units[0] if units else module_of(item)
        modules_of[unit[item]].add(module_of(item))
    rank = {name: index for index, name in
            enumerate(longest_first(unit_seconds(modules_of, slow_modules, measured_seconds())))}
    items.sort(key=lambda item: rank[unit[item]])
    last_use = {}  # (unit, session server) -> the unit's last test that uses it, in this order
    for item in items:
        item.stash[UNIT_KEY] = unit[item]
        last_use.update({(unit[item], name): item for name in SESSION_SERVERS if uses(item, name)})
    for (_, name), item in last_use.items():
        item.stash[LAST_USE_KEY] = item.stash.get(LAST_USE_KEY, ()) + (name,)
    if UNITS_DIR_ENV in os.environ and WORKER is not None:
        heavy = {name for name, modules in modules_of.items() if modules & slow_modules}
        publish_units({item.nodeid: unit[item] for item in items}, heavy)


def module_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist (make gpu-check) has no spec for it
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.schedule import lanes_scheduler

    return lanes_scheduler(config, log, server_workers=SERVER_WORKERS)


# ------------------------------------------------------------------------------------- servers left behind
# Session fixtures stop their servers before the session ends: a server process that `launch()` started in this
# process and that is still alive then is a leak (launch() must stop its whole process group). Under xdist each
# worker checks its own and hands the pids to the controller, which fails the run.
def leftover_servers() -> list[int]:
    if "rlvr.serve.launch" not in sys.modules:  # nothing in this process could have launched one
        return []
    return sys.modules["rlvr.serve.launch"].servers_started_by(os.getpid())


LEFTOVER_KEY = pytest.StashKey[list]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    left = leftover_servers() + config.stash.get(LEFTOVER_KEY, [])
    if hasattr(config, "workerinput"):
        config.workeroutput["leftover_servers"] = left  # sent to the controller after this hook
        return
    if left:
        config.get_terminal_writer().line(
            f"rlvr serve processes outlived the test session (pids {left}): launch() must stop its process group",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """In the xdist controller: a worker's leftover servers (see pytest_sessionfinish)."""
    output = getattr(node, "workeroutput", {})  # a worker that crashed sent none
    node.config.stash.setdefault(LEFTOVER_KEY, []).extend(output.get("leftover_servers", []))


# ------------------------------------------------------------------------------------- time per test directory
# Every run ends with the time each area of the suite took (setup + call + teardown of its tests, summed over the
# workers; a session server's start counts to the first test that uses it) and its share of the whole, against the
# share docs/testing.md gives the area. Over budget is reported, not failed: machines of this class differ 2x in
# speed, so a timing is a number to read (the charter), never an assertion. The table's parsing: tests/budget.py.


class DirectoryTimes:
    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.modules: dict[str, float] = defaultdict(float)
        self.worker_done: dict[str, float] = {}  # worker -> minutes into the run of its last report
        self.start = time.monotonic()
        self.machine = MachineLoad()

    def pytest_runtest_logreport(self, report):  # in the xdist controller too: the workers' reports
        area = area_of(report.nodeid)
        self.seconds[area] += report.duration
        self.tests[area] += report.when == "setup"
        self.modules[report.nodeid.split("::", 1)[0]] += report.duration
        node = getattr(report, "node", None)  # set by xdist's controller on a worker's report
        self.worker_done[node.gateway.id if node is not None else "main"] = (time.monotonic() - self.start) / 60

    def pytest_terminal_summary(self, terminalreporter, config):
        total = sum(self.seconds.values())
        if not total:
            return
        budget = budget_shares()
        # the shares budget `make test`'s whole run: a part of the suite, or the fast profile, is only listed
        whole = config.getoption("markexpr") == "not long" and budget.keys() <= self.seconds.keys()
        write = terminalreporter.write_line
        terminalreporter.section("time per test directory")
        write(f"{'area':32} {'tests':>5} {'minutes':>8} {'share':>6} {'budget':>6}")
        for area, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
            share = 100 * seconds / total
            limit = budget.get(area)
            verdict = ("no budget: give the area a share in docs/testing.md" if limit is None
                       else "OVER BUDGET" if whole and share > limit else "")
            limit_text = "-" if limit is None else f"{limit:g}%"
            write(f"{area:32} {self.tests[area]:5d} {seconds / 60:8.1f} {share:5.1f}% {limit_text:>6} {verdict}".rstrip())
        write(f"{'all':32} {sum(self.tests.values()):5d} {total / 60:8.1f} (test time, summed over the workers); "
              f"wall {(time.monotonic() - self.start) / 60:.1f} min")
        # whether the workers finished together (the order, tests/schedule.py) and whether the cores had time left
        # (more light lanes) or memory did not (fewer server workers)
        write("workers done at: " + ", ".join(f"{worker} {minutes:.1f} min"
                                              for worker, minutes in sorted(self.worker_done.items())))
        write(self.machine.summary())
        # the order's input for the next runs: a whole run's module times, kept in pytest's cache (.pytest_cache,
        # key rlvr/module_seconds); `make test-durations` commits them to tests/module_seconds.json
        slowest = sorted(self.modules.items(), key=lambda kv: -kv[1])[:15]
        write("slowest modules: " + ", ".join(f"{module} {seconds:.0f} s" for module, seconds in slowest))
        if whole and getattr(config, "cache", None) is not None:  # absent under -p no:cacheprovider
            config.cache.set("rlvr/module_seconds",
                             {module: round(seconds, 1) for module, seconds in
                              sorted(self.modules.items(), key=lambda kv: -kv[1])})


class MachineLoad:
    """The whole machine's CPU use (/proc/stat) and peak memory in use (/proc/meminfo, sampled every 2 s) over the
    run: other work on the machine counts too, which is the point (a run beside a long job is not a measurement)."""

    def __init__(self):
        import threading

        self.cpu_start = self.cpu_times()
        self.peak_gb = 0.0
        self.total_gb = self.meminfo()["MemTotal"] / 2**20
        threading.Thread(target=self.sample, daemon=True).start()

    @staticmethod
    def cpu_times() -> tuple[int, int]:
        """(busy, all) jiffies since boot: idle and iowait are not busy."""
        fields = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)

    @staticmethod
    def meminfo() -> dict[str, int]:
        """/proc/meminfo in KiB."""
        return {line.split(":")[0]: int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()}

    def sample(self) -> None:
        while True:
            info = self.meminfo()
            self.peak_gb = max(self.peak_gb, (info["MemTotal"] - info["MemAvailable"]) / 2**20)
            time.sleep(2)

    def summary(self) -> str:
        busy, whole = (end - start for end, start in zip(self.cpu_times(), self.cpu_start, strict=True))
        return (f"machine: CPUs busy {100 * busy / max(whole, 1):.0f}% of the run ({os.cpu_count()} cores), "
                f"memory in use at most {self.peak_gb:.1f} of {self.total_gb:.1f} GB")

