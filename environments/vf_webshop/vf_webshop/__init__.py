"""vf-webshop: WebShop (Yao et al. 2022, arXiv 2207.01206) as a verifiers multi-turn environment, in pure Python.

The agent reads a WebShop text page and answers with one action, `search[query]` or `click[button]`, per turn;
`click[Buy Now]` ends the episode with WebShop's original reward (vf_webshop.reward). Recipe:
catalogue -> prices -> goals (WebShop's engine) -> Shop (BM25) -> dataset of goals -> WebShopEnv + TurnRubric.
"""

from __future__ import annotations

import json
import random
import re

import verifiers as vf
from datasets import Dataset
from verifiers.types import Messages, State, TrajectoryStep

from vf_webshop.catalog import (
    attach_goal_fields,
    generate_catalog,
    generate_product_prices,
    load_processed_documents,
    process_raw_products,
    read_json,
)
from vf_webshop.engine import Session, Shop
from vf_webshop.goals import get_goals

__all__ = ["load_environment", "WebShopEnv", "parse_agent_action"]

SYSTEM_PROMPT = """You are shopping on WebShop for the customer's instruction shown on the page.
Each turn, think briefly if you like, then end your reply with exactly one action:
  search[your query]       (only on the search page)
  click[element]           (a button such as Back to Search, Next >, < Prev, Description, Features, Reviews,
                            Buy Now, a product id such as B078GWRC1J, or an option value such as large)
Pick the product, click the option values the instruction asks for, then click[Buy Now]."""

AGENT_ACTION_RE = re.compile(r"\b(?:search|click)\[[^\]\n]+\]")


def parse_agent_action(text: str) -> str:
    """The last `search[...]`/`click[...]` in a model reply, or '' when there is none."""
    matches = AGENT_ACTION_RE.findall(text or "")
    return matches[-1] if matches else ""


def _text(message) -> str:
    content = message.get("content") if isinstance(message, dict) else message
    return content if isinstance(content, str) else ""


class WebShopEnv(vf.MultiTurnEnv):
    """Each assistant turn is executed as soon as it is generated (add_trajectory_step), so that the last turn
    before max_turns still acts (a purchase there counts), and the step records where it was taken."""

    def __init__(self, shop: Shop, **kwargs):
        super().__init__(**kwargs)
        self.shop = shop

    async def setup_state(self, state: State) -> State:
        state["webshop_session"] = Session(self.shop, state["info"]["goal"])
        return state

    async def add_trajectory_step(self, state: State, trajectory_step: TrajectoryStep):
        session: Session = state["webshop_session"]
        completion = trajectory_step["completion"]
        reply = _text(completion[-1]) if isinstance(completion, list) and completion else _text(completion)
        action = parse_agent_action(reply)
        anchor = session.state_key()  # the page this action was chosen on
        result = session.step(action)
        # the anchor state (page the action was chosen on) for GiGPO's anchor-state grouping
        trajectory_step["extras"]["state_key"] = anchor
        trajectory_step["extras"]["webshop"] = {
            "state_key": anchor,
            "action": action,
            "valid": result.valid,
            "page": session.page,
            "listed": session.listed() if session.page == "results" else [],
        }
        state["webshop_observation"] = result.observation
        if result.done:
            state["final_env_response"] = [{"role": "user", "content": result.observation}]
        await super().add_trajectory_step(state, trajectory_step)

    async def env_response(self, messages: Messages, state: State, **kwargs) -> Messages:
        return [{"role": "user", "content": state["webshop_observation"]}]


# --- rewards ---------------------------------------------------------------------------------------------------


def purchase_reward(state: State, **kwargs) -> float:
    """WebShop's reward of the purchase (0.0 without one)."""
    return float(state["webshop_session"].reward)


def success(state: State, **kwargs) -> float:
    """WebShop's success rate: the purchase earned reward 1.0 (Yao et al. 2022, section 5)."""
    return float(state["webshop_session"].reward == 1.0)


