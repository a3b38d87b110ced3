"""`rlvr analyze DIR`: a markdown table and PNG plots from runs, evaluations and benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

console = Console()


def analyze(
    directory: Path = typer.Argument(..., help="A run, evaluation, benchmark or study directory."),
    against: Annotated[Path | None, typer.Option(
        "--against", help="Another study (or its results directory) that differs from DIRECTORY in one thing: "
        "their cells of the same algorithm and seed paired over the held-out examples, written to "
        "DIRECTORY/against_<its name>.md.")] = None,
) -> None:
    """Tables and plots: reward curves over training, per-turn rewards, the model x retriever grid, a study's report."""
    from rlvr.analysis import analyze as write_analysis
    from rlvr.study.ablation import write_ablation
    from rlvr.study.layout import is_study
    from rlvr.study.report import write_report

    try:
        if against is not None and not (is_study(directory) and is_study(against)):
            raise ValueError(f"--against compares two studies: {directory if not is_study(directory) else against} "
                             "is no study directory (study.json) or results directory (results.json)")
        # a study gets its paired comparisons across seeds, not one table per run
        if against is not None:
            report = write_ablation(directory, against)
        else:
            report = write_report(directory) if is_study(directory) else write_analysis(directory)
    except (FileNotFoundError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from err
    console.print(Markdown(report.read_text()))
    console.print(f"\nwritten: {report}")


def register(app: typer.Typer) -> None:
    app.command()(analyze)
