"""The shop and its goals as verifiers rows: catalogue (generated or WebShop's files) -> prices -> goals."""

from __future__ import annotations

import json
import random

from datasets import Dataset

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


def shop_and_goals(products: list[dict], seed: int, human_goals: bool, bm25_backend: str) -> tuple[Shop, list[dict]]:
    """The shop (prices seeded as WebShop's engine does) and its goals in WebShop's shuffled order."""
    prices = generate_product_prices(products, random.Random(seed))
    goals = get_goals(products, prices, human_goals=human_goals, seed=seed)
    if not goals:
        raise ValueError("vf-webshop: the catalogue yields no goals (no product has an instruction)")
    return Shop(products, prices, bm25_backend=bm25_backend), goals


def split_goals(goals: list[dict], num_train: int, num_eval: int) -> tuple[list[dict], list[dict]]:
    """WebShop's baselines test on the first 500 shuffled goals and train on the others (baseline_models/env.py)."""
    eval_goals = goals[:num_eval] if num_eval > 0 else goals
    train_goals = goals[len(eval_goals) :] or eval_goals
    return (train_goals[:num_train] if num_train > 0 else train_goals), eval_goals


def to_dataset(shop: Shop, goals: list[dict], training_targets: set[str] | None = None) -> Dataset:
    """One row per goal: the search page as the question, the goal's product as the answer. With
    `training_targets` (the asins the training goals ask for), each row's info also says whether its product is
    one of them (`target_in_training`): a held-out goal is a new instruction, not always a new product."""
    def info(goal: dict) -> dict:
        if training_targets is None:
            return {"goal": goal}
        return {"goal": goal, "target_in_training": goal["asin"] in training_targets}

    return Dataset.from_list([
        # JSON keeps each goal's own option keys (Arrow would merge dict keys across rows)
        {"question": Session(shop, g).observation(), "answer": g["asin"], "info": json.dumps(info(g))}
        for g in goals
    ])
