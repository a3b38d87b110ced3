"""The rewards: WebShop's purchase reward as the outcome, and turn rewards read from what the environment recorded
on each step (step["extras"]["webshop"]).

Turn rewards cannot be farmed (issue 21: alternating search[goal words] and click[Back to Search] earned 0.8):
search_hit pays the rollout's first search whose results list a satisfying product, target_click the rollout's
first click that opens one; valid_action (weight 0 by default, logged) pays every valid action, so a positive
weight on it rewards activity of any kind.
"""

from __future__ import annotations

from verifiers.types import State

from vf_webshop.engine import Shop


def purchase_reward(state: State, **kwargs) -> float:
    """WebShop's reward of the purchase (0.0 without one)."""
    return float(state["webshop_session"].reward)


def success(state: State, **kwargs) -> float:
    """WebShop's success rate: the purchase earned reward 1.0 (Yao et al. 2022, section 5)."""
    return float(state["webshop_session"].reward == 1.0)


def make_turn_rewards(shop: Shop) -> list:
    """[valid_action, search_hit, target_click]. A product satisfies the goal when buying it with the goal's option
    values it offers earns reward 1.0 (Shop.satisfies), so these rewards point at purchases that the outcome reward
    pays in full."""

    def is_search_hit(record: dict, goal: dict) -> bool:
        if not (record["valid"] and record["action"].startswith("search[")):
            return False
        return any(shop.satisfies(asin, goal) for asin in record["listed"])

    def is_target_click(record: dict, goal: dict) -> bool:
        if not (record["valid"] and record["page"] == "item" and record["action"].startswith("click[")):
            return False
        clicked = record["action"][len("click[") : -1].upper()
        return clicked in shop.products and shop.satisfies(clicked, goal)

    def first_time(test, step, state, turn_index: int, goal: dict) -> float:
        """1 when this step passes `test` and no earlier step of the rollout did."""
        if not test(step["extras"]["webshop"], goal):
            return 0.0
        earlier = state["trajectory"][:turn_index]
        return float(not any(test(s["extras"]["webshop"], goal) for s in earlier))

    def valid_action(step, **kwargs) -> float:
        """1 when the shop accepted the action."""
        return float(step["extras"]["webshop"]["valid"])

    def search_hit(step, state, turn_index, info, **kwargs) -> float:
        """1 for the rollout's first search whose first results page lists a product that satisfies the goal."""
        return first_time(is_search_hit, step, state, turn_index, info["goal"])

    def target_click(step, state, turn_index, info, **kwargs) -> float:
        """1 for the rollout's first click that opens the page of a product that satisfies the goal."""
        return first_time(is_target_click, step, state, turn_index, info["goal"])

    return [valid_action, search_hit, target_click]
