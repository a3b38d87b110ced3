"""`rlvr env list | init | build | publish | install`: share environments as pip packages through an index."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from packaging.requirements import Requirement
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlvr import hub

app = typer.Typer(help="Create, build, publish and install environment packages.", no_args_is_help=True)
console = Console()

ENVIRONMENTS = typer.Option(Path("environments"), "--path", "-p", help="Folder holding the environment projects.")


def _fail(err: hub.HubError) -> typer.Exit:
    # escape: messages quote TOML tables such as [tool.hatch.build.targets.wheel], which rich reads as markup
    console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False)
    return typer.Exit(1)


@app.command("list")
def list_envs() -> None:
    """Installed environments (modules that vf.load_environment can load) and their versions."""
    table = Table(title="installed environments")
    for column in ("name", "version", "module", "location"):
        table.add_column(column)
    for env in hub.installed_environments():
        table.add_row(env.name, env.version, env.module, env.location + (" (editable)" if env.editable else ""))
    console.print(table)


@app.command()
def init(name: str, path: Path = ENVIRONMENTS) -> None:
    """Scaffold a new environment project at PATH/vf_<name> (packaged so its wheel installs cleanly)."""
    try:
        target = hub.init_environment(name, path)
    except hub.HubError as err:
        raise _fail(err) from err
    console.print(f"created {target}; next: `pip install -e {target}`, then `rlvr env build {name}`")


@app.command()
def build(
    name: str = typer.Argument(..., help="Environment name (gsm8k-code, vf-gsm8k-code) or project folder."),
    path: Path = ENVIRONMENTS,
    check: bool = typer.Option(True, help="Install the wheel into a fresh venv and load it from there."),
) -> None:
    """Build wheel and sdist into the project's dist/, then check the wheel in a fresh venv."""
    try:
        project = hub.find_project(name, path)
        with console.status(f"building {project.name}..."):
            built = hub.build(project)
        console.print(f"built {built.wheel.name} and {built.sdist.name} in {built.wheel.parent}")
        if check:
            with console.status(f"installing {built.wheel.name} into a fresh venv and loading it..."):
                report = hub.check_wheel(built.wheel)
            console.print(f"check passed: {report.name} {report.version} installs into a fresh venv, no "
                          f"pyproject.toml at its site-packages root, vf.load_environment gives a {report.env_class}")
    except hub.HubError as err:
        raise _fail(err) from err


@app.command()
def publish(
    name: str = typer.Argument(..., help="Environment name or project folder (built with `rlvr env build`)."),
    repository: str = typer.Option(..., "--repository", "-r", help="Upload URL of the index (twine's --repository-url)."),
    index_url: str = typer.Option(None, help="Simple index used to look for existing versions "
                                             "(default: REPOSITORY/simple/)."),
    path: Path = ENVIRONMENTS,
) -> None:
    """Upload the built wheel and sdist of the current version; refuses a version already on the index.

    Credentials: TWINE_USERNAME and TWINE_PASSWORD, or the keyring (read by twine, never printed).
    """
    try:
        project = hub.find_project(name, path)
        info = hub.project_info(project)
        files = hub.dist_files(project / "dist", info)
        hub.publish([files.wheel, files.sdist], repository, index_url=index_url)
    except hub.HubError as err:
        raise _fail(err) from err
    console.print(f"published {info.name} {info.version} to {repository}")


@app.command()
def install(
    name: str = typer.Argument(..., help="Distribution to install, optionally with a version: vf-foo==0.2.0."),
    index_url: str = typer.Option(None, help="Simple index to install from (default: pip's configuration)."),
    python: Path = typer.Option(None, help="Install into the venv of this interpreter (default: this one)."),
    check: bool = typer.Option(True, help="Afterwards, load the environment with verifiers in that venv."),
) -> None:
    """pip-install an environment from an index; fails when pip fails."""
    try:
        hub.pip_install([name], python=python, index_url=index_url)
        if check:
            with console.status("loading it with vf.load_environment..."):
                report = hub.verify_installed(python or Path(sys.executable), Requirement(name).name)
            console.print(f"installed {report.name} {report.version}: vf.load_environment gives a {report.env_class}")
        else:
            console.print(f"installed {name}")
    except hub.HubError as err:
        raise _fail(err) from err
