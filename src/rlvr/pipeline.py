"""`rlvr pipeline`: a benchmark's stages (expert data -> SFT -> RL -> offline -> search -> held-out evaluation) run
in order into one directory. Each stage is one existing command that resumes itself (`rlvr study`, `rlvr collect`,
`rlvr evaluate`, `python -m vf_alfworld.expert`, ...); the pipeline only orders them, skips the finished ones and
records, next to every result, the command that made it.

TOML (configs/pipelines/*.toml):

    description = "..."
    [vars]                                  # {name} in commands, outs and other vars; `--set name=value` overrides
    model = "smollm2-135m"
    [[stages]]
    name = "expert"                         # an identifier; {expert} in later stages is its result directory
    out = "expert"                          # the result directory, relative to the pipeline's --out
    command = "python -m vf_alfworld.expert {here} --split train"
    [[stages]]
    name = "search"
    foreach = "{rl}/cells/oreo/seed-*/train"   # one run per existing match (a glob, expanded when the stage starts):
    out = "search/{name}"                      # {match} = the path, {name} = what its wildcards matched, joined by -
    command = "rlvr evaluate --model {match}/final ..."

Placeholders are `{identifier}`: a var, an earlier stage's name, `out` (the pipeline directory), `here` (this
stage's result directory), and in a foreach stage `match` and `name`; anything else in braces (JSON) is left as it
is. A command is split into arguments (shell quoting) before substitution, so a value with spaces or quotes stays
one argument, and no shell runs. `rlvr` and `python` at the start of a command run in this interpreter.

A stage (or foreach item) is finished when its result directory holds `pipeline_stage.json` (written after the
command exits 0: the command, its start, end, wall time and peak memory); it is then skipped. An interrupted one is
run again with the same command, which resumes from what it left. `pipeline.json` in the pipeline directory keeps
the config and every invocation with its vars; vars that would change the command of a finished stage are refused
(its result was made by the old command), vars that change only stages still to run are taken.

Starting weights checked against committed ones: a stage with `weights = "PATH"` (relative to its result directory,
e.g. an SFT study's "cells/sft/seed-0/train/final") records their fingerprint (rlvr.weights: sha256 over the
tensors, and per tensor) in its pipeline_stage.json. With `results = "benchmarks/results/NAME"` at the top of the
config (where `--export` copies the records to be committed), a rebuilt stage's fingerprint is compared with the
committed record of the same stage: a mismatch is named (how many tensors differ, the largest first) and the
pipeline stops before any later stage starts from those weights, unless `--accept-weights STAGE` is given (then the
mismatch is recorded in the stage's record and printed, and the later stages run with RLVR_ACCEPT_WEIGHTS=1, which
lets their studies add units from those weights to committed ones: `rlvr study --accept-weights`). A committed
record without a fingerprint is no check: said so, not silently passed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config_files import check_keys, did_you_mean, read_toml
from rlvr.io import atomic_directory, atomic_write_json

MARKER = "pipeline_stage.json"
MANIFEST = "pipeline.json"
# What `export_results` copies of a finished stage: its reports, statistics and records, not its weights, datasets,
# checkpoints or rollouts (so a pipeline's results can be committed, e.g. under benchmarks/results/)
RESULT_FILES = ("report.md", "summary.json", "study.json", "metadata.json", MARKER, "*.png")
HEAVY_DIRS = ("checkpoint-*", "final", "value", "dataset", "wandb", "logs")
MAX_RESULT_BYTES = 2_000_000
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED = ("out", "here", "match", "name")  # placeholders the runner fills in itself
STAGE_KEYS = {"name", "out", "command", "foreach", "description", "weights"}
TOP_KEYS = {"description", "vars", "stages", "results"}


class PipelineError(ValueError):
    """A pipeline config or directory that cannot be used, or a stage that failed, with what to do."""


@dataclass(frozen=True)
class Stage:
    name: str
    out: str  # relative to the pipeline directory; may hold placeholders ({name} in a foreach stage)
    command: str
    foreach: str | None = None
    description: str = ""
    weights: str | None = None  # a checkpoint in the stage's result directory: fingerprinted, checked if committed


@dataclass
class Pipeline:
    path: Path
    stages: list[Stage]
    vars: dict[str, str] = field(default_factory=dict)
    description: str = ""
    results: str | None = None  # the committed export of this pipeline's records (--export), for weights checks

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise PipelineError(f"no stage {name!r} in {self.path}; stages: {', '.join(s.name for s in self.stages)}."
                            + did_you_mean(name, [s.name for s in self.stages]))


def read_pipeline(path: Path, overrides: dict[str, str] | None = None) -> Pipeline:
    """Read and check a pipeline TOML file, with `--set` overrides of its vars: every mistake is reported here,
    before any stage runs."""
    path = Path(path)
    data = read_toml(path, "pipeline config", "configs/pipelines/*.toml", PipelineError)
    check_keys(data, TOP_KEYS, str(path), PipelineError)
    variables = {str(k): str(v) for k, v in data.get("vars", {}).items()}
    for name, value in (overrides or {}).items():
        if name not in variables:
            raise PipelineError(f"--set {name}=...: {path} has no var {name!r} (vars: {', '.join(variables)})."
                                + did_you_mean(name, variables))
        variables[name] = value
    stages = []
    for number, table in enumerate(data.get("stages", []), start=1):
        where = f"stage {number} of {path}"
        check_keys(table, STAGE_KEYS, where, PipelineError)
        missing = [k for k in ("name", "out", "command") if not table.get(k)]
        if missing:
            raise PipelineError(f"{where} lacks {', '.join(missing)}: every stage has a name, an out directory and "
                                "a command")
        stages.append(Stage(**table))
    if not stages:
        raise PipelineError(f"{path} has no [[stages]]")
    pipeline = Pipeline(path=path, stages=stages, vars=variables, description=data.get("description", ""),
                        results=data.get("results"))
    check_pipeline(pipeline)
    return pipeline


def check_pipeline(pipeline: Pipeline) -> None:
    """Names are identifiers, unique, and no var's or reserved placeholder's; every placeholder names something
    known where it is used (a var, `out`, an earlier non-foreach stage; `here` in commands; `match` / `name` in
    foreach stages); vars do not refer to each other in a circle; a foreach stage's out holds {name}."""
    where = str(pipeline.path)
    for name in pipeline.vars:
        if not IDENTIFIER.fullmatch(name) or name in RESERVED:
            raise PipelineError(f"var {name!r} in {where}: a var is an identifier and not one of {RESERVED}")
        for placeholder in PLACEHOLDER.findall(pipeline.vars[name]):
            if placeholder not in pipeline.vars:
                raise PipelineError(f"var {name!r} in {where} holds {{{placeholder}}}, which is no var: a var may "
                                    "name other vars only (stage results are named in stage commands)."
                                    + did_you_mean(placeholder, pipeline.vars))
    resolve_vars(pipeline.vars, where)
    seen: dict[str, Stage] = {}
    outs: dict[str, str] = {}
    for stage in pipeline.stages:
        label = f"stage {stage.name!r} of {where}"
        if not IDENTIFIER.fullmatch(stage.name) or stage.name in RESERVED or stage.name in pipeline.vars:
            raise PipelineError(f"{label}: a stage name is an identifier, and not a var's or one of {RESERVED} "
                                "(it is the placeholder of the stage's result directory)")
        if stage.name in seen:
            raise PipelineError(f"{label}: two stages have this name")
        if stage.out in outs or Path(stage.out).is_absolute() or ".." in Path(stage.out).parts:
            raise PipelineError(f"{label}: out = {stage.out!r} must be a path inside the pipeline directory that no "
                                f"other stage uses" + (f" ({outs[stage.out]} does)" if stage.out in outs else ""))
        outs[stage.out] = stage.name
        if stage.weights is not None and (Path(stage.weights).is_absolute() or ".." in Path(stage.weights).parts):
            raise PipelineError(f"{label}: weights = {stage.weights!r} must be a path inside the stage's result "
                                "directory, e.g. \"cells/sft/seed-0/train/final\"")
        earlier = {n for n, s in seen.items() if s.foreach is None}
        own = {"match", "name"} if stage.foreach else set()
        if stage.foreach and "{name}" not in stage.out:
            raise PipelineError(f"{label}: a foreach stage runs once per match, so its out needs {{name}} "
                                f"(e.g. out = \"{stage.out}/{{name}}\")")
        for text, allowed in ((stage.out, own), (stage.foreach or "", set()), (stage.command, own | {"here"})):
            for placeholder in PLACEHOLDER.findall(text):
                if placeholder in pipeline.vars or placeholder == "out" or placeholder in earlier | allowed:
                    continue
                if placeholder in seen:
                    why = "a foreach stage has one result directory per match: name its paths with a glob"
                elif any(s.name == placeholder for s in pipeline.stages):
                    why = "that stage runs later: stages may use the results of earlier stages only"
                else:
                    why = "not a var, an earlier stage or one of " + ", ".join(["out", *sorted(allowed)])
                    why += "." + did_you_mean(placeholder, [*pipeline.vars, *earlier, "out", *allowed])
                raise PipelineError(f"{label}: {{{placeholder}}} in {text!r}: {why}")
        seen[stage.name] = stage


