"""`rlvr train` (MT-GRPO and relatives on any verifiers environment) and `rlvr demo` (the main job)."""

from __future__ import annotations

import dataclasses
import difflib
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import typer
from rich.console import Console

from rlvr.cli.evaluate import EnvArgsOption, fail, load_env_or_exit, parse_env_args

console = Console()
ALGOS = ("grpo", "grpo_mr", "mt_grpo", "ms_po", "mt_grpo_k", "turn_return")
REPO_CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def config_fields() -> dict[str, dataclasses.Field]:
    from rlvr.trainer import MTGRPOConfig

    return {f.name: f for f in dataclasses.fields(MTGRPOConfig) if f.init}


def check_keys(keys, where: str) -> None:
    """Unknown training keys fail with the closest valid name, before anything slow starts."""
    fields = config_fields()
    for key in keys:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else " See `rlvr train --help` and MTGRPOConfig."
            raise fail(f"unknown training option {key!r} in {where}.{hint}")


def coerce(key: str, text: str):
    """`--set key=value` values arrive as text: read them as TOML scalars (numbers, booleans, strings)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string option such as loss_type=ppo_clip


def read_config(path: Path | None) -> dict:
    """A TOML file: top-level env/model/algo, an [env_args] table and a [training] table (MTGRPOConfig fields)."""
    if path is None:
        return {}
    if not path.is_file():
        raise fail(f"--config {path} does not exist (examples: {REPO_CONFIGS / 'train'})")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise fail(f"--config {path} is not valid TOML: {err}") from err
    allowed = {"env", "model", "algo", "env_args", "training"}
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            raise fail(f"unknown top-level key {key!r} in {path}." + (f" Did you mean {close[0]!r}?" if close else
                       f" Allowed: {', '.join(sorted(allowed))}; training options go under [training]."))
    check_keys(data.get("training", {}), str(path))
    return data


def train(
    env: str | None = typer.Option(None, "--env", "-e", help="Environment id (see `rlvr env list`)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Model name or path (see `rlvr models list`)."),
    algo: str | None = typer.Option(None, "--algo", help=f"Advantage estimator: {', '.join(ALGOS)} (default mt_grpo)."),
    config: Path | None = typer.Option(None, "--config", "-c", help="TOML file (see configs/train/)."),
    overrides: list[str] = typer.Option([], "--set", "-s", help="Training option override KEY=VALUE (repeatable)."),
    env_args: str = EnvArgsOption,
    server: str | None = typer.Option(None, "--server", help="Attach to a running `rlvr serve` (its root URL)."),
    run_dir: Path | None = typer.Option(None, "--run-dir", "-o", help="Run directory (default runs/train-TIME)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest checkpoint in --run-dir."),
    num_processes: int = typer.Option(1, "--num-processes", help="Run under `accelerate launch` (CPU: gloo DDP)."),
) -> None:
    """Train a model on an environment with MT-GRPO (or another estimator); writes a run directory."""
    from rlvr import models

    data = read_config(config)
    env = env or data.get("env")
    model = model or data.get("model")
    algo = algo or data.get("algo", "mt_grpo")
    if not env or not model:
        raise fail("give --env and --model (or env/model in --config)")
    if algo not in ALGOS:
        close = difflib.get_close_matches(algo, ALGOS, n=1)
        raise fail(f"unknown --algo {algo!r}." + (f" Did you mean {close[0]!r}?" if close else f" Use one of {ALGOS}."))
    training = dict(data.get("training", {}))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--set {item!r}: write KEY=VALUE, e.g. --set learning_rate=1e-5")
        check_keys([key], "--set")
        training[key] = coerce(key, value)
    run_dir = run_dir or Path("runs") / f"train-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        models.resolve(model)
    except models.ModelError as err:
        raise fail(str(err)) from err
    args = {**data.get("env_args", {}), **parse_env_args(env_args), "estimator": algo}

    if num_processes > 1 and os.environ.get("ACCELERATE_LAUNCHED") is None:
        launch_distributed(num_processes, env, model, algo, training, args, server, run_dir, resume)
        return
    from rlvr.trainer import ConfigError, MTGRPOConfig, ServerError, run_training

    vf_env = load_env_or_exit(env, args)
    try:
        cfg = MTGRPOConfig(**{"output_dir": str(run_dir), "advantage_estimator": algo, **training})
        run_training(vf_env, model, cfg, server_url=server, run_dir=run_dir, env_args=args, resume=resume)
    except (ConfigError, ServerError) as err:
        raise fail(str(err)) from err
    console.print(f"run directory: {run_dir}  (rlvr analyze {run_dir})")


def launch_distributed(num_processes, env, model, algo, training, env_args, server, run_dir, resume) -> None:
    """Re-run this command under `accelerate launch`; the server is started once here, outside the workers."""
    import json

    from rlvr.serve import launch

    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_CONFIGS / "accelerate" / "cpu_ddp.yaml"), "--num_processes", str(num_processes),
        "-m", "rlvr.cli", "train", "--env", env, "--model", model, "--algo", algo, "--run-dir", str(run_dir),
        "--env-args", json.dumps(env_args), *[a for k, v in training.items() for a in ("--set", f"{k}={v}")],
        *(["--resume"] if resume else []),
    ]
    environ = dict(os.environ, ACCELERATE_LAUNCHED="1")

    def run(url: str) -> None:
        result = subprocess.run([*command, "--server", url], env=environ)
        if result.returncode:
            raise fail(f"accelerate launch exited with {result.returncode}", code=result.returncode)

    if server:
        run(server)
    else:
        with launch(model=model) as started:
            run(started.url)
    console.print(f"run directory: {run_dir}")


def demo(
    steps: int = typer.Option(None, "--steps", help="MT-GRPO steps (default: the demo's measured setting)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run directory (default runs/demo-TIME)."),
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Model to train."),
    eval_examples: int = typer.Option(None, "--eval-examples", help="Held-out questions per evaluation."),
) -> None:
    """The main job: evaluate SmolLM2-135M, train it with MT-GRPO, evaluate again; writes report.md and a plot."""
    from rlvr.demo import DemoSettings, run_demo

    settings = DemoSettings(model=model)
    if steps is not None:
        settings.steps = steps
    if eval_examples is not None:
        settings.eval_examples = eval_examples
        settings.env_args["num_eval_examples"] = eval_examples
    out = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    report = run_demo(settings, out)
    console.print(f"\n[bold green]report:[/bold green] {report}")


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(demo)
