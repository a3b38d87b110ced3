"""The shop engine: WebShop's pages and actions, invalid actions, the scripted expert, goal generation."""

from __future__ import annotations

import json
import math
import random

import pytest
from vf_webshop.catalog import generate_catalog, generate_product_prices, search_text
from vf_webshop.engine import SEP, Session, Shop
from vf_webshop.expert import run_expert
from vf_webshop.goals import get_goals, get_human_goals


@pytest.fixture(scope="module")
def synthetic():
    products = generate_catalog(seed=0)
    prices = generate_product_prices(products, random.Random(0))
    return Shop(products, prices), get_goals(products, prices, human_goals=False, seed=0)


@pytest.fixture(scope="module")
def sample(sample_shop):
    products, prices, goals = sample_shop
    return Shop(products, prices), goals


def test_pages_and_navigation(synthetic):
    shop, goals = synthetic
    s = Session(shop, goals[0])
    assert s.observation() == SEP.join(["WebShop", "Instruction:", goals[0]["instruction_text"], "Search"])
    assert s.state_key() == "search"

    assert s.step("search[Yoga Mat NON SLIP]").valid  # arguments are lower-cased, as in WebShop
    assert s.keywords == "yoga mat non slip" and s.state_key() == "results|yoga mat non slip|1"
    total = len(s.results)
    assert 10 < total <= 50
    page1 = s.listed()
    assert len(page1) == 10 and f"Page 1 (Total results: {total})" in s.observation()
    assert "< Prev" not in s.observation().split(SEP) and "Next >" in s.observation().split(SEP)

    assert s.step("click[Next >]").valid and s.page_num == 2 and s.listed() == s.results[10:20]
    assert s.step("click[< Prev]").valid and s.listed() == page1

    asin = page1[0]
    assert s.step(f"click[{asin.lower()}]").valid and s.page == "item" and s.asin == asin
    item = s.observation().split(SEP)
    assert item[-4:] == ["Description", "Features", "Reviews", "Buy Now"]
    assert f"Price: {shop.products[asin]['Price']}" in item

    option_name, values = next(iter(shop.products[asin]["options"].items()))
    assert s.step(f"click[{values[0]}]").valid and s.options == {option_name: values[0]}
    assert s.observation().startswith(f"You have clicked {option_name}: {values[0]}.")

    assert s.step("click[Features]").valid and s.page == "sub"
    assert s.observation().split(SEP)[4:] == shop.products[asin]["BulletPoints"]
    assert s.step("click[< Prev]").valid and s.page == "item" and s.options == {option_name: values[0]}

    # back to the results page: WebShop resets the chosen options there
    assert s.step("click[< Prev]").valid and s.page == "results" and s.options == {}
    assert s.step("click[Back to Search]").valid and s.page == "search" and s.results == []


@pytest.mark.parametrize(
    "setup, action, why",
    [
        ([], "click[Buy Now]", "not an action of this page"),
        ([], "search[]", "not an action of this page"),
        ([], "buy the yoga mat", "not an action of this page"),
        (["search[yoga mat]"], "click[< Prev]", "not an action of this page"),
        (["search[yoga mat]"], "search[coffee]", "search is only possible on the search page"),
        (["search[yoga mat]"], "click[B000NOTHERE]", "not an action of this page"),
    ],
)
def test_invalid_actions_leave_the_page_unchanged(synthetic, setup, action, why):
    shop, goals = synthetic
    s = Session(shop, goals[0])
    for a in setup:
        assert s.step(a).valid
    before = (s.observation(), s.state_key())
    result = s.step(action)
    assert not result.valid and not result.done and result.reward == 0.0
    assert result.observation.startswith(f"Invalid action {action!r}: {why}")
    assert "Valid actions:" in result.observation and result.observation.endswith(before[0])
    assert (s.observation(), s.state_key()) == before


def test_nothing_after_the_purchase(synthetic):
    shop, goals = synthetic
    s = Session(shop, goals[0])
    run_expert(s)
    assert s.page == "done" and s.state_key() == "done"
    assert not s.step("click[Back to Search]").valid