def resolve_vars(variables: dict[str, str], where: str) -> dict[str, str]:
    """Each var with the vars it names substituted (placeholders of stages and `out` are left for later)."""
    resolved: dict[str, str] = {}

    def value(name: str, chain: tuple[str, ...]) -> str:
        if name in chain:
            raise PipelineError(f"vars of {where} refer to each other in a circle: {' -> '.join([*chain, name])}")
        if name not in resolved:
            resolved[name] = PLACEHOLDER.sub(
                lambda m: value(m[1], (*chain, name)) if m[1] in variables else m[0], variables[name])
        return resolved[name]

    for name in variables:
        value(name, ())
    return resolved


def substitute(text: str, values: dict[str, str]) -> str:
    """`{identifier}` replaced where `values` knows it; other braces (JSON) are kept."""
    return PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), text)


@dataclass(frozen=True)
class Unit:
    """One run of a stage: its result directory and its command as arguments (a foreach stage has one per match)."""

    stage: str
    here: Path
    argv: tuple[str, ...]
    item: str | None = None
    weights: Path | None = None  # the checkpoint the stage makes (Stage.weights)

    @property
    def label(self) -> str:
        return f"{self.stage}[{self.item}]" if self.item else self.stage

    @property
    def marker(self) -> Path:
        return self.here / MARKER

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def glob_items(pattern: str) -> list[tuple[str, str]]:
    """(path, name) for each existing path matching `pattern`, sorted; name = what the wildcard parts matched."""
    parts = Path(pattern).parts
    items = []
    for path in sorted(glob.glob(pattern)):
        matched = Path(path).parts[-len(parts):]
        wild = [got for want, got in zip(parts, matched, strict=True) if glob.has_magic(want)]
        items.append((path, "-".join(wild) or Path(path).name))
    return items


