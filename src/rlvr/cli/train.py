"""`rlvr train` (any algorithm of `rlvr.trainer.ALGORITHMS` on any verifiers environment) and `rlvr demo`.

The command resolves one `TrainPlan` (TOML file, then command-line options on top) before anything slow starts.
Environment arguments carry environment settings only; the algorithm and its parameters live in the training
options. With `--num-processes N` the plan is written to the run directory and each accelerate worker reads it back,
so the workers train with exactly the resolved values. Across machines (`--num-machines`, docs/multinode.md) every
machine resolves its own plan and writes its own plan file; the ranks compare them (and their packages) at start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from rlvr.cli.common import EnvArgsOption, console, fail, load_env_or_exit, parse_env_args
from rlvr.config_files import check_keys as check_table_keys
from rlvr.config_files import did_you_mean, read_toml
from rlvr.trainer.nodes import DEFAULT_PORT, NodeError, Nodes

PLAN_FILE = "launch_plan.json"
RANKS_FILE = "ranks.json"  # written by rank 0 of a --num-processes run: every rank's machine, host and packages
LAUNCHED_ENV = "RLVR_LAUNCH_PLAN"  # set for accelerate workers: the plan file they train from
TOML_KEYS = ("env", "model", "algo", "env_args", "training", "dataset")


@dataclass
class TrainPlan:
    """Everything one training run needs, resolved and JSON-serialisable."""

    env: str
    model: str
    algo: str
    run_dir: str
    env_args: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)  # fields of the algorithm's configuration class
    server: str | None = None
    resume: bool = False
    dataset: str | None = None  # offline algorithms (sft, oreo): the trajectory directory they train on


def algorithms() -> dict:
    from rlvr.trainer.recipes import ALGORITHMS

    return ALGORITHMS


def config_fields(algo: str) -> dict[str, dataclasses.Field]:
    from rlvr.trainer.recipes import config_class

    return {f.name: f for f in dataclasses.fields(config_class(algo)) if f.init}


def check_algo(algo: str) -> None:
    from rlvr.trainer.recipes import algorithm

    known = algorithms()
    try:
        algorithm(algo)
    except KeyError:
        raise fail(f"unknown --algo {algo!r}." + (did_you_mean(algo, known) or f" Use one of {', '.join(known)}.")
                   + " An estimator of your own: its import path, e.g. --algo my_credit.estimators.mine") from None
    except ValueError as err:
        raise fail(f"--algo {algo!r}: {err}") from None


def check_keys(keys, algo: str, where: str) -> None:
    """Unknown training keys fail with the closest valid name, before anything slow starts."""
    fields = config_fields(algo)
    for key in keys:
        if key not in fields:
            hint = did_you_mean(key, fields) or " See `rlvr train --help` and the configuration class."
            raise fail(f"unknown training option {key!r} in {where} (algo {algo!r}).{hint}")


def coerce(text: str):
    """`--set key=value` values arrive as text: read them as TOML scalars (numbers, booleans, strings)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string option such as loss_type=ppo_clip


def apply_override(training: dict[str, Any], item: str, algo: str) -> None:
    """`KEY=VALUE`, or `TABLE.KEY=VALUE` for a table option such as `credit.coef=0.5`."""
    key, sep, value = item.partition("=")
    if not sep:
        raise fail(f"--set {item!r}: write KEY=VALUE, e.g. --set learning_rate=1e-5 or --set credit.coef=0.5")
    table, dot, name = key.partition(".")
    check_keys([table], algo, "--set")
    if dot:
        if config_fields(algo)[table].default_factory is not dict:
            raise fail(f"--set {item!r}: {table} is not a table option")
        training[table] = {**training.get(table, {}), name: coerce(value)}
    else:
        training[key] = coerce(value)


def read_config(path: Path | None) -> dict:
    """A TOML file: top-level env/model/algo, an [env_args] table and a [training] table (configuration fields,
    with the algorithm's parameters in [training.credit])."""
    if path is None:
        return {}
    data = read_toml(path, "--config", "configs/train/ in the rlvr repository", fail)
    check_table_keys(data, TOML_KEYS, str(path), fail, hint=" Training options go under [training].")
    return data


def resolve_plan(config: Path | None, env: str | None, model: str | None, algo: str | None, overrides: list[str],
                 env_args: str, server: str | None, run_dir: Path | None, resume: bool,
                 dataset: str | None = None) -> TrainPlan:
    data = read_config(config)
    algo = algo or data.get("algo", "mt_grpo")
    check_algo(algo)
    env, model, dataset = env or data.get("env"), model or data.get("model"), dataset or data.get("dataset")
    from rlvr.cli.offline import offline_plan

    if not offline_plan(algo, dataset, model) and (not env or not model):
        raise fail("give --env and --model (or env/model in --config)")
    training = dict(data.get("training", {}))
    check_keys(training, algo, str(config))
    for item in overrides:
        apply_override(training, item, algo)
    run_dir = run_dir or Path("runs") / f"train-{time.strftime('%Y%m%d-%H%M%S')}"
    return TrainPlan(env=env or "", model=model, algo=algo, run_dir=str(run_dir), server=server, resume=resume,
                     env_args={**data.get("env_args", {}), **parse_env_args(env_args)}, training=training,
                     dataset=dataset)


