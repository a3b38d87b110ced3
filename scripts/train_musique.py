"""Train and predict on MuSiQue-style multi-hop retrieval (vf-musique) with the flags of the RLVR-on-MuSiQue
design. A thin wrapper: every command calls the `rlvr` CLI function of the same name.

    .venv/bin/python scripts/train_musique.py train --max-steps 20 --retriever bm25 --num-train-examples 200
    .venv/bin/python scripts/train_musique.py predict --model runs/musique/final --dataset-split validation
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from rlvr.cli import evaluate as rlvr_evaluate
from rlvr.cli import train as rlvr_train

ENV = "vf-musique"
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train" / "musique_mt_grpo_cpu.toml"
SPLITS = {"train": "train", "validation": "eval", "dev": "eval", "eval": "eval"}

app = typer.Typer(help=__doc__.split("\n\n")[0], no_args_is_help=True, pretty_exceptions_show_locals=False)

RetrieverOption = typer.Option("bm25", "--retriever", help="bm25, semantic, hybrid or golden.")
DatasetOption = typer.Option("synthetic", "--dataset", help="synthetic (offline), musique, hotpotqa or 2wiki.")
DataPathOption = typer.Option(None, "--data-path", help="Local file of --dataset in its original layout.")
VerboseOption = typer.Option(False, "--verbose", "-v", help="Debug logging (verifiers, rlvr).")


def env_args(dataset: str, data_path: Path | None, retriever: str, **extra) -> str:
    args = {"dataset": dataset, "retriever": retriever, **extra}
    if data_path is not None:
        args["data_path"] = str(data_path)
    return json.dumps(args)


def split_of(dataset_split: str) -> str:
    if dataset_split not in SPLITS:
        raise typer.BadParameter(f"{dataset_split!r}: use one of {', '.join(SPLITS)}", param_hint="--dataset-split")
    return SPLITS[dataset_split]


def set_verbosity(verbose: bool) -> None:
    if verbose:
        logging.basicConfig(level=logging.DEBUG)
        logging.getLogger("verifiers").setLevel(logging.DEBUG)


@app.command()
def train(
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Model name or path."),
    algo: str = typer.Option("mt_grpo", "--algo", help="An algorithm of `rlvr train --list`."),
    num_train_examples: int = typer.Option(200, "--num-train-examples", help="Training questions."),
    max_steps: int = typer.Option(20, "--max-steps", help="Optimizer steps."),
    retriever: str = RetrieverOption,
    dataset: str = DatasetOption,
    data_path: Path | None = DataPathOption,
    config: Path = typer.Option(CONFIG, "--config", "-c", help="TOML with the remaining settings."),
    overrides: list[str] = typer.Option([], "--set", "-s", help="Training option KEY=VALUE (repeatable)."),
    server: str | None = typer.Option(None, "--server", help="Attach to a running `rlvr serve` (root URL)."),
    run_dir: Path | None = typer.Option(None, "--run-dir", "-o", help="Run directory (default runs/train-TIME)."),
    verbose: bool = VerboseOption,
) -> None:
    """MT-GRPO (or --algo) on vf-musique: `rlvr train --config configs/train/musique_mt_grpo_cpu.toml`."""
    set_verbosity(verbose)
    plan = rlvr_train.resolve_plan(
        config, ENV, model, algo, [f"max_steps={max_steps}", *overrides],
        env_args(dataset, data_path, retriever, num_train_examples=num_train_examples), server, run_dir, resume=False,
    )
    rlvr_train.run_plan(plan)
    rlvr_train.console.print(f"run directory: {plan.run_dir}")


@app.command()
def predict(
    model: str | None = typer.Option(None, "--model", "-m", help="Model name or path: serve it here."),
    endpoint: str | None = typer.Option(None, "--endpoint", "-b", help="Base URL of a running server instead."),
    dataset_split: str = typer.Option("validation", "--dataset-split", help="train or validation (eval)."),
    num_examples: int = typer.Option(10, "--num-examples", "-n", help="Questions to run (-1: all)."),
    rollouts_per_example: int = typer.Option(1, "--rollouts-per-example", "-r"),
    retriever: str = RetrieverOption,
    dataset: str = DatasetOption,
    data_path: Path | None = DataPathOption,
    max_tokens: int = typer.Option(256, "--max-tokens", help="Max new tokens per assistant turn."),
    temperature: float = typer.Option(0.0, "--temperature", "-t"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory."),
    verbose: bool = VerboseOption,
) -> None:
    """Rollouts to JSONL and a Hugging Face dataset: `rlvr predict --env vf-musique`."""
    set_verbosity(verbose)
    rlvr_evaluate.predict(
        env=ENV, model=model, url=endpoint, split=split_of(dataset_split), num_examples=num_examples,
        rollouts_per_example=rollouts_per_example, env_args=env_args(dataset, data_path, retriever),
        temperature=temperature, max_tokens=max_tokens, out=out, **rlvr_evaluate.SAMPLING_DEFAULTS,
    )


if __name__ == "__main__":
    app()
