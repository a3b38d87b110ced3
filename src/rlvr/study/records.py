"""Committed records: a study's finished units kept where they outlive the machine (e.g. under benchmarks/results/),
so that the same command on a fresh clone runs only the units that have none.

With `results = "DIR"` (TOML) or `--results DIR`, every base evaluation and cell writes, atomically as it finishes,

    DIR/results.json                        the study's settings (the grid of every invocation, the budget, the report)
    DIR/base/seed-S.json                    a base evaluation's record
    DIR/cells/ALGO/seed-S.json              a cell's record
    DIR/cells/ALGO/seed-S/replicate-K.json  a same-seed re-run's record
    DIR/report.md, summary.json, plots/     the report over every record (`rlvr analyze DIR` redraws it)

A record holds what the report reads of the unit (held-out summaries and per-example means, the held-out learning
curve's points, training curves and each step's batch statistics, steps, tokens, wall times), its definition (the study's budget and, for a cell, its
recipe, training options and dataset) with the definition's sha256, and its provenance (git commit, machine,
command, peak memory, the starting weights' sha256): no weights, datasets or rollouts. A unit with a record is done.
The starting weights of new units are checked against those the committed units started from (their sha256): a
study never mixes units from two starting points silently (`check_starting_weights`; `--accept-weights` to go on).
A record whose definition differs from what the current command would run is refused with the differing keys named:
cells of two budgets are never mixed. A base evaluation's record is compared on what it depends on
(`base_definition`: not the training), so a study that trains otherwise may take another's (`take_bases`).
Records of one unit never collide across machines that run disjoint cells (`rlvr study --cells`), so merging their
commits gives every record, and `rlvr analyze DIR` the report of all of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from rlvr.evaluation import Stat
from rlvr.io import atomic_write_json
from rlvr.study.layout import RESULTS_MANIFEST, StudyLayout
from rlvr.study.settings import StudyError, StudySettings
from rlvr.study.units import BaseRecord, CellRecord, read_base, read_cell


def is_results(directory: Path) -> bool:
    return (Path(directory) / RESULTS_MANIFEST).is_file()


def unit_key(layout: StudyLayout, unit: Path) -> str:
    """base/seed-S, cells/ALGO/seed-S or cells/ALGO/seed-S/replicate-K: a unit's path in the study directory."""
    return unit.relative_to(layout.root).as_posix()


def record_path(results: Path, key: str) -> Path:
    return Path(results) / f"{key}.json"


def machine() -> dict[str, Any]:
    """The CPU model (/proc/cpuinfo), the cores this process may use and the memory: what a wall time depends on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "memory_gb": memory}


def _plain(obj: Any) -> Any:
    """As it reads back from JSON (tuples are lists, keys are strings), so that definitions compare alike."""
    return json.loads(json.dumps(obj, default=str))


def definition(settings: StudySettings, algo: str | None) -> dict[str, Any]:
    """What defines a unit's result: the study's budget (env, model, env_args, training, evaluation, server dtype)
    and, for a cell, its recipe, its training options and its offline dataset. A base evaluation (algo None) has the
    budget only."""
    found = {"study": settings.comparable()}
    if algo is not None:
        found |= {"recipe": settings.recipe(algo), "training": settings.cell_training(algo),
                  "offline_dataset": settings.offline_datasets.get(algo)}
    return _plain(found)


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(_plain(obj), sort_keys=True).encode()).hexdigest()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: the keys a difference is named by."""
    if isinstance(obj, dict) and obj:
        return {k: v for key, value in obj.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): obj}


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    old, new = flatten(before), flatten(after)
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def describe_difference(path: Path, stored: dict[str, Any], current: dict[str, Any]) -> str:
    """A record's path and, indented below it, each setting that differs (`changed`)."""
    return f"{path}:\n      " + "\n      ".join(changed(stored, current))