def make_turn_funcs(shop: Shop):
    """Turn rewards, read from what the environment recorded on the step (step["extras"]["webshop"]):

    valid_action: 1 when the shop accepted the action.
    search_hit:   1 when a search's first results page lists a product that satisfies the goal.
    target_click: 1 when a click opened the page of a product that satisfies the goal.
    A product satisfies the goal when buying it with the goal's option values it offers earns reward 1.0
    (Shop.satisfies), so these rewards point at purchases that the outcome reward pays in full.
    """

    def valid_action(step, **kwargs) -> float:
        return float(step["extras"]["webshop"]["valid"])

    def search_hit(step, info, **kwargs) -> float:
        record = step["extras"]["webshop"]
        if not (record["valid"] and record["action"].startswith("search[")):
            return 0.0
        return float(any(shop.satisfies(asin, info["goal"]) for asin in record["listed"]))

    def target_click(step, info, **kwargs) -> float:
        record = step["extras"]["webshop"]
        if not (record["valid"] and record["page"] == "item" and record["action"].startswith("click[")):
            return 0.0
        clicked = record["action"][len("click[") : -1].upper()
        return float(clicked in shop.products and shop.satisfies(clicked, info["goal"]))

    return [valid_action, search_hit, target_click]


# --- data --------------------------------------------------------------------------------------------------------


def load_catalog(dataset: str, products_path, attributes_path, human_instructions_path, num_products, seed):
    """Products in WebShop's engine layout, from the generated shop or WebShop's files."""
    if dataset == "synthetic":
        return generate_catalog(seed=seed)
    if dataset != "webshop":
        raise ValueError(f"vf-webshop: unknown dataset {dataset!r}; use 'synthetic' or 'webshop'")
    if products_path is None or attributes_path is None:
        raise ValueError(
            "vf-webshop: dataset='webshop' needs products_path (search_engine documents.jsonl, or "
            "items_shuffle*.json) and attributes_path (items_ins_v2*.json)"
        )
    if str(products_path).endswith(".jsonl"):
        products = load_processed_documents(products_path)[:num_products]
    else:
        products = process_raw_products(read_json(products_path, "items_shuffle json"), num_products)
    human = read_json(human_instructions_path, "items_human_ins.json") if human_instructions_path else None
    attach_goal_fields(products, read_json(attributes_path, "items_ins_v2 json"), human)
    return products


def load_environment(
    dataset: str = "synthetic",
    products_path: str | None = None,
    attributes_path: str | None = None,
    human_instructions_path: str | None = None,
    human_goals: bool = False,
    num_products: int | None = None,
    seed: int = 0,
    max_turns: int = 15,
    num_train_examples: int = -1,
    num_eval_examples: int = 100,
    turn_weights: tuple[float, float, float] = (0.0, 0.1, 0.1),
    bm25_backend: str = "bm25s",
    **kwargs,
) -> vf.Environment:
    from rlvr.rubrics import TurnRubric

    if human_goals and not human_instructions_path:
        raise ValueError("vf-webshop: human_goals=True needs human_instructions_path (items_human_ins.json)")
    products = load_catalog(
        dataset, products_path, attributes_path, human_instructions_path, num_products, seed
    )
    prices = generate_product_prices(products, random.Random(seed))
    goals = get_goals(products, prices, human_goals=human_goals, seed=seed)
    if not goals:
        raise ValueError("vf-webshop: the catalogue yields no goals (no product has an instruction)")
    shop = Shop(products, prices, bm25_backend=bm25_backend)

    # WebShop's baselines test on the first 500 shuffled goals and train on the others (baseline_models/env.py)
    eval_goals = goals[:num_eval_examples] if num_eval_examples > 0 else goals
    train_goals = goals[len(eval_goals) :] or eval_goals
    if num_train_examples > 0:
        train_goals = train_goals[:num_train_examples]

    def rows(goal_list: list[dict]) -> Dataset:
        return Dataset.from_list(
            [
                {
                    "question": Session(shop, g).observation(),
                    "answer": g["asin"],
                    # JSON keeps each goal's own option keys (Arrow would merge dict keys across rows)
                    "info": json.dumps({"goal": g}),
                }
                for g in goal_list
            ]
        )

    rubric = TurnRubric(
        turn_rewards=list(zip(make_turn_funcs(shop), turn_weights, strict=True)),
        outcome_rewards=[(purchase_reward, 1.0), (success, 0.0)],
        is_tool_result=lambda env_reply: bool(env_reply),  # every shop page answers the previous action
    )
    return WebShopEnv(
        shop=shop,
        dataset=rows(train_goals),
        eval_dataset=rows(eval_goals),
        system_prompt=SYSTEM_PROMPT,
        rubric=rubric,
        max_turns=max_turns,
        **kwargs,
    )