class Plan:
    """The pipeline's stages as units, with every placeholder filled in, for one output directory."""

    def __init__(self, pipeline: Pipeline, out: Path):
        self.pipeline, self.out = pipeline, Path(out)
        self.values = {**resolve_vars(pipeline.vars, str(pipeline.path)), "out": str(self.out)}
        for stage in pipeline.stages:
            if stage.foreach is None:
                self.values[stage.name] = str(self.out / substitute(stage.out, self.values))

    def pattern(self, stage: Stage) -> str:
        return substitute(stage.foreach or "", self.values)

    def units(self, stage: Stage) -> list[Unit]:
        """The runs of `stage`; a foreach stage's are those of the paths that exist now."""
        items = glob_items(self.pattern(stage)) if stage.foreach else [(None, None)]
        units = []
        for match, name in items:
            values = {**self.values, **({"match": match, "name": name} if match else {})}
            here = self.out / substitute(stage.out, values)
            argv = [substitute(arg, {**values, "here": str(here)}) for arg in shlex.split(stage.command)]
            units.append(Unit(stage.name, here, tuple(argv), name, here / stage.weights if stage.weights else None))
        return units


def executable(argv: tuple[str, ...]) -> list[str]:
    """`rlvr ...` and `python ...` in this interpreter (its virtual environment), whatever PATH holds."""
    if argv[0] == "rlvr":
        return [sys.executable, "-m", "rlvr.cli", *argv[1:]]
    if argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    return list(argv)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _terminate_with_parent() -> None:
    """In the stage's process, before exec: SIGTERM it when the pipeline dies (a SIGKILL skips the forwarding),
    so that it checkpoints and stops instead of running on unobserved."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def run_unit(unit: Unit, log: Path, echo=print, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one unit's command (with `env` added to the environment), its output to the terminal and to `log`;
    SIGINT / SIGTERM are passed on to it (the commands stop at a resumable point). Returns the record written to its
    marker; raises PipelineError when the command fails or leaves no result directory."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started, start = _now(), time.perf_counter()
    with open(log, "ab") as sink:
        sink.write(f"\n$ {unit.command}   # {started}\n".encode())
        sink.flush()
        # A session of its own: a Ctrl-C at the terminal reaches the stage once, through the handler below (the
        # training commands stop at once on a second signal); and it dies with the pipeline, however that dies.
        process = subprocess.Popen(executable(unit.argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}, start_new_session=True,
                                   preexec_fn=_terminate_with_parent)
        forward = {sig: signal.signal(sig, lambda s, _f: process.send_signal(s))
                   for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for line in process.stdout:
                sink.write(line)
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
            # wait4: this child's own resource use (the peak resident set of it or of any process it waited for)
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
        finally:
            for sig, handler in forward.items():
                signal.signal(sig, handler)
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise PipelineError(f"stage {unit.label} failed (exit status {process.returncode}) after {wall:.0f} s: "
                            f"{unit.command}\n  its output: {log}\n  fix the cause and run the same `rlvr pipeline` "
                            "command again: finished stages are skipped and this one resumes")
    if not unit.here.is_dir():
        raise PipelineError(f"stage {unit.label} exited 0 but wrote nothing to {unit.here}: its command must write "
                            "its result there ({here} in the command)")
    record = {"stage": unit.stage, "item": unit.item, "command": unit.command, "started": started,
              "finished": _now(), "wall_s": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
              "log": str(log)}
    if unit.weights is not None:
        record["weights"] = weights_fingerprint(unit)
    atomic_write_json(unit.marker, record)
    echo(f"stage {unit.label} done in {wall / 60:.1f} min (peak memory {record['peak_rss_mb']:.0f} MB): {unit.here}")
    return record


def weights_fingerprint(unit: Unit) -> dict[str, Any]:
    from rlvr.weights import WeightsError, fingerprint

    try:
        return fingerprint(unit.weights)
    except WeightsError as err:
        raise PipelineError(f"stage {unit.label}: weights = {unit.weights}: {err}; the stage's command must leave its "
                            "checkpoint there (fix the stage's `weights` path)") from err


def committed_marker(plan: Plan, unit: Unit) -> Path | None:
    """The committed record of the same unit: `results`/<its path in the pipeline directory>/pipeline_stage.json."""
    if plan.pipeline.results is None:
        return None
    results = Path(substitute(plan.pipeline.results, plan.values))
    return results / unit.here.relative_to(plan.out) / MARKER


def check_weights(plan: Plan, unit: Unit, accept: Collection[str], echo=print) -> bool:
    """A finished unit's weights against the committed fingerprint: the verdict goes into its record; a mismatch
    raises PipelineError unless its stage is in `accept`. Returns whether a mismatch was accepted."""
    from rlvr.weights import describe, differences

    record = json.loads(unit.marker.read_text())
    if "weights" not in record:  # finished before fingerprints were recorded: the weights are still there
        record["weights"] = weights_fingerprint(unit)
    committed = committed_marker(plan, unit)
    stored = json.loads(committed.read_text()) if committed is not None and committed.is_file() else {}
    found = []
    if "weights" not in stored:
        verdict = (f"not checked: no committed fingerprint ({committed or 'the config sets no results directory'}); "
                   f"sha256 {record['weights']['sha256'][:16]}, kept in {unit.marker} (--export it to commit it)")
    else:
        found = differences(stored["weights"], record["weights"])
        verdict = (f"match the committed ones ({committed}, sha256 {stored['weights']['sha256'][:16]})" if not found
                   else f"DIFFER from the committed ones ({committed}): "
                        + describe(found, len(stored["weights"]["tensors"])))
        if stored.get("command") != unit.command:
            verdict += f" (the committed record was made by another command: {stored.get('command')})"
        if found and unit.stage not in accept:
            record["weights_check"] = verdict
            atomic_write_json(unit.marker, record)
            raise PipelineError(
                f"stage {unit.label}: its weights {unit.weights} {verdict}.\n  Later stages start from them, so the "
                "pipeline stops here. If the difference is expected (another CPU, thread count or library version; "
                "where both checkpoints exist, `python -m rlvr.weights diff A B` gives max |a - b| per tensor), "
                f"run the same command with --accept-weights {unit.stage}: the mismatch is then recorded and the "
                "pipeline goes on. Otherwise rebuild the stage where the committed one was made.")
        if found:
            verdict += f"; accepted (--accept-weights {unit.stage})"
    record["weights_check"] = verdict
    atomic_write_json(unit.marker, record)
    echo(f"stage {unit.label}: weights {verdict}")
    return bool(found)


def check_finished(plan: Plan) -> None:
    """A finished unit must be what its stage's command now says: other vars (or an edited config) that change the
    command of a finished stage are refused, since its result was made by the old one. Vars that change only the
    stages still to run are taken (e.g. more seeds before the RL study has finished)."""
    changed = []
    for stage in plan.pipeline.stages:
        for unit in plan.units(stage):
            if unit.marker.is_file():
                before = json.loads(unit.marker.read_text())["command"]
                if before != unit.command:
                    changed.append(f"{unit.label}: made by   {before}\n    would now run {unit.command}")
    if changed:
        raise PipelineError(f"{plan.out} has finished stages that these vars would make differently:\n  "
                            + "\n  ".join(changed) + f"\n  fix: the --set options of before ({plan.out / MANIFEST} "
                            "lists each invocation's vars), another --out directory, or remove a stage's "
                            f"{MARKER} to run it again with the new command (it resumes what it can)")


def open_manifest(plan: Plan, command: str | None) -> dict[str, Any]:
    """pipeline.json: the config and every invocation with its vars."""
    path = plan.out / MANIFEST
    if path.is_file():
        data = json.loads(path.read_text())
    else:
        data = {"config": str(plan.pipeline.path), "created": _now(), "invocations": []}
    data["invocations"].append({"command": command, "vars": plan.pipeline.vars, "started": _now(), "finished": None})
    atomic_write_json(path, data)
    return data


def run_pipeline(pipeline: Pipeline, out: Path, *, until: str | None = None, command: str | None = None,
                 echo=print, accept_weights: Collection[str] = ()) -> list[dict[str, Any]]:
    """Run every unfinished stage in order (up to and including `until`); returns the records of the units run.
    A stage with `weights` is checked against its committed fingerprint once finished (`check_weights`): a mismatch
    stops the pipeline unless the stage is in `accept_weights`; then the later stages run with RLVR_ACCEPT_WEIGHTS=1,
    so that their studies take those weights as the start of units beside committed ones (`rlvr study
    --accept-weights`)."""
    plan = Plan(pipeline, out)
    stages = pipeline.stages
    if until is not None:
        stages = stages[: stages.index(pipeline.stage(until)) + 1]
    for name in accept_weights:
        if pipeline.stage(name).weights is None:
            raise PipelineError(f"--accept-weights {name}: stage {name} has no `weights` to check")
    check_finished(plan)
    manifest = open_manifest(plan, command)
    ran, env = [], {}
    for stage in stages:
        units = plan.units(stage)
        if stage.foreach and not units:
            raise PipelineError(f"stage {stage.name}: nothing matches {plan.pattern(stage)} (the results it runs on "
                                "come from earlier stages: did they write them there?)")
        for unit in units:
            if unit.marker.is_file():
                echo(f"stage {unit.label}: done, skipped ({unit.marker})")
            else:
                echo(f"stage {unit.label}: {unit.command}")
                ran.append(run_unit(unit, plan.out / "logs" / f"{unit.label.replace('[', '-').rstrip(']')}.log",
                                    echo, env))
            if unit.weights is not None and check_weights(plan, unit, accept_weights, echo):  # before any later
                env["RLVR_ACCEPT_WEIGHTS"] = "1"  # stage starts from them
    manifest["invocations"][-1]["finished"] = _now()
    atomic_write_json(plan.out / MANIFEST, manifest)
    return ran


def export_results(pipeline: Pipeline, out: Path, dest: Path) -> list[Path]:
    """Copy the results of `out`'s finished stages (RESULT_FILES of at most MAX_RESULT_BYTES each, outside
    HEAVY_DIRS) and its pipeline.json to `dest`, keeping their paths relative to `out`; `dest` is replaced
    atomically. Returns the copied files' paths in `dest`."""
    plan = Plan(pipeline, out)
    finished = [u.here for stage in pipeline.stages for u in plan.units(stage) if u.marker.is_file()]
    if not finished:
        raise PipelineError(f"{out} has no finished stage to export (run the pipeline first; --dry-run shows states)")
    sources = [out / MANIFEST] if (out / MANIFEST).is_file() else []
    for here in finished:
        for path in sorted(here.rglob("*")):
            inside = path.relative_to(here).parts[:-1]
            if (path.is_file() and any(path.match(p) for p in RESULT_FILES)
                    and not any(Path(part).match(d) for part in inside for d in HEAVY_DIRS)
                    and path.stat().st_size <= MAX_RESULT_BYTES):
                sources.append(path)
    copied = []
    with atomic_directory(dest) as tmp:
        for path in sources:
            relative = path.relative_to(out)
            (tmp / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, tmp / relative)
            copied.append(Path(dest) / relative)
    return copied


def stage_states(pipeline: Pipeline, out: Path) -> list[tuple[str, str, str]]:
    """(unit, state, command) for the dry run: done (with its wall time), partial (will resume), to do; a foreach
    stage whose inputs do not exist yet is shown as its pattern."""
    plan = Plan(pipeline, out)
    rows = []
    for stage in pipeline.stages:
        units = plan.units(stage)
        if stage.foreach and not units:
            rows.append((stage.name, f"to do, once per match of {plan.pattern(stage)}", stage.command))
        for unit in units:
            if unit.marker.is_file():
                record = json.loads(unit.marker.read_text())
                state = f"done ({record['wall_s'] / 60:.1f} min)"
            else:
                state = "partial: resumes" if unit.here.exists() else "to do"
            rows.append((unit.label, state, unit.command))
    return rows


def parse_sets(items: list[str]) -> dict[str, str]:
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise PipelineError(f"--set {item!r}: write NAME=VALUE, e.g. --set model=tiny-random")
        overrides[name] = value
    return overrides


__all__ = ["Pipeline", "PipelineError", "Plan", "Stage", "Unit", "read_pipeline", "run_pipeline", "stage_states",
           "export_results",
           "parse_sets", "MARKER", "MANIFEST"]