def read_record(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise StudyError(f"record {path} cannot be read ({err}): restore it from git, or remove it to run its unit "
                         "again") from err


def record_files(results: Path) -> list[Path]:
    results = Path(results)
    return sorted([*results.glob("base/seed-*.json"), *results.glob("cells/*/seed-*.json"),
                   *results.glob("cells/*/seed-*/replicate-*.json")])


# A base evaluation depends on the model, the environment and the evaluation, not on how the cells train: its
# record holds for any study that differs from its own only here (`take_bases`, `rlvr study --bases-from`).
TRAINING_ONLY = ("training", "train_env_args")
CELLS_ONLY_EVALUATION = ("at_steps",)  # the cells' learning-curve steps: no base evaluation depends on them


def base_definition(found: dict[str, Any]) -> dict[str, Any]:
    """Of a unit's definition, what a base evaluation's result depends on: the study's budget without its
    training (nor the cells' learning-curve steps), with the evaluation's sampling resolved (where [evaluation] leaves it None, the training's:
    `StudySettings.sampling`)."""
    study = found["study"]
    training = study.get("training", {})
    evaluation = {k: v for k, v in study["evaluation"].items() if k not in CELLS_ONLY_EVALUATION}
    if evaluation.get("temperature") is None:
        evaluation["temperature"] = training.get("temperature", 1.0)
    if evaluation.get("max_tokens") is None:
        evaluation["max_tokens"] = training.get("max_tokens_per_turn", 256)
    return {"study": {**{k: v for k, v in study.items() if k not in TRAINING_ONLY}, "evaluation": evaluation}}


def check_records(settings: StudySettings, results: Path) -> None:
    """Every record in `results` was made with what this command would run: for a base evaluation the same
    evaluation (`base_definition`), for a cell the same budget and, for an algorithm of this grid, the same recipe
    and options. Raises StudyError naming each record that differs and how."""
    mismatched = []
    for path in record_files(results):
        record = read_record(path)
        algo = record.get("algo")
        stored = record["definition"]
        current = definition(settings, algo if algo in settings.algos else None)
        if algo is None:
            stored, current = base_definition(stored), base_definition(current)
        elif algo not in settings.algos:
            stored = {"study": stored["study"]}
        if digest(stored) != digest(current):
            mismatched.append(describe_difference(path, stored, current))
    if mismatched:
        raise StudyError(
            f"{len(mismatched)} committed record(s) in {results} were made with another configuration than this "
            "command's, and cells of two configurations are never mixed:\n  " + "\n  ".join(mismatched[:5])
            + (f"\n  ... and {len(mismatched) - 5} more" if len(mismatched) > 5 else "")
            + "\n  fix: run with the configuration they were made with (each record's `definition`), or give "
            "another --results directory (or remove the records to run those units again)")


def starting_weights(results: Path) -> dict[str, list[str]]:
    """{sha256: unit keys} of the weights the committed units started from (records made before the sha256 was
    kept are left out)."""
    found: dict[str, list[str]] = {}
    for path in record_files(results):
        record = read_record(path)
        sha = record.get("provenance", {}).get("model_sha256")
        if sha:
            found.setdefault(sha, []).append(record["key"])
    return found


def check_starting_weights(results: Path, model: str, sha: str | None, accept: bool = False) -> str | None:
    """A sentence on this invocation's starting weights against those of the committed units (None: no committed
    unit names its own). Units that started from other weights are never mixed silently: StudyError names them,
    unless `accept` (another CPU or library version rebuilt the start a little differently; the report then
    names both starting points)."""
    committed = starting_weights(results)
    if not committed:
        return None
    count = sum(len(keys) for keys in committed.values())
    if sha is None:
        return (f"starting weights not checked: {model} is no local safetensors checkpoint, and the {count} committed "
                "unit(s) name the sha256 of theirs")
    others = {h: keys for h, keys in committed.items() if h != sha}
    if not others:
        return f"starting weights sha256 {sha[:16]}...: the same as the {count} committed unit(s) started from"
    shown = "; ".join(f"{h[:16]}... ({len(keys)} unit(s): {', '.join(sorted(keys)[:4])}"
                      + (", ..." if len(keys) > 4 else "") + ")" for h, keys in sorted(others.items()))
    sentence = (f"the starting weights {model} (sha256 {sha[:16]}...) are not those {sum(map(len, others.values()))} "
                f"of the {count} committed unit(s) in {results} started from: {shown}")
    if accept:
        return sentence + "; accepted (--accept-weights): the report names both starting points"
    raise StudyError(
        f"{sentence}.\n  New units would be compared with units trained from other weights. Fix: rebuild the "
        "starting model by its committed command and check it (`python -m rlvr.weights check RECORD DIR` with one "
        "of those records, or the pipeline's stage record, which names the tensors that differ); if the difference "
        "is expected (another CPU or library version), run again with --accept-weights; or give another --results "
        "directory")


def take_bases(settings: StudySettings, source: Path, seeds: list[int], sha: str | None,
               write: bool = True) -> list[str]:
    """Copy into `settings.results` the base records of `seeds` that another study's results directory `source`
    holds and this study would compute alike: the same evaluation (`base_definition`) of the same starting weights
    (`sha`, the model's sha256). Each copy keeps its provenance (the command, commit and machine that made it) and
    names its source (`taken_from`). Returns the keys taken (with write=False, those it would take); a seed `source`
    has no base for is left to run. Raises StudyError naming a record that was made otherwise."""
    results = Path(settings.results)
    current = base_definition(definition(settings, None))
    taken, refused = [], []
    for seed in seeds:
        key = f"base/seed-{seed}"
        path = record_path(Path(source), key)
        if record_path(results, key).is_file() or not path.is_file():
            continue
        record = read_record(path)
        stored = base_definition(record["definition"])
        their_sha = record.get("provenance", {}).get("model_sha256")
        if digest(stored) != digest(current):
            refused.append(describe_difference(path, stored, current))
        elif sha is None or their_sha != sha:
            refused.append(f"{path}: starting weights sha256 {str(their_sha)[:16]}..., this study's "
                           f"{str(sha)[:16]}... ({settings.model})")
        else:
            taken.append(key)
            if write:
                atomic_write_json(record_path(results, key), {**record, "taken_from": str(source)})
    if refused:
        raise StudyError(
            f"--bases-from {source}: {len(refused)} base record(s) there evaluated something else than this study "
            "would:\n  " + "\n  ".join(refused) + "\n  fix: give a results directory of a study with the same "
            "model, environment and evaluation, or leave out --bases-from to evaluate the base model here")
    return taken


def cell_to_json(record) -> dict[str, Any]:
    return dataclasses.asdict(record)


def _stats(summary: dict[str, dict]) -> dict[str, Stat]:
    return {k: Stat(**v) for k, v in summary.items()}


def _by_step(values: dict[str, Any]) -> dict[int, Any]:
    """A step-keyed mapping read back from JSON (whose keys are strings)."""
    return {int(step): v for step, v in values.items()}


def cell_from_json(data: dict[str, Any]):
    fields = {f.name for f in dataclasses.fields(CellRecord)}
    data = {k: v for k, v in data.items() if k in fields}
    return CellRecord(**{
        **data, "after": _stats(data["after"]), "sets": {n: _stats(s) for n, s in data.get("sets", {}).items()},
        "curves": {k: _by_step(steps) for k, steps in data["curves"].items()},
        "batch_curves": {k: _by_step(steps) for k, steps in data.get("batch_curves", {}).items()},
        "reward_std": _by_step(data["reward_std"]),
        "heldout_curve": {int(step): _stats(s) for step, s in data.get("heldout_curve", {}).items()},
    })


def base_from_json(data: dict[str, Any]):
    return BaseRecord(seed=data["seed"], after=_stats(data["after"]),
                      sets={n: _stats(s) for n, s in data.get("sets", {}).items()}, examples=data.get("examples", {}),
                      wall_s=data["wall_s"], provenance=data.get("provenance", {}), groups=data.get("groups", {}))


def write_record(settings: StudySettings, layout: StudyLayout, unit: Path) -> Path:
    """The record of a finished unit of the study directory (done.json present), written atomically into the
    study's results directory."""
    key = unit_key(layout, unit)
    sets, metrics, split_by = list(settings.evaluation.sets), settings.report.headline, settings.report.split_by
    if key.startswith("base/"):
        data = dataclasses.asdict(read_base(layout, int(unit.name.removeprefix("seed-")), sets, metrics, split_by))
        algo = None
    else:
        parts = key.split("/")
        replicate = int(parts[3].removeprefix("replicate-")) if len(parts) > 3 else 0
        algo = parts[1]
        data = cell_to_json(read_cell(layout, algo, int(parts[2].removeprefix("seed-")), replicate, sets, metrics,
                                      split_by))
    found = definition(settings, algo)
    record = {"key": key, "algo": algo, "definition": found, "definition_sha256": digest(found), **data}
    return atomic_write_json(record_path(Path(settings.results), key), record)


def write_manifest(settings: StudySettings, results: Path) -> StudySettings:
    """results.json: the settings of every invocation on `results` (the grids' union, this invocation's report
    options; `merge_grids` refuses another budget). Returns the merged settings."""
    from rlvr.study.settings import merge_grids

    path = Path(results) / RESULTS_MANIFEST
    merged = settings
    if path.is_file():
        stored = StudySettings.from_dict(json.loads(path.read_text())["settings"])
        recorded = {read_record(p).get("algo") for p in record_files(results)} - {None}
        merged = merge_grids(stored, settings, recorded)
    atomic_write_json(path, {"settings": merged.to_dict(), "evaluation_sampling": merged.sampling()})
    return merged


def read_records(results: Path):
    """(bases by seed, cells, replicates) of the records in `results`, as the report reads them."""
    bases, cells, replicates = {}, [], []
    for path in record_files(results):
        data = read_record(path)
        if data["key"].startswith("base/"):
            bases[data["seed"]] = base_from_json(data)
        else:
            (replicates if data.get("replicate") else cells).append(cell_from_json(data))
    return bases, cells, replicates


def record_commands(results: Path) -> list[str]:
    """The commands that made the records, each once, in the order first met."""
    commands = [read_record(p).get("provenance", {}).get("command") for p in record_files(results)]
    return list(dict.fromkeys(c for c in commands if c))


def recorded(settings: StudySettings, layout: StudyLayout, unit: Path) -> bool:
    return bool(settings.results) and record_path(Path(settings.results), unit_key(layout, unit)).is_file()


def export_missing(settings: StudySettings, layout: StudyLayout) -> list[Path]:
    """Records for the units this study directory finished without one (finished before `results` was set, or
    stopped between their done.json and their record)."""
    units = [*(layout.base(s) for s in layout.finished_bases()), *(layout.cell(a, s) for a, s in
             layout.finished_cells()), *(layout.cell(a, s, k) for a, s, k in layout.finished_replicates())]
    return [write_record(settings, layout, unit) for unit in units if not recorded(settings, layout, unit)]
