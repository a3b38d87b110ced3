"""`rlvr evaluate`, `rlvr predict` and `rlvr benchmark`: rollouts against a served model, saved for analysis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from rlvr import evaluation
from rlvr.cli.common import (
    ConcurrencyOption,
    EnvArgsOption,
    EnvOption,
    MaxTokensOption,
    NumOption,
    RolloutsOption,
    TemperatureOption,
    console,
    default_out_dir,
    endpoint,
    fail,
    load_env_or_exit,
    parse_env_args,
    sampling,
)
from rlvr.serve.protocol import ServerError  # also rlvr.v1.V1Error: a v1 environment's one-line failures

SeedOption = typer.Option(0, "--seed", help="Sampling seed: every request gets a seed derived from it, the example, "
                          "the rollout and the turn (rlvr.seeding), so the same weights and seed give the same "
                          "rollouts; value-guided search seeds its samples from it too.")
UnseededOption = typer.Option(False, "--unseeded", help="Sample without seeds (the server's own generator).")
# The sampling options' command-line defaults, for callers from Python (scripts/*_musique.py): typer fills an
# option's default only on the command line, a Python call would get the OptionInfo object itself.
SAMPLING_DEFAULTS = {"max_concurrent": ConcurrencyOption.default, "seed": SeedOption.default,
                     "unseeded": UnseededOption.default}


def evaluate(
    env: str = EnvOption,
    model: str | None = typer.Option(None, "--model", "-m", help="Model name or path: serve it here."),
    url: str | None = typer.Option(None, "--endpoint", "-b", help="OpenAI-compatible base URL of a running server."),
    num_examples: int = NumOption,
    rollouts_per_example: int = RolloutsOption,
    env_args: str = EnvArgsOption,
    temperature: float = TemperatureOption,
    max_tokens: int = MaxTokensOption,
    max_concurrent: int = ConcurrencyOption,
    out: Path | None = typer.Option(None, "--out", "-o", help="Results directory (default outputs/evals/...)."),
    search: str | None = typer.Option(None, "--search", help="Value-guided search: beam (step-level, reasoning) or "
                                      "best_of_k (per turn, agents); needs --value-model."),
    value_model: Path | None = typer.Option(None, "--value-model", help="An OREO run's value/ directory."),
    beam_width: int = typer.Option(4, "--beam-width", help="Search width: beams kept and samples per step (K)."),
    seed: int = SeedOption,
    unseeded: bool = UnseededOption,
) -> None:
    """Evaluate a model on an environment: a metrics table and results in vf-eval's layout."""
    args = parse_env_args(env_args)
    vf_env = load_env_or_exit(env, args)
    with endpoint(model, url, (vf_env,)) as (base_url, served, server):
        client = None
        if search is not None:
            from rlvr.offline.search import SearchError, search_client

            try:
                client = search_client(base_url, served, model or served, value_model, search, beam_width)
            except (SearchError, TypeError) as err:
                raise fail(f"--search {search}: {err}") from err
        try:
            results = evaluation.run_rollouts(
                vf_env, base_url=base_url, model=served, num_examples=num_examples,
                rollouts_per_example=rollouts_per_example, sampling_args=sampling(temperature, max_tokens),
                client=client, sampling_seed=None if unseeded else seed, max_concurrent=max_concurrent, server=server,
            )
        except (ConnectionError, evaluation.ServerLost, ServerError) as err:
            raise fail(str(err)) from err
    results["metadata"]["env_id"], results["metadata"]["env_args"] = env, args
    if search is not None:
        results["metadata"]["search"] = {"mode": search, "value_model": str(value_model), "width": beam_width}
    out = out or default_out_dir("evals", env, served)
    evaluation.save_results(results, out)
    summary = evaluation.summarize(evaluation.rollouts_of(results))
    console.print(evaluation.summary_table(summary, f"{env} x {served} ({len(results['reward'])} rollouts)"))
    console.print(f"results: {out}")


