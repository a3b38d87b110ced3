"""`rlvr study`: a grid of (algorithm, seed) training runs under one budget, evaluated before and after on one
held-out set, with a report (rlvr.study). Re-running the same command resumes: finished cells are skipped and an
interrupted cell continues from its checkpoint. `--dry-run` shows the plan and each cell's state.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import typer
from rich.markdown import Markdown
from rich.table import Table

from rlvr.cli.common import EnvArgsOption, console, fail, parse_env_args


def _split(text: str, what: str, cast=str) -> list:
    try:
        return [cast(item.strip()) for item in text.split(",") if item.strip()]
    except ValueError as err:
        raise fail(f"--{what} {text!r}: give a comma-separated list, e.g. --{what} "
                   f"{'0,1,2' if cast is int else 'grpo,mt_grpo'}") from err


def apply_overrides(data: dict[str, Any], items: list[str]) -> None:
    """`--set KEY=VALUE` for every cell, `--set ALGO:KEY=VALUE` for one algorithm or variant (table keys as
    TABLE.KEY)."""
    from rlvr.cli.train import apply_override, check_algo, check_keys

    for item in items:
        key, _, _ = item.partition("=")
        algo, colon, _ = key.partition(":")
        if colon:
            check_algo(recipe(data, algo))
            options = data.setdefault("algo_options", {}).setdefault(algo, {})
            apply_override(options, item.split(":", 1)[1], recipe(data, algo))
        else:  # an option of every cell: valid for every on-policy algorithm of the grid
            online = on_policy(data)
            for name in online:
                check_keys([key.partition(".")[0]], recipe(data, name), "--set")
            apply_override(data["training"], item, recipe(data, (online or data["algos"])[0]))


def recipe(data: dict[str, Any], name: str) -> str:
    """rlvr.study.settings.recipe_of on the settings as read, before they are checked."""
    from rlvr.study.settings import recipe_of

    return recipe_of(data.get("variants", {}), name)


def on_policy(data: dict[str, Any]) -> list[str]:
    from rlvr.study.settings import is_offline

    return [a for a in data.get("algos") or [] if not is_offline(recipe(data, a))]


def check_training_keys(data: dict[str, Any], where: str) -> None:
    """Unknown training options fail here with the closest valid name, for every algorithm of the grid."""
    from rlvr.cli.train import check_algo, check_keys

    for algo in data.get("algos") or []:
        check_algo(recipe(data, algo))
    for algo in on_policy(data):  # offline recipes take the shared options they have
        check_keys(data.get("training", {}), recipe(data, algo), f"[training] of {where}")
    for algo, options in data.get("algo_options", {}).items():
        check_algo(recipe(data, algo))
        check_keys(options, recipe(data, algo), f"[algo_options.{algo}] of {where}")


def resolve_settings(config: Path | None, env: str | None, model: str | None, algos: str | None,
                     seeds: str | None, steps: int | None, overrides: list[str], env_args: str,
                     eval_examples: int | None, eval_rollouts: int | None, baseline: str | None,
                     offline_datasets: list[str] = (), results: Path | None = None, at_steps: str | None = None):
    """The study's settings: the TOML file, then the command-line options on top; checked before anything runs."""
    from rlvr.study.settings import StudyError, StudySettings, read_settings_file

    try:
        data = read_settings_file(config) if config else {}
    except StudyError as err:
        raise fail(str(err)) from err
    data = {**data, "training": dict(data.get("training", {})), "evaluation": dict(data.get("evaluation", {})),
            "report": dict(data.get("report", {}))}
    data["env"], data["model"] = env or data.get("env"), model or data.get("model")
    if not data["env"] or not data["model"]:
        raise fail("give --env and --model (or env/model in --config)")
    if algos:
        data["algos"] = _split(algos, "algos")
    if seeds:
        data["seeds"] = _split(seeds, "seeds", int)
    if not data.get("algos") or not data.get("seeds"):
        raise fail("give --algos and --seeds (or algos/seeds in --config), e.g. --algos grpo,mt_grpo --seeds 0,1,2")
    check_training_keys(data, str(config) if config else "the command line")
    apply_overrides(data, overrides)
    if steps is not None:
        data["training"]["max_steps"] = steps
    data["env_args"] = {**data.get("env_args", {}), **parse_env_args(env_args)}
    for key, value in (("examples", eval_examples), ("rollouts", eval_rollouts)):
        if value is not None:
            data["evaluation"][key] = value
    if at_steps is not None:  # "" (a pipeline var left empty): no curve points
        data["evaluation"]["at_steps"] = _split(at_steps, "at-steps", int)
    if baseline is not None:
        data["report"]["baseline"] = baseline
    if results is not None:
        data["results"] = str(results)
    for item in offline_datasets:
        algo, sep, directory = item.partition("=")
        if not sep or not directory:
            raise fail(f"--offline-dataset {item!r}: write ALGO=DIR, e.g. --offline-dataset oreo=runs/collect")
        data["offline_datasets"] = {**data.get("offline_datasets", {}), algo: directory}
    try:
        return StudySettings.from_dict(data)
    except (StudyError, TypeError) as err:
        raise fail(str(err)) from err