def run_plan(plan: TrainPlan) -> None:
    from rlvr import models
    from rlvr.trainer import ConfigError, ResumeError, ServerError, build_config, run_training
    from rlvr.trainer.checkpoint import CheckpointWriteError

    try:
        models.resolve(plan.model)
    except models.ModelError as err:
        raise fail(str(err)) from err
    try:
        cfg = build_config(plan.algo, {"output_dir": plan.run_dir, **plan.training})
    except (ConfigError, TypeError) as err:
        raise fail(f"training options: {err}") from err
    if plan.dataset:
        from rlvr.cli.offline import run_offline_plan

        return run_offline_plan(plan, cfg)
    vf_env = load_env_or_exit(plan.env, plan.env_args)
    try:
        run_training(vf_env, plan.model, cfg, server_url=plan.server, run_dir=plan.run_dir,
                     env_args=plan.env_args, resume=plan.resume)
    except (ConfigError, ServerError, ResumeError, CheckpointWriteError) as err:
        raise fail(str(err)) from err


def train(
    env: str | None = typer.Option(None, "--env", "-e", help="Environment id (see `rlvr env list`)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Model name or path (see `rlvr models list`)."),
    algo: str | None = typer.Option(None, "--algo", help="Algorithm (default mt_grpo); `rlvr train --list` shows all."),
    config: Path | None = typer.Option(None, "--config", "-c", help="TOML file (see configs/train/)."),
    overrides: list[str] = typer.Option([], "--set", "-s", help="Training option KEY=VALUE, or credit.KEY=VALUE."),
    env_args: str = EnvArgsOption,
    server: str | None = typer.Option(None, "--server", help="Attach to a running `rlvr serve` (its root URL)."),
    dataset: str | None = typer.Option(None, "--dataset", help="Trajectory directory (`rlvr collect`) for the "
                                       "offline algorithms: sft, oreo."),
    run_dir: Path | None = typer.Option(None, "--run-dir", "-o", help="Run directory (default runs/train-TIME)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest checkpoint in --run-dir."),
    num_processes: int = typer.Option(1, "--num-processes", help="Training processes under `accelerate launch`."),
    accelerate_config: Path | None = typer.Option(
        None, "--accelerate-config",
        help="accelerate config for --num-processes (default: DeepSpeed ZeRO-2 in bf16 on GPUs, CPU DDP otherwise)."),
    num_machines: int = typer.Option(1, "--num-machines", help="Machines training together: run rlvr train on "
                                     "each with the same options and its own --machine-rank (docs/multinode.md)."),
    machine_rank: int = typer.Option(0, "--machine-rank", help="This machine's rank, 0 to --num-machines - 1; 0 "
                                     "hosts the rendezvous and the rank that talks to the rollout server."),
    main_process_ip: str | None = typer.Option(None, "--main-process-ip", help="Address of machine 0 as every "
                                               "machine reaches it (with --num-machines > 1)."),
    main_process_port: int = typer.Option(DEFAULT_PORT, "--main-process-port", help="Rendezvous port on machine 0."),
    list_algos: bool = typer.Option(False, "--list", help="List the algorithms and exit."),
) -> None:
    """Train a model on an environment (MT-GRPO and relatives); writes a run directory."""
    if list_algos:
        for name, spec in algorithms().items():
            console.print(f"[bold]{name:12}[/bold] {spec.summary}")
        return
    launched = os.environ.get(LAUNCHED_ENV)
    if launched:  # an accelerate worker: the parent resolved the plan
        run_launched(TrainPlan(**json.loads(Path(launched).read_text())))
        return
    nodes = Nodes(num_machines, machine_rank, main_process_ip, main_process_port)
    try:
        nodes.check(num_processes, server=server, run_dir=None if run_dir is None else str(run_dir),
                    offline=bool(dataset))
    except NodeError as err:
        raise fail(str(err)) from err
    plan = resolve_plan(config, env, model, algo, overrides, env_args, server, run_dir, resume, dataset)
    if num_processes > 1 or nodes.several:
        if plan.dataset:
            raise fail("--num-processes with --dataset: the offline algorithms (sft, oreo) train in one process")
        # machines may start in different working directories: the ranks compare absolute paths
        plan = dataclasses.replace(plan, run_dir=str(Path(plan.run_dir).resolve()))
        launch_distributed(plan, num_processes, accelerate_config, nodes)
    else:
        run_plan(plan)
    console.print(f"run directory: {plan.run_dir}  (rlvr analyze {plan.run_dir})")


