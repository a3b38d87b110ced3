"""`run_training`: the one call behind `rlvr train` (any on-policy recipe): start or attach a server, train, write
the run directory.

Run directory:
    config.json        the resolved training config, environment and model
    metrics.jsonl      one line per step (also to wandb, offline without a key)
    rollouts.jsonl     one line per generated batch: its example ids and a few full rollouts
    checkpoint-N/      model or adapter, optimizer, scheduler, RNG, trainer state, rlvr_state.json (data position)
    final/             the trained weights (adapter under LoRA)
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import verifiers as vf
from accelerate import PartialState
from transformers.trainer_utils import TrainOutput, get_last_checkpoint

from rlvr.io import atomic_write_json
from rlvr.trainer.checkpoint import check_resume, read_run_state
from rlvr.trainer.config import OnPolicyConfig
from rlvr.trainer.recipes import trainer_class


def run_training(
    env: vf.Environment | str,
    model: str,
    config: OnPolicyConfig,
    server_url: str | None = None,
    run_dir: str | Path | None = None,
    *,
    env_args: dict | None = None,
    resume: bool | str = False,
    serve_args: list[str] | None = None,
) -> TrainOutput:
    """Train `model` on `env` with the recipe of `config` (MTGRPOConfig: MT-GRPO and relatives).

    env: a verifiers Environment or an installed environment id (loaded with `env_args`).
    model: a registered name ("tiny-random", "smollm2-135m"), a local path or a hub id.
    server_url: a running `rlvr serve` of the same model; None starts one for the run (main process only)
        with `serve_args` passed through to it.
    run_dir: where everything goes (default: config.output_dir).
    resume: True continues from the newest checkpoint in run_dir if there is one; a path resumes from it.
    """
    if isinstance(env, str):
        env = vf.load_environment(env, **(env_args or {}))
    if run_dir is not None:
        config.output_dir = str(run_dir)
    run_dir = Path(config.output_dir)
    checkpoint = get_last_checkpoint(str(run_dir)) if resume is True and run_dir.is_dir() else (resume or None)
    recipe = trainer_class(config)
    recipe.preflight(env, config)
    is_main = PartialState().is_main_process
    if is_main:
        atomic_write_json(run_dir / "config.json", {
            "model": model, "environment": getattr(env, "env_id", None) or type(env).__name__,
            "env_args": env_args or {}, "server_url": server_url, "resumed_from": checkpoint,
            "training": config.to_dict(),
        })
    with contextlib.ExitStack() as stack:
        if server_url is None and is_main:
            from rlvr.serve import launch

            server_url = stack.enter_context(launch(model=model, extra_args=serve_args or [])).url
        trainer = recipe(model, env, config, server_url=server_url)
        if checkpoint:
            check_resume(read_run_state(Path(checkpoint)), trainer.run_state())
        output = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_policy(run_dir / "final")
    return output
