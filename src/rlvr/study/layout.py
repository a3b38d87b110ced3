"""Where a study keeps what: one directory, one manifest, one folder per cell, a completion marker per unit.

    study.json                    manifest: command(s), settings, versions, wall time per cell
    base/seed-S/eval/             the base model's held-out evaluation for seed S (vf-eval layout + summary.json)
    base/seed-S/done.json         its completion marker (wall time)
    cells/ALGO/seed-S/train/      the cell's training run (rlvr train's run directory: metrics.jsonl, final/, ...)
    cells/ALGO/seed-S/eval/       the held-out evaluation of its final weights
    .../eval-NAME/                the same weights on held-out set NAME ([evaluation.sets]; base/ and cells/)
    cells/ALGO/seed-S/curve/step-N/ the held-out learning curve ([evaluation] at_steps): weights/ (step N's
                                  model.safetensors, linked from its checkpoint; deleted with the checkpoints) and
                                  eval/ (its held-out evaluation, written atomically: a point with eval/ is done)
    cells/ALGO/seed-S/done.json   completion marker (wall times, resume point, tokens): a cell without it is rerun,
                                  resuming its training from the newest checkpoint-N/
    cells/ALGO/seed-S/failed.json the error of a cell that failed (the study went on with the others); the next
                                  invocation retries the cell and removes it once the cell finishes
    cells/ALGO/seed-S/replicate-K/  the K-th re-run of the cell with the same seed (K >= 1; `replicates`), laid out
                                  like the cell (train/, eval/, done.json)
    report.md, summary.json, plots/*.png
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MANIFEST = "study.json"
DONE = "done.json"
FAILED = "failed.json"
RESULTS_MANIFEST = "results.json"  # a study's committed records (rlvr.study.records), reported like a study


def is_study(directory: Path) -> bool:
    """A study directory, or a results directory of committed records."""
    return any((Path(directory) / name).is_file() for name in (MANIFEST, RESULTS_MANIFEST))


@dataclass(frozen=True)
class StudyLayout:
    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    def base(self, seed: int) -> Path:
        return self.root / "base" / f"seed-{seed}"

    def cell(self, algo: str, seed: int, replicate: int = 0) -> Path:
        """Replicate 0 is the cell itself; replicate K >= 1 its K-th same-seed re-run, in a folder of its own."""
        cell = self.root / "cells" / algo / f"seed-{seed}"
        return cell / f"replicate-{replicate}" if replicate else cell

    @staticmethod
    def train(unit: Path) -> Path:
        return unit / "train"

    @staticmethod
    def eval(unit: Path) -> Path:
        return unit / "eval"

    @staticmethod
    def eval_set(unit: Path, name: str) -> Path:
        """The evaluation of the same weights on held-out set `name` ([evaluation.sets])."""
        return unit / f"eval-{name}"

    @staticmethod
    def curve(unit: Path) -> Path:
        """The held-out learning curve's points of a cell ([evaluation] at_steps)."""
        return unit / "curve"

    @classmethod
    def curve_point(cls, unit: Path, step: int) -> Path:
        """Step `step`'s point: weights/ and eval/ (`eval` of the point)."""
        return cls.curve(unit) / f"step-{step}"

    @staticmethod
    def curve_weights(point: Path) -> Path:
        return point / "weights"

    @staticmethod
    def done(unit: Path) -> Path:
        return unit / DONE

    @staticmethod
    def failed(unit: Path) -> Path:
        return unit / FAILED

    def failed_units(self) -> list[Path]:
        """The cells and re-runs whose last attempt failed: a failure record and no completion marker."""
        return sorted(p.parent for p in self.root.glob(f"cells/*/seed-*/**/{FAILED}")
                      if not (p.parent / DONE).is_file())

    def finished_cells(self) -> list[tuple[str, int]]:
        """(algo, seed) of every cell with a completion marker, whatever grid asked for it."""
        return sorted((p.parent.parent.name, int(p.parent.name.removeprefix("seed-")))
                      for p in self.root.glob(f"cells/*/seed-*/{DONE}"))

    def finished_replicates(self) -> list[tuple[str, int, int]]:
        """(algo, seed, K) of every same-seed re-run (K >= 1) with a completion marker."""
        return sorted((p.parent.parent.parent.name, int(p.parent.parent.name.removeprefix("seed-")),
                       int(p.parent.name.removeprefix("replicate-")))
                      for p in self.root.glob(f"cells/*/seed-*/replicate-*/{DONE}"))

    def finished_bases(self) -> list[int]:
        return sorted(int(p.parent.name.removeprefix("seed-")) for p in self.root.glob(f"base/seed-*/{DONE}"))
