"""vf-webshop: WebShop (Yao et al. 2022, arXiv 2207.01206) as a verifiers multi-turn environment, in pure Python.

The agent reads a WebShop text page and answers with one action, `search[query]` or `click[button]`, per turn;
`click[Buy Now]` ends the episode with WebShop's original reward (vf_webshop.reward). Recipe:
catalogue, prices, goals (data.py, over WebShop's engine) -> Shop (BM25) -> WebShopEnv (env.py) + rewards (rubric.py).
"""

from __future__ import annotations

import verifiers as vf

from rlvr.history import check_history_turns
from rlvr.rubrics import TurnRubric
from vf_webshop.data import load_catalog, shop_and_goals, split_goals, to_dataset
from vf_webshop.env import WebShopEnv, parse_agent_action
from vf_webshop.rubric import make_turn_rewards, purchase_reward, success

__all__ = ["load_environment", "WebShopEnv", "parse_agent_action"]


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
    one_shot: bool = False,
    history_turns: int | None = None,
    **kwargs,
) -> vf.Environment:
    check_history_turns(history_turns, "vf-webshop")  # before the catalogue is built
    if human_goals and not human_instructions_path:
        raise ValueError("vf-webshop: human_goals=True needs human_instructions_path (items_human_ins.json)")
    products = load_catalog(dataset, products_path, attributes_path, human_instructions_path, num_products, seed)
    shop, goals = shop_and_goals(products, seed, human_goals, bm25_backend)
    train_goals, eval_goals = split_goals(goals, num_train_examples, num_eval_examples)
    rubric = TurnRubric(
        # weights of valid_action, search_hit, target_click (each paid at most once per rollout but valid_action)
        turn_rewards=list(zip(make_turn_rewards(shop), turn_weights, strict=True)),
        outcome_rewards=[(purchase_reward, 1.0), (success, 0.0)],
        is_tool_result=lambda env_reply: bool(env_reply),  # every shop page answers the previous action
    )
    # The flag is about this call's own train split: in a study that trains on other arguments ([train_env_args],
    # e.g. another catalogue) but evaluates on these, it marks the goals whose product the model that was
    # trained on these arguments' goals (e.g. the SFT model) saw as a target.
    eval_dataset = to_dataset(shop, eval_goals, training_targets={g["asin"] for g in train_goals})
    return WebShopEnv(shop=shop, dataset=to_dataset(shop, train_goals), eval_dataset=eval_dataset,
                      rubric=rubric, max_turns=max_turns, one_shot=one_shot,
                      history_turns=history_turns, **kwargs)
