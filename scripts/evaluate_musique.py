"""Evaluate, benchmark and analyze on MuSiQue-style multi-hop retrieval (vf-musique) with the flags of the
RLVR-on-MuSiQue design. A thin wrapper: every command calls the `rlvr` CLI function of the same name.

    .venv/bin/python scripts/evaluate_musique.py evaluate --model smollm2-135m --retriever hybrid --num-examples 50
    .venv/bin/python scripts/evaluate_musique.py benchmark --models tiny-random,smollm2-135m --retrievers bm25,golden
    .venv/bin/python scripts/evaluate_musique.py analyze outputs/benchmark-...
"""

from __future__ import annotations

from pathlib import Path

import typer
from train_musique import (  # the sibling script: same flags, same env_args
    ENV,
    DataPathOption,
    DatasetOption,
    RetrieverOption,
    VerboseOption,
    env_args,
    set_verbosity,
    split_of,
)

from rlvr.cli import analyze as rlvr_analyze
from rlvr.cli import evaluate as rlvr_evaluate

app = typer.Typer(help=__doc__.split("\n\n")[0], no_args_is_help=True, pretty_exceptions_show_locals=False)

NumOption = typer.Option(50, "--num-examples", "-n", help="Questions to run (-1: all).")
MaxTokensOption = typer.Option(256, "--max-tokens", help="Max new tokens per assistant turn.")


@app.command()
def evaluate(
    model: str | None = typer.Option(None, "--model", "-m", help="Model name or path: serve it here."),
    endpoint: str | None = typer.Option(None, "--endpoint", "-b", help="Base URL of a running server instead."),
    dataset_split: str = typer.Option("validation", "--dataset-split", help="validation (eval) or train."),
    num_examples: int = NumOption,
    rollouts_per_example: int = typer.Option(1, "--rollouts-per-example", "-r"),
    retriever: str = RetrieverOption,
    dataset: str = DatasetOption,
    data_path: Path | None = DataPathOption,
    max_tokens: int = MaxTokensOption,
    temperature: float = typer.Option(0.0, "--temperature", "-t"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Results directory (vf-eval's layout)."),
    verbose: bool = VerboseOption,
) -> None:
    """Metrics table and results in vf-eval's layout: `rlvr evaluate --env vf-musique`."""
    set_verbosity(verbose)
    if split_of(dataset_split) != "eval":
        raise typer.BadParameter("evaluate runs the held-out split; use `train_musique.py predict "
                                 "--dataset-split train` for training questions", param_hint="--dataset-split")
    rlvr_evaluate.evaluate(
        env=ENV, model=model, url=endpoint, num_examples=num_examples, rollouts_per_example=rollouts_per_example,
        env_args=env_args(dataset, data_path, retriever), temperature=temperature, max_tokens=max_tokens, out=out,
        # typer fills the rest only on the command line: called from Python, every option is passed
        search=None, value_model=None, beam_width=4, **rlvr_evaluate.SAMPLING_DEFAULTS,
    )


@app.command()
def benchmark(
    models: str = typer.Option("smollm2-135m", "--models", help="Comma-separated model names or paths."),
    retrievers: str = typer.Option("bm25,hybrid,golden", "--retrievers", help="Comma-separated retrievers."),
    num_examples: int = NumOption,
    dataset: str = DatasetOption,
    data_path: Path | None = DataPathOption,
    max_tokens: int = MaxTokensOption,
    out: Path | None = typer.Option(None, "--out", "-o", help="Results directory."),
    verbose: bool = VerboseOption,
) -> None:
    """The model x retriever grid on vf-musique: `rlvr benchmark --envs vf-musique`."""
    set_verbosity(verbose)
    args = env_args(dataset, data_path, retriever="bm25")  # each cell replaces the retriever
    rlvr_evaluate.benchmark(
        models=models, envs=ENV, retrievers=retrievers, num_examples=num_examples, rollouts_per_example=1,
        env_args=args, temperature=0.0, max_tokens=max_tokens, out=out, **rlvr_evaluate.SAMPLING_DEFAULTS,
    )


@app.command()
def analyze(directory: Path = typer.Argument(..., help="A run, evaluation or benchmark directory.")) -> None:
    """Markdown table and PNG plots: `rlvr analyze DIR`."""
    rlvr_analyze.analyze(directory)


if __name__ == "__main__":
    app()
