"""`rlvr pipeline`: run a benchmark's stages in order (rlvr.pipeline); the same command resumes."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from rlvr.cli.common import console, fail


def pipeline(
    config: Path = typer.Argument(..., help="Pipeline TOML file (configs/pipelines/*.toml)."),
    out: Path = typer.Option(..., "--out", "-o", help="Pipeline directory; the same command again resumes it."),
    overrides: list[str] = typer.Option([], "--set", "-s", help="A var of the config, NAME=VALUE (e.g. "
                                        "--set model=tiny-random); refused where it would change a finished stage's command."),
    until: str | None = typer.Option(None, "--until", help="Stop after this stage."),
    accept_weights: list[str] = typer.Option(
        [], "--accept-weights", help="STAGE: go on although the stage's rebuilt weights differ from the committed "
        "fingerprint (the mismatch is recorded); without it the pipeline stops there."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show each stage's state and command; run nothing."),
    export: Path | None = typer.Option(None, "--export", help="Copy the finished stages' reports and statistics "
                                       "(no weights, datasets or rollouts) to this directory, e.g. under "
                                       "benchmarks/results/; run nothing."),
) -> None:
    """Run the stages of a pipeline (expert data -> SFT -> RL -> offline -> search -> evaluation) that are not
    finished yet, each with its own resumable command; each result directory records the command that made it."""
    from rlvr.pipeline import (
        PipelineError,
        export_results,
        parse_sets,
        read_pipeline,
        run_pipeline,
        stage_states,
    )

    try:
        spec = read_pipeline(config, parse_sets(overrides))
        if until is not None:
            spec.stage(until)
        if export is not None:
            copied = export_results(spec, out, export)
            console.print(f"{len(copied)} result files of {out} -> {export}", markup=False)
            return
        if dry_run:
            table = Table(title=f"{config} -> {out}")
            for column in ("stage", "state", "command"):
                table.add_column(column)
            for row in stage_states(spec, out):
                table.add_row(*map(Text, row))  # commands hold brackets: no markup
            console.print(table)
            return
        run_pipeline(spec, out, until=until, command=shlex.join(["rlvr", *sys.argv[1:]]),
                     echo=lambda line: console.print(line, markup=False), accept_weights=accept_weights)
    except PipelineError as err:
        raise fail(str(err)) from err


def register(app: typer.Typer) -> None:
    app.command()(pipeline)
