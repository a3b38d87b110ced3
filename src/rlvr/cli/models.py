"""`rlvr models list | prepare NAME | path NAME`."""

from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.table import Table

from rlvr import models as registry

app = typer.Typer(help="The offline model kit: list, prepare and locate models.", no_args_is_help=True)
console = Console()


@app.command("list")
def list_models() -> None:
    """List the registered models and whether they are prepared."""
    table = Table(title=f"rlvr models (cache: {registry.models_dir()})")
    for column in ("name", "prepared", "description"):
        table.add_column(column)
    for model in registry.REGISTRY.values():
        table.add_row(model.name, "yes" if registry.is_prepared(model.name) else "no", model.description)
    console.print(table)


@app.command()
def prepare(name: str, force: bool = typer.Option(False, help="Rebuild even if already prepared.")) -> None:
    """Build a registered model into the cache (once; atomic)."""
    start = time.perf_counter()
    try:
        with console.status(f"preparing {name}..."):
            path = registry.prepare(name, force=force)
    except registry.ModelError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from err
    console.print(f"{name} ready at {path} ({time.perf_counter() - start:.1f} s)")


@app.command()
def path(name: str) -> None:
    """Print the local path of a model (preparing it if needed); hub ids pass through."""
    try:
        typer.echo(registry.resolve(name))
    except registry.ModelError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from err
