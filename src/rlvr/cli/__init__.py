"""The `rlvr` command line. Each area registers its commands from its own module in this package."""

from __future__ import annotations

import typer

from rlvr.cli import analyze, env, evaluate, models, offline, pipeline, serve, study, suite, train, view

app = typer.Typer(
    name="rlvr",
    help="Train multi-turn LLM agents with turn-level credit assignment (MT-GRPO and relatives).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(models.app, name="models")
app.command("serve", context_settings=serve.PASSTHROUGH)(serve.serve)
app.add_typer(env.app, name="env")
evaluate.register(app)
analyze.register(app)
train.register(app)
offline.register(app)
study.register(app)
pipeline.register(app)
suite.register(app)
view.register(app)


def main() -> None:
    app()
