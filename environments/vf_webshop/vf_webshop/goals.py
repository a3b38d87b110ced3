"""Goals (instruction, attributes, options, price bound) as WebShop's engine builds them.

Source: princeton-nlp/WebShop web_agent_site/engine/goal.py (get_human_goals, get_synthetic_goals, PRICE_RANGE)
and envs/web_agent_text_env.py (SimServer: goals shuffled with seed 233). Randomness comes from an explicit
`random.Random` instead of the module-level `random`, so that goals are reproducible from a seed.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # goal.py
NO_PRICE_BOUND = 1000000  # goal.py: price_upper when no bound is drawn
GOAL_SHUFFLE_SEED = 233  # web_agent_text_env.py SimServer: random.seed(233); random.shuffle(self.goals)


def draw_price_upper(price: float, rng: random.Random) -> tuple[float, str]:
    """Price bound and its instruction suffix (goal.py): the larger of two draws among the 4 grid prices above."""
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, price_upper = sorted(rng.sample(price_range, 2))
        return price_upper, f", and price lower than {price_upper:.2f} dollars"
    return NO_PRICE_BOUND, ""


def get_human_goals(all_products: list[dict], product_prices: dict | None, rng: random.Random) -> list[dict]:
    """One goal per human instruction (items_human_ins.json) with at least one attribute (goal.py)."""
    goals = []
    for item in all_products:
        for product in item.get("instructions", []):
            attributes = product["instruction_attributes"]
            if len(attributes) == 0:
                continue
            price_upper, price_text = (
                draw_price_upper(product_prices[item["asin"]], rng)
                if product_prices is not None
                else (NO_PRICE_BOUND, "")
            )
            goals.append(
                {
                    "asin": item["asin"],
                    "category": item["category"],
                    "query": item["query"],
                    "name": item["name"],
                    "product_category": item["product_category"],
                    "instruction_text": product["instruction"].strip(".") + price_text,
                    "attributes": attributes,
                    "price_upper": price_upper,
                    "goal_options": product["instruction_options"],
                    "weight": 1,
                }
            )
    return goals


def get_synthetic_goals(
    all_products: list[dict], product_prices: dict | None, rng: random.Random
) -> list[dict]:
    """One goal per option combination of every product with an items_ins_v2 instruction (goal.py).

    weight = mean over the goal's attributes of 1 / (number of goals having that attribute), as in goal.py,
    so that sampling by weight favours rare attributes.
    """
    goals = []
    cnt_atts: dict[str, int] = defaultdict(int)
    for product in all_products:
        if product.get("instruction_text") is None:
            continue
        attributes = product["instruction_attributes"]
        if not attributes:
            raise ValueError(
                f"get_synthetic_goals: product {product['asin']} has an instruction but no instruction_attributes; "
                "items_ins_v2 entries with an instruction must list the attributes it asks for"
            )
        price_upper, price_text = (
            draw_price_upper(product_prices[product["asin"]], rng)
            if product_prices is not None
            else (NO_PRICE_BOUND, "")
        )
        option_names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][name] for name in option_names)):
            goal_options = dict(zip(option_names, combination, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    # goal.py sets 'name' twice in this dict literal; the later product['Title'] wins
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                    "attributes": attributes,
                    "price_upper": price_upper,
                    "goal_options": goal_options,
                }
            )
            for att in attributes:
                cnt_atts[att] += 1
    for goal in goals:
        goal["weight"] = sum(1.0 / cnt_atts[att] for att in goal["attributes"]) / len(goal["attributes"])
    return goals


def get_goals(
    all_products: list[dict], product_prices: dict | None, human_goals: bool, seed: int = 0
) -> list[dict]:
    """Goals in SimServer's order: built with a seeded price draw, then shuffled with seed 233."""
    rng = random.Random(seed)
    goals = (get_human_goals if human_goals else get_synthetic_goals)(all_products, product_prices, rng)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return goals