def run_launched(plan: TrainPlan) -> None:
    """One rank of a `--num-processes` run: agree with every other rank on the run (`rlvr.trainer.nodes.agree`),
    train, and stop with one line when another machine's ranks are gone mid-run."""
    from rich.markup import escape

    from rlvr.io import atomic_write_json
    from rlvr.trainer.checkpoint import newest_checkpoint
    from rlvr.trainer.faults import resume_command
    from rlvr.trainer.nodes import agree, lost_peers_message, peer_lost, rank_facts

    # one message per machine: its first rank prints, the others stop quietly with the same status (messages are
    # escaped: gloo's start with "[/path/file.cc:123]", which rich would read as a closing tag)
    speaks = os.environ.get("LOCAL_RANK", "0") == "0"
    several = int(os.environ.get("WORLD_SIZE", "1")) > 1
    newest = newest_checkpoint(Path(plan.run_dir)) if plan.resume else None
    facts = rank_facts(dataclasses.asdict(plan), num_machines=int(os.environ.get("GROUP_WORLD_SIZE", 1)),
                       resume_from=newest.name if newest else None, plan_name=PLAN_FILE)
    try:
        every = agree(facts)
    except NodeError as err:
        raise (fail(escape(str(err))) if speaks else typer.Exit(2)) from err
    if os.environ.get("RANK") == "0":  # who trained: each rank's machine, host, packages and view of the server
        atomic_write_json(Path(plan.run_dir) / RANKS_FILE, [
            {**f["where"], "versions": f["agree"]["versions"], "server": f["server"]} for f in every])
    try:
        run_plan(plan)
    except RuntimeError as err:
        if not several or not peer_lost(err):
            raise
        message = lost_peers_message(err, plan.run_dir, resume_command(plan.run_dir))
        raise (fail(escape(message), code=1) if speaks else typer.Exit(1)) from err


def launch_distributed(plan: TrainPlan, num_processes: int, accelerate_config: Path | None,
                       nodes: Nodes = Nodes()) -> None:
    """Run the plan in `num_processes` workers (`launch_command`); the rollout server is started once here, outside
    the workers, and restarted here if it dies (`LauncherServer`). Across machines this runs on every machine, each
    writing its own plan file; the server is the user's (`--server`, on its own host)."""
    from rlvr.evaluation import server_flags
    from rlvr.io import atomic_write_json
    from rlvr.serve import launch
    from rlvr.trainer import ConfigError
    from rlvr.trainer.faults import LauncherServer
    from rlvr.trainer.nodes import plan_file as machine_plan_file
    from rlvr.trainer.nodes import wait_for_main
    from rlvr.trainer.run import accelerate_config as choose_config
    from rlvr.trainer.run import launch_command, serving_dtype

    bf16 = bool(plan.training.get("bf16", False))
    try:
        config_file = choose_config(num_processes, accelerate_config, bf16=bf16, nodes=nodes)
    except ConfigError as err:
        raise fail(str(err)) from err

    def run(url: str, supervise=lambda: None) -> None:
        plan_file = machine_plan_file(plan.run_dir, nodes.machine_rank, PLAN_FILE)
        atomic_write_json(plan_file, dataclasses.asdict(dataclasses.replace(plan, server=url)))
        try:
            wait_for_main(nodes)
        except NodeError as err:
            raise fail(str(err)) from err
        command, env = launch_command(config_file, num_processes, ["-m", "rlvr.cli", "train"], nodes)
        workers = subprocess.Popen(command, env={**os.environ, **env, LAUNCHED_ENV: str(plan_file.resolve())})
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reached the ranks too: they stop with a checkpoint
            while workers.poll() is None:
                supervise()
                time.sleep(1.0)
        if workers.wait():
            raise fail(f"{command[2]} exited with {workers.returncode}", code=workers.returncode)

    if plan.server:
        run(plan.server)
    else:
        with contextlib.ExitStack() as stack:
            server = LauncherServer(lambda port: stack.enter_context(
                launch(model=plan.model, port=port, dtype=serving_dtype(bf16), extra_args=server_flags(plan.env))))
            run(server.server.url, server.check)


def demo(
    steps: int = typer.Option(None, "--steps", help="Training steps (default: the demo's measured setting)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run directory (default runs/demo-TIME)."),
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Model to train."),
    eval_examples: int = typer.Option(None, "--eval-examples", help="Held-out questions per evaluation."),
    seed: int = typer.Option(0, "--seed", help="Training and sampling seed (benchmarks/demo_seeds.py runs 0-4)."),
) -> None:
    """The main job: evaluate SmolLM2-135M, train it with MT-GRPO, evaluate again; writes report.md and a plot."""
    from rlvr.demo import DemoSettings, run_demo

    settings = DemoSettings(model=model, seed=seed)
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
