"""Scripted expert trajectories: one reply script per dataset row, played through the environment itself (its
prompts, protocol and rubric), one rollout per row, saved in `rlvr predict`'s layout (predictions.jsonl +
dataset/), which `rlvr train --algo sft|oreo --dataset DIR` reads. An environment supplies only the script.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

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
    states = asyncio.run(scripted_states(env, script_of, split, num_examples, label=label))
    results = {"state": states, "stop_conditions": [s.get("stop_condition") for s in states]}
    return save_predictions(prediction_records(results), Path(out_dir))
