"""WebShop's scripted expert, which knows the goal: search the goal's words (then, if its product is not listed,
the product's name), page to the goal's product, click its option values, buy. As a dataset for SFT and OREO,
every goal is played through the environment itself (same prompts, history window and rubric), one rollout per
goal, in `rlvr predict`'s layout:

    python -m vf_webshop.expert runs/webshop-expert --split train -n 200 --env-args '{"max_turns": 8}'

Each expert reply is the bare action (`search[...]` / `click[...]`), the form of the one-shot example in the prompt:
the shortest text a small model has to learn to write.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.offline.expert import expert_main, export_scripted
from vf_webshop.engine import SEP, Session


def goal_query(goal: dict) -> str:
    """The instruction without its option and price clauses: what a shopper would type."""
    return goal["instruction_text"].split(" with ")[0].split(", and price lower than")[0]


def expert_action(observation: str, goal: dict, searches: int) -> str:
    """The expert's next action on the page `observation`, after `searches` searches."""
    parts = observation.split("\n")[-1].split(SEP)
    if parts[0] == "WebShop":
        return f"search[{goal_query(goal) if searches == 0 else goal['name']}]"
    if any(p.startswith("Page ") for p in parts):
        if goal["asin"] in parts:
            return f"click[{goal['asin']}]"
        return "click[Next >]" if "Next >" in parts else "click[Back to Search]"
    wanted = goal["goal_options"].values() if isinstance(goal["goal_options"], dict) else goal["goal_options"]
    chosen = observation.split("\n")[0] if observation.startswith("You have clicked") else ""
    for value in wanted:
        if value in parts and f": {value}" not in chosen:
            return f"click[{value}]"
    return "click[Buy Now]"


def run_expert(session: Session, max_steps: int = 15) -> list[str]:
    """The expert's actions on `session` until it buys (or `max_steps`); each must be valid on its page."""
    actions: list[str] = []
    while session.page != "done" and len(actions) < max_steps:
        searches = sum(a.startswith("search[") for a in actions)
        action = expert_action(session.observation(), session.goal, searches)
        actions.append(action)
        if not session.step(action).valid:
            raise RuntimeError(f"the WebShop expert's {action!r} is not valid on: {session.observation()}")
    return actions


def export_expert_dataset(env, out_dir: str | Path, split: str = "train", num_examples: int = -1) -> Path:
    """One expert rollout per goal of the environment's split, written to `out_dir` (atomically)."""

    def script(row: dict) -> list[str]:
        info = json.loads(row["info"]) if isinstance(row["info"], str) else row["info"]
        return run_expert(Session(env.shop, info["goal"]), max_steps=env.max_turns)

    return export_scripted(env, script, out_dir, split, num_examples)


def main(argv: list[str] | None = None) -> None:
    from vf_webshop import load_environment

    expert_main(argv, prog="python -m vf_webshop.expert", description=__doc__.split("\n\n")[0],
                load_environment=load_environment, export=export_expert_dataset,
                won=lambda row: row["reward"] >= 1.0, won_label="at reward 1.0", what="goals")


if __name__ == "__main__":
    main()
