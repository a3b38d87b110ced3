"""`run_training`: the one call behind `rlvr train` (any on-policy recipe): start or attach a server, train, write
the run directory.

Run directory:
    config.json        the resolved training config, environment and model
    metrics.jsonl      one line per step (also to wandb, offline without a key)
    rollouts.jsonl     one line per generated batch: its example ids and a few full rollouts
    token_credit.jsonl one line per rollout of the first num_logged_token_groups groups of each batch: per-token credit
    checkpoint-N/      model or adapter, optimizer, scheduler, RNG, trainer state, rlvr_state.json (data position)
    final/             the trained weights (adapter under LoRA)
    wandb/             with report_to="wandb": wandb's files (rlvr.trainer.faults.wandb_in_run_dir)
Each file's format: docs/run-files.md.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import verifiers as vf
from accelerate import PartialState
from transformers import TrainerCallback
from transformers.trainer_utils import TrainOutput, get_last_checkpoint

from rlvr.evaluation import server_flags
from rlvr.io import atomic_write_json
from rlvr.trainer.checkpoint import check_resume, read_run_state
from rlvr.trainer.config import ConfigError, OnPolicyConfig
from rlvr.trainer.faults import ServerWatch, resume_command, train_preemptibly
from rlvr.trainer.nodes import NodeError, Nodes
from rlvr.trainer.recipes import trainer_class


def serving_dtype(bf16: bool, serve_args: Sequence[str] = ()) -> str | None:
    """The dtype a server started for the run holds the weights in: the trainer's compute dtype, so that at
    iteration 0 the sampler's logprobs are the trainer's and the PPO ratio clips policy change, not a bf16/fp32
    mismatch (vLLM on CPU would otherwise serve a float32 checkpoint in bf16: ~0.05 nats/token apart). None when
    `serve_args` choose a dtype themselves (`--dtype`): the trainer then logs the mismatch (train/mismatch_kl)."""
    if any(arg == "--dtype" or arg.startswith("--dtype=") for arg in serve_args):
        return None
    return "bfloat16" if bf16 else "float32"


def accelerate_config(num_processes: int, config_file: str | Path | None = None, *, bf16: bool | None = None,
                      cuda: bool | None = None, nodes: Nodes = Nodes()) -> Path:
    """The accelerate config for `rlvr train --num-processes N`: the user's file when given, else by device:
    DeepSpeed ZeRO-2 in bf16 on GPUs (zero2.yaml; zero2_multinode.yaml across machines), DDP over gloo on CPU
    (cpu_ddp.yaml). The file is checked against the device, the training dtype (`bf16`, when known) and the machines
    (`nodes`), with what to change.

    cuda: whether training runs on GPUs (default: torch.cuda.is_available()).
    """
    import torch
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    cuda = torch.cuda.is_available() if cuda is None else cuda
    if num_processes < 1:
        raise ConfigError(f"--num-processes {num_processes}: give at least 1")
    if config_file is None:
        name = ("zero2_multinode.yaml" if nodes.several else "zero2.yaml") if cuda else "cpu_ddp.yaml"
        config_file = Path(str(resources.files("rlvr.trainer") / "accelerate" / name))
    path = Path(config_file)
    if not path.is_file():
        raise ConfigError(f"accelerate config {path} does not exist (examples: rlvr/trainer/accelerate/*.yaml)")
    try:
        loaded = load_config_from_file(str(path))
    except Exception as err:  # accelerate raises whatever its YAML/JSON parsing raises
        raise ConfigError(f"accelerate config {path} cannot be read: {type(err).__name__}: {err}") from err
    if cuda and loaded.use_cpu:
        raise ConfigError(f"accelerate config {path} sets use_cpu: true on a machine with GPUs: every process "
                          "would train on CPU (while weight sync uses NCCL). Remove use_cpu, or use rlvr's zero2.yaml")
    gpu_only = (DistributedType.DEEPSPEED, DistributedType.MULTI_GPU, DistributedType.FSDP)
    if not cuda and loaded.distributed_type in gpu_only:
        raise ConfigError(f"accelerate config {path} is a GPU config ({loaded.distributed_type}) and this machine "
                          "has no CUDA: use rlvr's cpu_ddp.yaml (the default here)")
    try:
        nodes.check_accelerate_config(loaded, path)
    except NodeError as err:
        raise ConfigError(str(err)) from err
    mixed = str(loaded.mixed_precision)
    if bf16 is not None and (mixed == "bf16") != bf16:
        raise ConfigError(f"accelerate config {path} sets mixed_precision: {mixed} but the training config has "
                          f"bf16={bf16}: make them agree (e.g. --set bf16={str(mixed == 'bf16').lower()})")
    return path


def launch_command(config_file: str | Path, num_processes: int, program: Sequence[str],
                   nodes: Nodes = Nodes()) -> tuple[list[str], dict]:
    """The command line that starts this machine's share of `num_processes` training processes (all machines
    together, as accelerate counts them) running `program` (a script and its arguments, or "-m", a module and its
    arguments) under `config_file`, and what it adds to the environment. Across machines (`nodes`) it runs on every
    machine and the rendezvous at the main process's address joins them.

    `accelerate launch` starts ranks with torchrun for GPU configs, but for a MULTI_CPU config without an mpirun
    hostfile it falls back to its simple launcher: one process, whatever num_processes says. There torchrun starts
    the ranks itself and ACCELERATE_USE_CPU keeps accelerate on CPU (DDP over gloo), as the config asks.
    """
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    loaded = load_config_from_file(str(config_file))
    if num_processes > 1 and loaded.distributed_type == DistributedType.MULTI_CPU and not loaded.mpirun_config:
        return ([sys.executable, "-m", "torch.distributed.run", *nodes.torchrun_args(num_processes), *program],
                {"ACCELERATE_USE_CPU": "true"})
    return ([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file),
             "--num_processes", str(num_processes), *nodes.accelerate_args(), *program], {})


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
    callbacks: Sequence[TrainerCallback] = (),
) -> TrainOutput:
    """Train `model` on `env` with the recipe of `config` (MTGRPOConfig: MT-GRPO and relatives).

    env: a verifiers Environment or an installed environment id (loaded with `env_args`).
    model: a registered name ("tiny-random", "smollm2-135m"), a local path or a hub id.
    server_url: a running `rlvr serve` of the same model; None starts one for the run (main process only)
        with `serve_args` passed through to it, serving in the training dtype (`serving_dtype`).
    run_dir: where everything goes (default: config.output_dir).
    resume: True continues from the newest checkpoint in run_dir if there is one; a path resumes from it.
    callbacks: transformers callbacks added to the trainer (e.g. a study's extra checkpoints, rlvr.study.curve).

    Faults (rlvr.trainer.faults): a rollout server that dies or stops answering is restarted (one this run started)
    or waited for (the user's), then the batch is generated again (under --num-processes by the main process alone
    while the others wait; not under ZeRO-3); if that fails, every process stops with `ServerDown` (its URL, exit
    code, log tail and the resume command); SIGTERM / SIGINT stop at the next step boundary with a checkpoint and
    raise `Preempted` (a SystemExit with status 143 / 130).
    """
    if isinstance(env, str):
        env = vf.load_environment(env, **(env_args or {}))
    if run_dir is not None:
        config.output_dir = str(run_dir)
    run_dir = Path(config.output_dir)
    if resume is True:  # the newest checkpoint, if the run directory has one yet
        checkpoint = get_last_checkpoint(str(run_dir)) if run_dir.is_dir() else None
    else:
        checkpoint = resume or None
    recipe = trainer_class(config)
    recipe.preflight(env, config)
    is_main = PartialState().is_main_process
    if is_main:
        atomic_write_json(run_dir / "config.json", {
            "model": model, "environment": getattr(env, "env_id", None) or type(env).__name__,
            "env_args": env_args or {}, "server_url": server_url, "resumed_from": checkpoint,
            "training": config.to_dict(),
        })
    # what the environment's rollouts need from a server started for them (a v1 environment: vLLM's token route)
    extra_args = server_flags(env, given=serve_args or [])
    with contextlib.ExitStack() as stack:
        def serve(port: int | None = None):
            """A server for this run, stopped when run_training returns (a restart takes the old one's port)."""
            from rlvr.serve import launch

            return stack.enter_context(launch(model=model, port=port, extra_args=extra_args,
                                              dtype=serving_dtype(config.bf16, serve_args or [])))

        started = serve() if server_url is None and is_main else None
        server_url = started.url if started else server_url
        trainer = recipe(model, env, config, server_url=server_url)
        for callback in callbacks:
            trainer.add_callback(callback)
        resume_with = resume_command(run_dir)
        if is_main:
            trainer.server_watch = ServerWatch(trainer.rollouts.url, resume_with, model, started,
                                               restart=started and (lambda: serve(started.port)))
        if checkpoint:
            check_resume(read_run_state(Path(checkpoint)), trainer.run_state())
        output, preemption = train_preemptibly(trainer, run_dir, checkpoint, config.num_iterations)
        if preemption.stopped_at is not None:
            # The server stops first, then every process leaves together: accelerate launch (torchrun) stops the
            # other processes as soon as one exits (SIGTERM, SIGKILL after 30 s), which would cut the stop short.
            stack.close()
            trainer.accelerator.wait_for_everyone()
            raise preemption.preempted(resume_with)
        trainer.save_policy(run_dir / "final")
    return output