def predict(
    env: str = EnvOption,
    model: str | None = typer.Option(None, "--model", "-m", help="Model name or path (e.g. a run's checkpoint)."),
    url: str | None = typer.Option(None, "--endpoint", "-b", help="OpenAI-compatible base URL of a running server."),
    split: str = typer.Option("eval", "--split", help="eval or train."),
    num_examples: int = NumOption,
    rollouts_per_example: int = RolloutsOption,
    env_args: str = EnvArgsOption,
    temperature: float = TemperatureOption,
    max_tokens: int = MaxTokensOption,
    max_concurrent: int = ConcurrencyOption,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default outputs/predictions/...)."),
    seed: int = SeedOption,
    unseeded: bool = UnseededOption,
) -> None:
    """Roll out a model and save every rollout: JSONL and a Hugging Face dataset on disk."""
    if split not in {"eval", "train"}:
        raise fail(f"--split must be 'eval' or 'train', got {split!r}")
    vf_env = load_env_or_exit(env, parse_env_args(env_args))
    with endpoint(model, url, (vf_env,)) as (base_url, served, server):
        try:
            results = evaluation.run_rollouts(
                vf_env, base_url=base_url, model=served, num_examples=num_examples,
                rollouts_per_example=rollouts_per_example, sampling_args=sampling(temperature, max_tokens),
                split=split, sampling_seed=None if unseeded else seed, max_concurrent=max_concurrent, server=server,
            )
        except (evaluation.ServerLost, ServerError) as err:
            raise fail(str(err)) from err
    out = out or default_out_dir("predictions", env, served)
    evaluation.save_predictions(evaluation.prediction_records(results), out)
    console.print(f"{len(results['reward'])} rollouts -> {out}/predictions.jsonl and {out}/dataset")


def benchmark(
    models: str = typer.Option(..., "--models", help="Comma-separated model names or paths."),
    envs: str = typer.Option(..., "--envs", help="Comma-separated environment ids."),
    retrievers: str | None = typer.Option(
        None, "--retrievers", help="Comma-separated retrievers (bm25,semantic,hybrid,golden) for envs that take one."
    ),
    num_examples: int = NumOption,
    rollouts_per_example: int = RolloutsOption,
    env_args: str = EnvArgsOption,
    temperature: float = TemperatureOption,
    max_tokens: int = MaxTokensOption,
    max_concurrent: int = ConcurrencyOption,
    out: Path | None = typer.Option(None, "--out", "-o", help="Results directory (default outputs/benchmark-TIME)."),
    seed: int = SeedOption,
    unseeded: bool = UnseededOption,
) -> None:
    """The model x environment (x retriever) grid, one evaluation per cell, into one results directory."""
    out = out or Path("outputs") / f"benchmark-{time.strftime('%Y%m%d-%H%M%S')}"
    base_args = parse_env_args(env_args)
    retriever_list = [r.strip() for r in retrievers.split(",")] if retrievers else [None]
    env_list = [e.strip() for e in envs.split(",") if e.strip()]
    cells = []
    for model in [m.strip() for m in models.split(",") if m.strip()]:
        with endpoint(model, None, tuple(env_list)) as (base_url, served, server):
            for env in env_list:
                for retriever in retriever_list:
                    args = dict(base_args, **({"retriever": retriever} if retriever else {}))
                    vf_env = load_env_or_exit(env, args)
                    label = f"{env}" + (f"--{retriever}" if retriever else "")
                    console.rule(f"{model} x {label}")
                    try:
                        results = evaluation.run_rollouts(
                            vf_env, base_url=base_url, model=served, num_examples=num_examples,
                            rollouts_per_example=rollouts_per_example, sampling_args=sampling(temperature, max_tokens),
                            sampling_seed=None if unseeded else seed, max_concurrent=max_concurrent, server=server,
                        )
                    except (evaluation.ServerLost, ServerError) as err:
                        raise fail(f"{model} x {label}: {err}") from err
                    results["metadata"]["env_id"], results["metadata"]["env_args"] = env, args
                    evaluation.save_results(results, out / model.replace("/", "--") / label)
                    stat = evaluation.mean_stderr(results["reward"])
                    cells.append({"model": model, "env": env, "retriever": retriever, "reward": stat.mean,
                                  "stderr": stat.stderr, "n": stat.n,
                                  **{k: float(sum(v) / len(v)) for k, v in results["metrics"].items() if v}})
    from rlvr.io import atomic_write_text

    atomic_write_text(out / "grid.jsonl", "".join(json.dumps(c) + "\n" for c in cells))
    console.print(f"{len(cells)} cells -> {out} (rlvr analyze {out} for the table and plots)")


def register(app: typer.Typer) -> None:
    app.command()(evaluate)
    app.command()(predict)
    app.command()(benchmark)
