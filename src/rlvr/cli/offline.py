"""`rlvr collect`: trajectories of a policy on an environment, for offline training (SFT, rejection sampling, OREO
with `rlvr train --algo sft|oreo --dataset DIR`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import typer

from rlvr.cli.common import (
    EnvArgsOption,
    EnvOption,
    MaxTokensOption,
    console,
    fail,
    load_env_or_exit,
    parse_env_args,
)


def collect(
    env: str = EnvOption,
    model: str = typer.Option(..., "--model", "-m", help="The policy: a model name or path (served here unless "
                              "--endpoint is given, which must serve the same model)."),
    url: str | None = typer.Option(None, "--endpoint", "-b", help="Root URL of a running `rlvr serve` of --model."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Trajectory directory (default runs/collect-TIME); "
                                    "an existing one is resumed."),
    num_examples: int = typer.Option(-1, "--num-examples", "-n", help="Prompts (-1: all of the split)."),
    rollouts_per_example: int = typer.Option(4, "--rollouts-per-example", "-r", help="Rollouts per prompt (N)."),
    split: str = typer.Option("train", "--split", help="train or eval."),
    env_args: str = EnvArgsOption,
    temperature: float = typer.Option(1.0, "--temperature", "-t", help="Sampling temperature."),
    max_tokens: int = MaxTokensOption,
    segmentation: str = typer.Option("auto", "--segmentation", help="Steps: 'line' (a line of reasoning), 'turn' "
                                     "(an assistant turn), or 'auto' (line for single-turn environments)."),
    prompts_per_request: int = typer.Option(4, "--prompts-per-request", help="Prompts generated together."),
    success_threshold: float = typer.Option(1.0, "--success-threshold", help="Reward that counts as a success."),
    max_concurrent: int = typer.Option(16, "--max-concurrent", help="Requests in flight."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed: every request gets a seed derived from it, the "
                             "prompt, the rollout and the turn (rlvr.seeding), so the same seed collects the same "
                             "trajectories."),
    unseeded: bool = typer.Option(False, "--unseeded", help="Sample without seeds (the server's own generator)."),
    dtype: str | None = typer.Option(None, "--dtype", help="The weights' dtype in the server started here, e.g. "
                                     "float32 to sample what `rlvr study` and `rlvr train` sample on CPU (default: "
                                     "vLLM's choice, bf16 on CPU). With --endpoint give it to that `rlvr serve`."),
) -> None:
    """Sample N rollouts per prompt and save them with rewards and step segmentation (resumable)."""
    import verifiers as vf
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.table import Table

    from rlvr import models
    from rlvr.offline.collect import CollectSettings, summary_rows
    from rlvr.offline.collect import collect as run_collect
    from rlvr.serve.launch import VLLM_DTYPES
    from rlvr.trajectories import SEGMENTATIONS, TrajectoryError

    if split not in ("train", "eval"):
        raise fail(f"--split must be 'train' or 'eval', got {split!r}")
    if rollouts_per_example < 1 or prompts_per_request < 1:
        raise fail("--rollouts-per-example and --prompts-per-request must be >= 1")
    if dtype is not None and dtype not in VLLM_DTYPES:
        raise fail(f"--dtype must be one of {', '.join(VLLM_DTYPES)}, got {dtype!r}")
    if dtype is not None and url is not None:
        raise fail(f"--dtype {dtype} with --endpoint: the server at {url} already holds its weights in its own "
                   f"dtype; start it with `rlvr serve --model {model} --dtype {dtype}` and drop --dtype here")
    args = parse_env_args(env_args)
    vf_env = load_env_or_exit(env, args)
    if segmentation == "auto":
        segmentation = "line" if isinstance(vf_env, vf.SingleTurnEnv) else "turn"
    if segmentation not in SEGMENTATIONS:
        raise fail(f"--segmentation must be auto, line or turn, got {segmentation!r}")
    try:
        models.resolve(model)
    except models.ModelError as err:
        raise fail(str(err)) from err
    settings = CollectSettings(env=env, model=model, env_args=args, split=split, num_examples=num_examples,
                               rollouts_per_example=rollouts_per_example, temperature=temperature,
                               max_tokens=max_tokens, segmentation=segmentation,
                               prompts_per_request=prompts_per_request, success_threshold=success_threshold,
                               seed=None if unseeded else seed, dtype=dtype)
    out = out or Path("runs") / f"collect-{time.strftime('%Y%m%d-%H%M%S')}"
    dataset = vf_env.get_dataset(num_examples) if split == "train" else vf_env.get_eval_dataset(num_examples)

    groups = []
    progress = Progress(TextColumn("[bold]collect"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        TextColumn("{task.fields[info]}"), console=console)

    def on_group(group) -> None:
        groups.append(group)
        rewards = [r for g in groups for r in g.rewards]
        rate = sum(r >= success_threshold for r in rewards) / len(rewards)
        progress.update(task, advance=1, info=f"success {rate:.2f} over {len(rewards)} trajectories")

    with progress, rollout_client(model, url, settings, max_concurrent) as client:
        task = progress.add_task("collect", total=len(dataset), info="")
        try:
            run_collect(vf_env, client, settings, out, on_group=on_group)
        except TrajectoryError as err:
            raise fail(str(err)) from err
    table = Table(title=f"{env} x {model}: {out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in summary_rows(groups, success_threshold):
        table.add_row(name, value)
    console.print(table)
    console.print(f"trajectories: {out}/predictions.jsonl and {out}/dataset  "
                  f"(rlvr train --algo oreo --dataset {out} --model {model})")


@contextmanager
def rollout_client(model: str, url: str | None, settings, max_concurrent: int) -> Iterator:
    """A RolloutClient on a running server (--endpoint) or on one started for the collection."""
    from transformers import AutoTokenizer

    from rlvr import models
    from rlvr.serve import launch
    from rlvr.trainer.rollout_client import RolloutClient, ServerError

    with ExitStack() as stack:
        if url is None:
            console.print(f"starting rlvr serve for {model} (about a minute on CPU)...")
            url = stack.enter_context(launch(model=model, dtype=settings.dtype)).url
        tokenizer = AutoTokenizer.from_pretrained(models.resolve(model))
        try:
            client = RolloutClient(url, model, tokenizer, sampling_args=settings.sampling_args(),
                                   max_concurrent=max_concurrent, timeout=600.0, sync="cpu")
        except ServerError as err:
            raise fail(str(err)) from err
        stack.callback(client.close)
        yield client


def merge_trajectories(
    sources: list[Path] = typer.Argument(..., help="Trajectory directories (rlvr collect, an expert export)."),
    out: Path = typer.Option(..., "--out", "-o", help="The merged trajectory directory (replaced if it exists)."),
    segmentation: str = typer.Option("turn", "--segmentation", help="Steps of records that have none: 'turn' "
                                     "(agents) or 'line'."),
) -> None:
    """Put several trajectory directories into one, e.g. expert and policy trajectories for OREO."""
    from rlvr.trajectories import SEGMENTATIONS, TrajectoryError
    from rlvr.trajectories import merge_trajectories as merge

    if segmentation not in SEGMENTATIONS:
        raise fail(f"--segmentation must be turn or line, got {segmentation!r}")
    try:
        merged = merge(sources, out, segmentation)
    except TrajectoryError as err:
        raise fail(str(err)) from err
    wins = sum(t.reward >= 1.0 for t in merged)
    console.print(f"{len(merged)} trajectories ({wins} with reward >= 1) from {len(sources)} sources: {out}")


def offline_plan(algo: str, dataset: str | None, model: str | None) -> bool:
    """Whether `rlvr train` trains offline (from --dataset); fails when the algorithm and --dataset disagree."""
    from rlvr.trainer.recipes import config_class

    offline = getattr(config_class(algo), "offline", False)
    if offline and dataset is None:
        raise fail(f"--algo {algo} trains from collected trajectories: give --dataset DIR (see `rlvr collect`)")
    if dataset is not None and not offline:
        raise fail(f"--dataset is for the offline algorithms (sft, oreo); --algo {algo} generates its own rollouts")
    if offline and not model:
        raise fail("give --model: the policy to start from (a model name, path, or a previous run's final/)")
    return offline


def run_offline_plan(plan, config) -> None:
    """`rlvr train --algo sft|oreo --dataset DIR`: train, with errors that say what to fix."""
    from rlvr.offline.run import train_offline
    from rlvr.trainer import ConfigError, ResumeError
    from rlvr.trajectories import TrajectoryError

    try:
        trainer = train_offline(plan.model, config, plan.dataset, resume=plan.resume)
    except (TrajectoryError, ConfigError, ResumeError) as err:
        raise fail(str(err)) from err
    if trainer.too_long:
        console.print(f"[yellow]{trainer.too_long} trajectories longer than max_length were left out[/yellow]")


def register(app: typer.Typer) -> None:
    app.command()(collect)
    app.command("merge-trajectories")(merge_trajectories)
