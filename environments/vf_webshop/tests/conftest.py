"""Fixtures for the vf-webshop tests: WebShop's sample files as the engine loads them."""

from __future__ import annotations

import random

import pytest
from vf_webshop.catalog import (
    attach_goal_fields,
    generate_product_prices,
    load_processed_documents,
    read_json,
)
from vf_webshop.goals import get_goals


@pytest.fixture(scope="session")
def webshop_files(shared_data):
    folder = shared_data / "webshop"
    return {
        "products_path": str(folder / "products_first100_processed_documents.jsonl"),
        "attributes_path": str(folder / "items_ins_v2_1000.json"),
    }


@pytest.fixture(scope="session")
def sample_shop(webshop_files):
    """(products, prices, goals) of the 100-product sample, as WebShop's engine builds them (synthetic goals)."""
    products = load_processed_documents(webshop_files["products_path"])
    attach_goal_fields(products, read_json(webshop_files["attributes_path"], "items_ins_v2"))
    prices = generate_product_prices(products, random.Random(0))
    return products, prices, get_goals(products, prices, human_goals=False, seed=0)
