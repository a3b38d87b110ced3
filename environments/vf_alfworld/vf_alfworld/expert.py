"""Expert trajectories as a dataset, for SFT and offline RL (OREO): every game's walkthrough is played through the
environment itself (same prompts, same protocol, same rubric), one rollout per game, and saved in the layout that
`rlvr predict` writes (`predictions.jsonl` + a Hugging Face dataset under `dataset/`, with per-turn rewards).

    python -m vf_alfworld.expert runs/alfworld-expert --split train -n 200 --env-args '{"num_train_examples": 200}'

Each expert turn reads `<think>...</think><action>command</action>`, the think naming the task and the step.
Official game files without a stored walkthrough are planned on the spot (textworld's planner expert).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from verifiers.utils.async_utils import NullAsyncContext

from rlvr.offline.expert import expert_main, save_states
from rlvr.testing.client import Reply, ScriptedClient
from vf_alfworld.engine import PLANNER_LOCK, planner
from vf_alfworld.records import GameRecord


def expert_reply(command: str, description: str) -> Reply:
    task = re.sub(r"^Your task is to:?\s*", "", description).rstrip(".")
    return Reply(f"<think>My task is to {task}. Next step: {command}.</think>\n<action>{command}</action>",
                 label=f"expert: {command}")  # fmt: skip


def walkthrough_of(game: GameRecord) -> list[str]:
    if game.walkthrough:
        return list(game.walkthrough)
    with PLANNER_LOCK:
        planner().start(game.game_file, game.task, game.game_id)
        return planner().plan()


async def expert_states(env, split: str = "train", num_examples: int = -1, max_concurrent: int = 4) -> list:
    """One scored expert rollout per game of the environment's train (or eval) dataset."""
    dataset = env.get_dataset(num_examples) if split == "train" else env.get_eval_dataset(num_examples)
    semaphore = asyncio.Semaphore(max_concurrent)

    async def play(row: dict):
        game = GameRecord.from_info(json.loads(row["info"]) if isinstance(row["info"], str) else row["info"])
        script = [expert_reply(c, game.description) for c in await asyncio.to_thread(walkthrough_of, game)]
        async with semaphore:
            state = await env.run_rollout(row, ScriptedClient(script or ["<action>look</action>"]), "expert", {},
                                          NullAsyncContext())  # fmt: skip
            await env.rubric.score_group([state], score_sem=NullAsyncContext())
        return state

    return list(await asyncio.gather(*(play(row) for row in dataset.to_list())))


def export_expert_dataset(env, out_dir: str | Path, split: str = "train", num_examples: int = -1) -> Path:
    """Write the expert rollouts to `out_dir` (atomically) in `rlvr predict`'s layout; returns `out_dir`."""
    return save_states(asyncio.run(expert_states(env, split, num_examples)), out_dir)


def main(argv: list[str] | None = None) -> None:
    from vf_alfworld import load_environment

    expert_main(argv, prog="python -m vf_alfworld.expert", description=__doc__.split("\n\n")[0],
                load_environment=load_environment, export=export_expert_dataset,
                won=lambda row: row["metrics"].get("won", 0.0) >= 1.0)


if __name__ == "__main__":
    main()
