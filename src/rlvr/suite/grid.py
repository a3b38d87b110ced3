"""The tabular suite's grid: every (task, method) cell run over N seeds and summarised with its intervals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass

import numpy as np

from rlvr.credit import ESTIMATORS, GAE_ESTIMATORS
from rlvr.suite import metrics
from rlvr.suite.tabular import (
    GAE_PREFIX,
    OREO,
    Compiled,
    Method,
    Run,
    Settings,
    compile_task,
    parse_method,
    run,
)
from rlvr.suite.tasks import TASKS, solve

# Every registered estimator at its defaults, the `unreached="zero"` variants (policy-controlled stopping), every
# GAE mode at PPOConfig's defaults, lambda < 1 for the two modes that differ on environment tokens, and the
# turn-consistent critic targets (issue 28, item 5) next to the original ones; then OREO from a fixed dataset
# (rlvr.suite.offline), two behaviour policies x three ways of acting.
OFFLINE_METHODS: tuple[str, ...] = (
    OREO, f"{OREO}:select=greedy", f"{OREO}:select=value",
    f"{OREO}:behaviour=mixed", f"{OREO}:behaviour=mixed,select=greedy", f"{OREO}:behaviour=mixed,select=value",
)
DEFAULT_METHODS: tuple[str, ...] = (
    *ESTIMATORS,
    "mt_grpo_k:unreached=zero",
    "turn_return:unreached=zero",
    *(f"{GAE_PREFIX}{mode}" for mode in GAE_ESTIMATORS if mode != "cross_level"),
    f"{GAE_PREFIX}token:lam=0.95",
    f"{GAE_PREFIX}multi_turn:lam=0.95",
    f"{GAE_PREFIX}bi_level:returns=turn_gae",
    f"{GAE_PREFIX}bi_level:returns=monte_carlo",
    f"{GAE_PREFIX}bi_level:returns=turn_monte_carlo",
    f"{GAE_PREFIX}cross_level:turn_weight=0.5",
    f"{GAE_PREFIX}cross_level:turn_weight=0.5,returns=turn_gae",
    *OFFLINE_METHODS,
)


@dataclass(frozen=True)
class Cell:
    task: str
    method: str
    seeds: int
    auc: metrics.Interval  # mean fraction of the optimum over updates 1..U (area under the learning curve)
    final: metrics.Interval  # fraction of the optimum after the last update
    reach90: metrics.Interval  # median updates (offline: gradient steps) to 90% of the optimum (inf: not reached)
    solved: metrics.Interval  # fraction of runs that reached 90%
    collapse: metrics.Interval  # fraction of runs that collapsed
    total: metrics.Interval  # expected turn rewards + outcome at the end (what summing rewards maximises)
    seconds: float
    curve: tuple[float, ...]  # mean fraction of the optimum after each update (index 0: before training)

    @property
    def offline(self) -> bool:
        return parse_method(self.method).is_offline

    def to_json(self) -> dict:
        out = asdict(self)
        out["reach90"] = {k: (None if np.isinf(v) else v) for k, v in out["reach90"].items()}  # null: > updates
        return out


def summarize(c: Compiled, r: Run) -> Cell:
    n = r.curve.shape[0]
    reach = metrics.first_reach(r.curve, 0.9)
    solved = int(np.isfinite(reach).sum())
    return Cell(
        c.task.name, r.method, n,
        auc=metrics.mean_interval(r.curve[:, 1:].mean(1)),
        final=metrics.mean_interval(r.curve[:, -1]),
        reach90=metrics.median_interval(reach),
        solved=metrics.wilson(solved, n),
        collapse=metrics.wilson(int(r.collapsed.sum()), n),
        total=metrics.mean_interval(r.total),
        seconds=round(r.seconds, 2),
        curve=tuple(round(float(x), 5) for x in r.curve.mean(0)),
    )


def task_record(name: str) -> dict:
    task = TASKS[name]
    return {"phenomenon": task.phenomenon, "turns": task.turns, "optimum": solve(task, "outcome").value,
            "optimum_total": solve(task, "total").value, "reply_tokens": list(task.reply_tokens)}


def run_method(compiled: Compiled, method: Method, seeds: int, settings: Settings) -> Run:
    """N runs of an on-policy method (tabular.run) or of OREO from a fixed dataset (offline.run_offline)."""
    if method.is_offline:
        from rlvr.suite.offline import run_offline  # torch: only the offline cells need it

        return run_offline(compiled, method, seeds, settings)
    return run(compiled, method, seeds, settings)


def _cell(task: str, method: str, seeds: int, settings: Settings) -> Cell:
    compiled = compile_task(TASKS[task])
    return summarize(compiled, run_method(compiled, parse_method(method), seeds, settings))


def run_grid(tasks: Sequence[str], methods: Sequence[str], seeds: int, settings: Settings, jobs: int = 1,
             on_cell: Callable[[Cell], None] = lambda cell: None) -> list[Cell]:
    """Every task x method, in grid order; `jobs` worker processes run cells side by side (each cell's random
    numbers come from its own names and the base seed, so the result does not depend on `jobs`); `on_cell` sees
    each cell as it finishes (progress)."""
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; choose from {sorted(TASKS)}")
    for m in methods:  # every spec checked before the first cell runs
        parse_method(m)
    grid = [(t, m) for t in tasks for m in methods]
    if jobs <= 1:
        cells = []
        for t, m in grid:
            cells.append(_cell(t, m, seeds, settings))
            on_cell(cells[-1])
        return cells
    done: dict[tuple[str, str], Cell] = {}
    with ProcessPoolExecutor(jobs) as pool:
        futures = {pool.submit(_cell, t, m, seeds, settings): (t, m) for t, m in grid}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            on_cell(done[futures[future]])
    return [done[key] for key in grid]
