"""Scripted expert trajectories: one reply script per dataset row, played through the environment itself (its
prompts, protocol and rubric), one rollout per row, saved in `rlvr predict`'s layout (predictions.jsonl +
dataset/), which `rlvr train --algo sft|oreo --dataset DIR` reads. An environment supplies only the script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from rlvr.config_files import parse_env_args
from rlvr.evaluation import prediction_records, save_predictions
from rlvr.testing.client import Reply, ScriptedClient

Script = Callable[[dict], Sequence[Reply | str]]  # a dataset row -> the expert's replies, one per turn


async def scripted_states(env, script_of: Script, split: str = "train", num_examples: int = -1,
                          max_concurrent: int = 4, label: str = "expert") -> list:
    """One scored rollout per row of the environment's train (or eval) dataset, replying from `script_of(row)`
    (called in a worker thread: a script may plan). A script that runs out repeats its last reply."""
    from verifiers.utils.async_utils import NullAsyncContext

    dataset = env.get_dataset(num_examples) if split == "train" else env.get_eval_dataset(num_examples)
    semaphore = asyncio.Semaphore(max_concurrent)

    async def play(row: dict):
        script = list(await asyncio.to_thread(script_of, row))
        if not script:
            raise ValueError(f"the expert script of row {row.get('example_id')} is empty")
        async with semaphore:
            state = await env.run_rollout(row, ScriptedClient(script), label, {}, NullAsyncContext())
            await env.rubric.score_group([state], score_sem=NullAsyncContext())
        return state

    return list(await asyncio.gather(*(play(row) for row in dataset.to_list())))


def export_scripted(env, script_of: Script, out_dir: str | Path, split: str = "train", num_examples: int = -1,
                    label: str = "expert") -> Path:
    """Write the scripted rollouts to `out_dir` (atomically) in `rlvr predict`'s layout; returns `out_dir`."""
    return save_states(asyncio.run(scripted_states(env, script_of, split, num_examples, label=label)), out_dir)


def save_states(states: list, out_dir: str | Path) -> Path:
    """Scored rollout states -> `out_dir` in `rlvr predict`'s layout (atomically); returns `out_dir`."""
    results = {"state": states, "stop_conditions": [s.get("stop_condition") for s in states]}
    return save_predictions(prediction_records(results), Path(out_dir))


def expert_main(argv: list[str] | None, *, prog: str, description: str, load_environment: Callable,
                export: Callable, won: Callable[[dict], bool], won_label: str = "won", what: str = "games") -> None:
    """`python -m <environment>.expert OUT_DIR [--split] [-n] [--env-args JSON]`, the command each environment's
    expert module offers: `export(env, out_dir, split, num_examples)` writes the trajectories, and a line
    summarises them (`won(prediction row)` counts the successes)."""
    from rich.console import Console

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("out_dir", help="folder to write predictions.jsonl and dataset/ into")
    parser.add_argument("--split", choices=("train", "eval"), default="train", help="the environment's dataset to play")
    parser.add_argument("-n", "--num-examples", type=int, default=-1, help=f"{what} to play (-1: all)")
    parser.add_argument("--env-args", default="{}", help="load_environment arguments as a JSON object")
    args = parser.parse_args(argv)
    env_args = parse_env_args(args.env_args, parser.error)
    out = export(load_environment(**env_args), args.out_dir, args.split, args.num_examples)
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    wins = sum(bool(won(r)) for r in rows)
    turns = sum(r["num_turns"] for r in rows) / max(1, len(rows))
    Console(soft_wrap=True).print(f"{len(rows)} expert trajectories ({wins} {won_label}, {turns:.1f} turns on average) -> {out}",
                                  highlight=False)
