"""`rlvr serve --model NAME [vLLM flags]`: the rollout server (see rlvr.serve.server)."""

from __future__ import annotations

import typer

PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def serve(ctx: typer.Context) -> None:
    """vLLM's OpenAI server with verifiers' weight-sync protocol and CPU weight sync (`rlvr serve --help`)."""
    from rlvr.serve.server import main

    # argparse owns the flags (rlvr's and vLLM's), so typer passes every argument through untouched.
    main(list(ctx.args))