def test_expert_succeeds_on_the_generated_shop(synthetic):
    shop, goals = synthetic
    for goal in random.Random(0).sample(goals, 30):
        s = Session(shop, goal)
        actions = run_expert(s)
        assert s.reward == 1.0, (goal, actions, s.reward_info)
        assert actions[0].startswith("search[") and actions[-1] == "click[Buy Now]"


def test_expert_on_webshop_sample_matches_what_the_reward_allows(sample):
    shop, goals = sample
    sampled = random.Random(0).sample(goals, 40)
    rewards = []
    for goal in sampled:
        s = Session(shop, goal)
        run_expert(s, max_steps=20)
        rewards.append(s.reward)
        # the expert buys the goal's own product with the goal's options: full reward exactly when the
        # reference reward allows it for that product (see the green2 case below for when it does not)
        assert (s.reward == 1.0) == shop.satisfies(goal["asin"], goal), (goal, s.reward_info)
    assert sum(r == 1.0 for r in rewards) >= 30


def test_reference_quirk_green2_caps_a_perfect_purchase(sample):
    # goal.py matches a synthetic goal's option as the pair ('color', 'green2'); the purchased 'green2' is
    # normalised to 'green' and scores < 85 against it, so buying exactly the goal misses one option
    shop, goals = sample
    goal = next(g for g in goals if g["asin"] == "B07MGB73NJ" and g["goal_options"].get("color") == "green2")
    s = Session(shop, goal)
    run_expert(s, max_steps=20)
    assert s.options["color"] == "green2"
    n = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    assert s.reward == pytest.approx((n - 1) / n)


def test_search_text_is_webshops_document_contents(sample_shop, webshop_files):
    products, _, _ = sample_shop
    with open(webshop_files["products_path"]) as f:
        docs = [json.loads(line) for line in f]
    assert [search_text(p) for p in products] == [d["contents"] for d in docs]


def test_synthetic_goals_follow_goal_py(sample_shop):
    products, prices, goals = sample_shop
    instructed = [p for p in products if p.get("instruction_text")]
    # one goal per option combination of every product with an instruction
    assert len(goals) == sum(math.prod(len(v) for v in p["options"].values()) for p in instructed) == 501
    by_asin = {p["asin"]: p for p in products}
    for goal in goals:
        product = by_asin[goal["asin"]]
        assert goal["instruction_text"].startswith(product["instruction_text"])
        assert goal["attributes"] == product["instruction_attributes"] and goal["name"] == product["Title"]
        assert sorted(goal["goal_options"]) == sorted(product["options"])
    for goal in goals:
        price = prices[goal["asin"]]
        if goal["price_upper"] != 1000000:
            # goal.py: the larger of two draws among the four grid prices above the product's price
            assert price < goal["price_upper"] <= (int(price // 10) + 4) * 10
            assert goal["instruction_text"].endswith(
                f", and price lower than {goal['price_upper']:.2f} dollars"
            )
    assert get_goals(products, prices, human_goals=False, seed=0) == goals
    assert get_goals(products, prices, human_goals=False, seed=1) != goals


def test_human_goals_from_items_human_ins(sample_shop):
    products, prices, _ = sample_shop
    target = dict(products[0])
    target["instructions"] = [
        {"instruction": "i want a console table of solid wood.", "instruction_attributes": ["solid wood"],
         "instruction_options": []},
        {"instruction": "skipped: no attributes", "instruction_attributes": [], "instruction_options": ["x"]},
    ]  # fmt: skip
    goals = get_human_goals([target], {target["asin"]: 15.0}, random.Random(0))
    assert len(goals) == 1
    (g,) = goals
    assert g["instruction_text"].startswith("i want a console table of solid wood,") and g["weight"] == 1
    assert g["price_upper"] in (30.0, 40.0, 50.0) and g["goal_options"] == [] and g["name"] == target["name"]
    assert (
        get_human_goals([target], None, random.Random(0))[0]["instruction_text"]
        == "i want a console table of solid wood"
    )