def cell_state(settings, layout, algo: str, seed: int) -> str:
    from transformers.trainer_utils import get_last_checkpoint

    from rlvr.study.records import recorded

    unit = layout.cell(algo, seed)
    train = layout.train(unit)
    if layout.done(unit).is_file():
        return "[green]done[/green]"
    if recorded(settings, layout, unit):
        return "[green]done (committed record)[/green]"
    if (train / "final" / "model.safetensors").is_file():
        return "trained; evaluation to do"
    checkpoint = get_last_checkpoint(str(train)) if train.is_dir() else None
    return f"resumes from {Path(checkpoint).name}" if checkpoint else "to do"


def show_plan(settings, out: Path, only=None) -> None:
    """The study's grid with each unit's state, and what is left to run; `only` (--cells): one machine's share,
    the other units shown as not selected and left out of the count."""
    from rlvr.study.layout import StudyLayout
    from rlvr.study.records import read_records
    from rlvr.study.runner import cell_key, is_done, pending

    layout = StudyLayout(out)
    console.print(f"[bold]study[/bold] {out}: {settings.env} with {settings.model}"
                  + (f"; committed records in {settings.results}" if settings.results else ""))
    budget = settings.budget()
    console.print("budget per cell: " + ", ".join(f"{k}={v}" for k, v in budget.items()))
    rest = {k: v for k, v in settings.training.items() if k not in budget}
    if rest:  # e.g. a --set beta=0.04: the plan shows every option a cell trains with
        console.print("other training options: " + ", ".join(f"{k}={v}" for k, v in rest.items()))
    if settings.train_env_args:
        console.print(f"training environment: env_args with {json.dumps(settings.train_env_args)} (held-out: "
                      "env_args as they are)")
    console.print(f"held-out evaluation: {settings.evaluation.examples} examples x {settings.evaluation.rollouts} "
                  f"rollouts, sampling {settings.sampling()}; baseline {settings.report.baseline}"
                  + (f"; also after steps {settings.evaluation.at_steps} (held-out learning curve)"
                     if settings.evaluation.at_steps else ""))
    table = Table(title="cells")
    for column in ("seed", "base model", *settings.algos):
        table.add_column(column)
    _, cells = pending(settings, layout, only)

    def shown(key: str, unit: Path, described: str) -> str:  # a done unit shows as done, selected or not
        selected = only is None or key in only
        return described if selected or is_done(settings, layout, unit) else "[dim]not selected[/dim]"

    for seed in settings.seeds:
        base = layout.base(seed)
        row = [shown(f"base/seed-{seed}", base, "[green]done[/green]" if is_done(settings, layout, base) else "to do")]
        row += [shown(cell_key(a, seed), layout.cell(a, seed), cell_state(settings, layout, a, seed))
                for a in settings.algos]
        table.add_row(str(seed), *row)
    console.print(table)
    reruns = sum(r > 0 for _, _, r in cells)
    if settings.replicates > 1:
        console.print(f"replicates: {settings.replicates} runs of every cell with its own seed ({reruns} same-seed "
                      "re-runs to do, after the cells)")
    walls = [json.loads(p.read_text())["wall_s"]["total"] for p in out.glob("cells/*/seed-*/done.json")]
    if settings.results and Path(settings.results).is_dir():  # the committed cells' too (they ran elsewhere)
        walls += [c.wall_s["total"] for c in read_records(Path(settings.results))[1] if "total" in c.wall_s]
    todo = len(cells)
    if walls and todo:
        mean = sum(walls) / len(walls)
        console.print(f"{todo} cell{'s' if todo != 1 else ''} to run; at the {mean / 60:.1f} min per cell measured so far: "
                      f"about {todo * mean / 60:.0f} min (plus server start-up and base evaluations)")


