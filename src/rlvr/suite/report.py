"""The suite's outputs: results.json (every cell with its intervals), report.md (tables, the "which credit for which
problem" summary, the critic-target comparison) and one PNG of learning curves per task."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers
import matplotlib.pyplot as plt  # noqa: E402

from rlvr.io import atomic_write_json, atomic_write_text  # noqa: E402
from rlvr.suite.grid import Cell, task_record  # noqa: E402
from rlvr.suite.metrics import Z95, Interval  # noqa: E402
from rlvr.suite.tabular import GAE_PREFIX, Settings  # noqa: E402

# (original targets, turn-consistent targets) compared in the report (issue 28, item 5)
TARGET_PAIRS = (
    ("ppo/bi_level", "ppo/bi_level:returns=turn_gae"),
    ("ppo/bi_level:returns=monte_carlo", "ppo/bi_level:returns=turn_monte_carlo"),
    ("ppo/cross_level:turn_weight=0.5", "ppo/cross_level:turn_weight=0.5,returns=turn_gae"),
)


def write(out: Path, cells: Sequence[Cell], settings: Settings, command: str, seconds: float) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = list(dict.fromkeys(c.task for c in cells))
    records = {t: task_record(t) for t in tasks}
    atomic_write_json(out / "results.json", {
        "command": command, "settings": asdict(settings), "seconds": round(seconds, 1), "tasks": records,
        "cells": [c.to_json() for c in cells],
    })
    for task in tasks:
        plot(out / f"curves_{task}.png", task, [c for c in cells if c.task == task])
    return atomic_write_text(out / "report.md", markdown(cells, records, settings, command, seconds))


def _family(c: Cell) -> str:
    return "offline" if c.offline else "gae" if c.method.startswith(GAE_PREFIX) else "group"


PANELS = {"group": ("group estimators", "update"), "gae": ("PPO GAE modes (tabular critic)", "update"),
          "offline": ("OREO from a fixed dataset", "gradient step")}


def plot(path: Path, task: str, cells: Sequence[Cell]) -> None:
    families = [f for f in PANELS if any(_family(c) == f for c in cells)]
    fig, axes = plt.subplots(1, len(families), figsize=(6.5 * len(families), 4.5), sharey=True, squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        for c in cells:
            if _family(c) == family:
                ax.plot(range(len(c.curve)), c.curve, label=c.method, lw=1.2)
        ax.axhline(0.9, color="grey", ls=":", lw=0.8)
        ax.set_xlabel(PANELS[family][1])
        ax.set_title(f"{task}: {PANELS[family][0]}")
        ax.legend(fontsize=6.5, loc="lower right")
    axes[0][0].set_ylabel("expected outcome / optimum (mean over seeds)")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def _iv(i: Interval, digits: int = 3) -> str:
    return f"{i.value:.{digits}f} [{i.low:.{digits}f}, {i.high:.{digits}f}]"


def _updates(i: Interval, updates: int) -> str:
    def one(x: float) -> str:
        return f"> {updates}" if math.isinf(x) else f"{x:.0f}"
    return f"{one(i.value)} [{one(i.low)}, {one(i.high)}]"


def _se(i: Interval) -> float:
    return (i.high - i.low) / (2 * Z95)


def best_and_worst(cells: Sequence[Cell]) -> tuple[list[Cell], list[Cell]]:
    """By area under the learning curve: the best cell and every cell whose interval overlaps it; the same for the
    worst."""
    ranked = sorted(cells, key=lambda c: c.auc.value, reverse=True)
    top, bottom = ranked[0], ranked[-1]
    return ([c for c in ranked if c.auc.high >= top.auc.low],
            [c for c in ranked if c.auc.low <= bottom.auc.high])


def markdown(cells: Sequence[Cell], records: dict, settings: Settings, command: str, seconds: float) -> str:
    tasks = list(records)
    n = cells[0].seeds
    offline = [c for c in cells if c.offline]
    cells = [c for c in cells if not c.offline]
    lines = [
        "# Credit-assignment suite: tabular tier", "",
        f"Made by `{command}` in {seconds / 60:.1f} min. {n} independent seeds per cell; {settings.updates} updates "
        f"of a group of {settings.group_size} episodes each; table step size {settings.lr}, critic step size "
        f"{settings.critic_lr}; base seed {settings.seed}. Every interval is 95%: means with the normal interval "
        "(bounded values, hundreds of seeds), the median with the order-statistic interval, proportions with "
        "Wilson's (rlvr/suite/metrics.py says why). The expected outcome is computed exactly from each run's table.",
        "",
        "Columns: **AUC** = mean fraction of the optimal expected outcome over the updates (area under the learning "
        "curve: speed and level in one number); **final** = the fraction after the last update; **to 90%** = "
        "median updates until 90% of the optimum; **solved** = runs that reached 90%; **collapse** = runs whose "
        "policy puts >= 0.99 on a sub-optimal action in a (state, turn) it reaches with probability >= 0.01; "
        "**total** = expected turn rewards + outcome at the end (what a summed reward maximises).", "",
        "| task | phenomenon | turns | optimal outcome | optimal turn rewards + outcome |", "|---|---|---|---|---|",
    ]
    lines += [f"| {t} | {r['phenomenon']} | {r['turns']} | {r['optimum']:.3f} | {r['optimum_total']:.3f} |"
              for t, r in records.items()]
    if cells:
        lines += ["", "## Which credit for which problem", "",
                  "Best: the highest AUC and every method whose AUC interval overlaps it; worst: the same from the "
                  "bottom.", "", "| task | best (AUC) | worst (AUC) |", "|---|---|---|"]
    for t in (t for t in tasks if any(c.task == t for c in cells)):
        best, worst = best_and_worst([c for c in cells if c.task == t])
        fmt = ", ".join
        lines.append(f"| {t} | {fmt(f'{c.method} {c.auc.value:.3f}' for c in best)} | "
                     f"{fmt(f'{c.method} {c.auc.value:.3f}' for c in worst)} |")
    pairs = [(a, b) for a, b in TARGET_PAIRS if any(c.method == a for c in cells) and any(c.method == b
                                                                                           for c in cells)]
    if pairs:
        lines += ["", "## Critic targets: original against turn-consistent (issue 28, item 5)", "",
                  "AUC of each; the difference (consistent - original) with a 95% normal interval for two independent "
                  "sets of seeds, sqrt(se1^2 + se2^2).", "",
                  "| task | original | turn-consistent | AUC original | AUC consistent | difference |",
                  "|---|---|---|---|---|---|"]
        for t in tasks:
            by = {c.method: c for c in cells if c.task == t}
            for a, b in pairs:
                d = by[b].auc.value - by[a].auc.value
                half = Z95 * math.hypot(_se(by[a].auc), _se(by[b].auc))
                lines.append(f"| {t} | {a} | {b} | {_iv(by[a].auc)} | {_iv(by[b].auc)} | "
                             f"{d:+.3f} [{d - half:+.3f}, {d + half:+.3f}] |")
    if offline:
        lines += ["", "## Offline: OREO from a fixed dataset", "", OFFLINE_PROTOCOL.format(
            episodes=settings.updates * settings.group_size), "",
            "| task | method | AUC (steps) | final | to 90% (steps) | solved | collapse | on-policy best final |",
            "|---|---|---|---|---|---|---|---|"]
        for t in tasks:
            online = [c for c in cells if c.task == t]
            best = max(online, key=lambda c: c.final.value) if online else None
            for c in (c for c in offline if c.task == t):
                lines.append(f"| {t} | {c.method} | {_iv(c.auc)} | {_iv(c.final)} | "
                             f"{_updates(c.reach90, len(c.curve) - 1)} | {_iv(c.solved, 2)} | {_iv(c.collapse, 2)} | "
                             f"{f'{best.method} {_iv(best.final)}' if best else '-'} |")
    for t in (t for t in tasks if any(c.task == t for c in cells)):
        lines += ["", f"## {t}", "", f"{records[t]['phenomenon']}. ![learning curves](curves_{t}.png)", "",
                  "| method | AUC | final | to 90% | solved | collapse | total | s |", "|---|---|---|---|---|---|---|---|"]
        for c in (c for c in cells if c.task == t):
            lines.append(f"| {c.method} | {_iv(c.auc)} | {_iv(c.final)} | {_updates(c.reach90, settings.updates)} | "
                         f"{_iv(c.solved, 2)} | {_iv(c.collapse, 2)} | {c.total.value:.3f} | {c.seconds:.1f} |")
    return "\n".join(lines) + "\n"


OFFLINE_PROTOCOL = (
    "OREO (arXiv 2412.16145) through rlvr.offline.losses on a softmax table and a value table (rlvr/suite/offline.py "
    "has the protocol): each run collects {episodes} episodes once (the episodes an on-policy run samples in all) "
    "with a behaviour policy, `uniform` or `mixed` (each turn an optimal action with probability 0.5, else a uniform "
    "one), then takes full-batch Adam steps on OREO's value loss (Eq. 8) + policy loss (Eq. 9) + 0.01 x exact KL, "
    "beta 0.03 (the defaults; a method label names what differs), R = the outcome (turn rewards unused). The curve's x-axis is gradient steps on that fixed dataset, "
    "so AUC and 'to 90%' are in steps, not on-policy updates. Ways of acting: the table sampled (default), its most "
    "likely action (`select=greedy`), or value-guided (`select=value`: the action with the highest learnt value "
    "after it). The last column is the on-policy cell with the highest final fraction, for scale.")
