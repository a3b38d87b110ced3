"""What the command modules share: options, error exits, environment loading and model endpoints."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from rlvr import config_files, evaluation

if TYPE_CHECKING:
    from rlvr.serve.launch import KeptServer

console = Console()

EnvOption = typer.Option(..., "--env", "-e", help="Environment id, e.g. vf-triviaqa-search (see `rlvr env list`).")
EnvArgsOption = typer.Option("{}", "--env-args", "-a", help='JSON keyword arguments for load_environment.')
NumOption = typer.Option(5, "--num-examples", "-n", help="Examples to run (-1: all).")
RolloutsOption = typer.Option(1, "--rollouts-per-example", "-r", help="Rollouts per example.")
ConcurrencyOption = typer.Option(8, "--max-concurrent", min=1, help="Requests in flight at once (a GPU server takes many; seeded rollouts are the same up to the server's batch numerics).")
TemperatureOption = typer.Option(0.0, "--temperature", "-t", help="Sampling temperature (0: greedy).")
MaxTokensOption = typer.Option(256, "--max-tokens", help="Max new tokens per assistant turn.")


def fail(message: str, code: int = 2) -> typer.Exit:
    # soft_wrap: the one-line error stays one line in a log or a pipe (rich otherwise breaks it at 80 columns)
    console.print(f"[red]error:[/red] {message}", soft_wrap=True)
    return typer.Exit(code)


def parse_env_args(text: str) -> dict:
    return config_files.parse_env_args(text, fail)


@contextmanager
def endpoint(model: str | None, url: str | None, envs: tuple = ()) -> Iterator[tuple[str, str, KeptServer | None]]:
    """(base_url, served model name, the server when started here): attach to ``url``, or serve ``model`` with
    `rlvr serve` for the duration (restarted if it dies: `rlvr.evaluation.run_rollouts(server=...)`), with the
    flags the environments `envs` need (`rlvr.evaluation.server_flags`)."""
    if (model is None) == (url is None):
        raise fail("give exactly one of --model (start a server here) or --endpoint URL (use a running one)")
    if url is not None:
        base_url = url.rstrip("/")
        base_url = base_url if base_url.endswith("/v1") else base_url + "/v1"
        try:
            evaluation.check_endpoint(base_url)
        except ConnectionError as err:
            raise fail(str(err)) from err
        yield base_url, served_model_name(base_url), None
        return
    from rlvr import models
    from rlvr.serve.launch import keep_serving

    try:
        models.resolve(model)
    except models.ModelError as err:
        raise fail(str(err)) from err
    console.print(f"starting rlvr serve for {model} (about a minute on CPU)...")
    with keep_serving(model, extra_args=evaluation.server_flags(*envs)) as server:
        yield server.base_url, server.model, server


def served_model_name(base_url: str) -> str:
    import httpx

    data = httpx.get(base_url + "/models", timeout=10).json()["data"]
    return data[0]["id"]


def load_env_or_exit(env: str, env_args: dict):
    from rlvr.serve.protocol import ServerError

    try:
        return evaluation.load_env(env, env_args)
    except (evaluation.EnvironmentLoadError, ServerError) as err:  # ServerError: also rlvr.v1.V1Error, one line
        raise fail(str(err)) from err


def default_out_dir(kind: str, env: str, model: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("outputs") / kind / f"{env}--{model.replace('/', '--')}" / stamp


def sampling(temperature: float, max_tokens: int) -> dict:
    return {"temperature": temperature, "max_tokens": max_tokens}


