"""A scripted expert that knows the goal (tests only)."""

from __future__ import annotations

from vf_webshop.engine import SEP, Session


def goal_query(goal: dict) -> str:
    """The instruction without its option and price clauses: what a shopper would type."""
    return goal["instruction_text"].split(" with ")[0].split(", and price lower than")[0]


def expert_action(observation: str, goal: dict, searches: int) -> str:
    """Search the goal's words (then, if its product is not listed, the product's name), page to the goal's
    product, click its option values, buy."""
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
    actions: list[str] = []
    while session.page != "done" and len(actions) < max_steps:
        searches = sum(a.startswith("search[") for a in actions)
        action = expert_action(session.observation(), session.goal, searches)
        actions.append(action)
        assert session.step(action).valid, (action, session.observation())
    return actions