def study(
    config: Path | None = typer.Option(None, "--config", "-c", help="Study TOML file (see configs/study/)."),
    out: Path = typer.Option(..., "--out", "-o", help="Study directory; the same command again resumes it."),
    env: str | None = typer.Option(None, "--env", "-e", help="Environment id (overrides the config's)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Model (overrides the config's)."),
    algos: str | None = typer.Option(None, "--algos", help="Comma-separated algorithms (`rlvr train --list`)."),
    seeds: str | None = typer.Option(None, "--seeds", help="Comma-separated integer seeds, e.g. 0,1,2."),
    steps: int | None = typer.Option(None, "--steps", help="Training steps per cell (training.max_steps)."),
    overrides: list[str] = typer.Option(
        [], "--set", "-s", help="Training option for every cell KEY=VALUE, or for one algorithm ALGO:KEY=VALUE "
        "(table options as TABLE.KEY=VALUE, e.g. mt_grpo:credit.coef=0.5)."),
    env_args: str = EnvArgsOption,
    eval_examples: int | None = typer.Option(None, "--eval-examples", help="Held-out examples per evaluation."),
    eval_rollouts: int | None = typer.Option(None, "--eval-rollouts", help="Sampled rollouts per held-out example."),
    at_steps: str | None = typer.Option(
        None, "--at-steps", help="Comma-separated training steps whose weights every cell also evaluates on the "
        "held-out set (the held-out learning curve; [evaluation] at_steps), e.g. 4,8; '' for none."),
    baseline: str | None = typer.Option(None, "--baseline", help="Algorithm the others are compared with."),
    offline_datasets: list[str] = typer.Option(
        [], "--offline-dataset", help="ALGO=DIR: the trajectories (`rlvr collect`) an offline algorithm (sft, oreo) "
        "trains on."),
    results: Path | None = typer.Option(
        None, "--results", help="Directory of committed records (e.g. benchmarks/results/NAME): each finished unit "
        "writes its record there, and a unit with one is done (a fresh clone runs only the others)."),
    cells: str | None = typer.Option(
        None, "--cells", help="Run only these units, comma-separated: base/seed-S, ALGO/seed-S (one machine's "
        "share of a study whose records are merged later)."),
    server: str | None = typer.Option(
        None, "--server", help="Use a running `rlvr serve` of the study's model (its root URL) instead of starting "
        "one: the base weights are loaded into it first, each cell then loads its own."),
    accept_weights: bool = typer.Option(
        False, "--accept-weights", envvar="RLVR_ACCEPT_WEIGHTS", help="Run although the starting weights differ "
        "from those the committed records' units started from (another CPU rebuilt them a little differently): "
        "recorded, and the report names both starting points. `rlvr pipeline --accept-weights STAGE` sets it for "
        "the stages after STAGE."),
    bases_from: Path | None = typer.Option(
        None, "--bases-from", help="Another study's results directory: take its base evaluations of the same model "
        "and evaluation (their training may differ) instead of running them again; copied into --results with "
        "their provenance."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan and each cell's state; run nothing."),
) -> None:
    """Compare algorithms over seeds under one budget: train every (algorithm, seed) cell, evaluate before and
    after on one held-out set, write report.md (paired differences, curves, collapse, wall time)."""
    from rlvr.study.runner import check_selection, check_study, take_bases
    from rlvr.study.settings import StudyError

    settings = resolve_settings(config, env, model, algos, seeds, steps, overrides, env_args, eval_examples,
                                eval_rollouts, baseline, offline_datasets, results, at_steps)
    only = (_split(cells, "cells") or None) if cells else None  # "" (a pipeline var left empty): every unit
    try:
        check_study(settings, out)
        check_selection(settings, only)
        shared = take_bases(settings, bases_from, only, write=False) if bases_from else []
    except StudyError as err:
        raise fail(str(err)) from err
    show_plan(settings, out, only)
    if dry_run:
        if shared:
            console.print(f"--bases-from: would take {', '.join(shared)} from {bases_from}")
        return
    from rlvr.evaluation import ServerLost
    from rlvr.serve import ServeLaunchError
    from rlvr.study.runner import run_study
    from rlvr.trainer import ResumeError, ServerError

    try:
        report = run_study(settings, out, command=shlex.join(["rlvr", *sys.argv[1:]]), only=only, server_url=server,
                           accept_weights=accept_weights, bases_from=bases_from)
    except (StudyError, ServerError, ServerLost, ResumeError, ServeLaunchError) as err:
        raise fail(f"{err}\n  finished cells are kept: the same command resumes the study") from err
    console.print(Markdown(report.read_text()))
    console.print(f"\n[bold green]report:[/bold green] {report}  (rlvr analyze {out} redraws it)")


def register(app: typer.Typer) -> None:
    app.command()(study)
