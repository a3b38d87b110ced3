"""The product catalogue: WebShop's files as its engine loads them, or a generated offline shop.

Sources: princeton-nlp/WebShop web_agent_site/engine/engine.py (load_products, generate_product_prices) and
search_engine/convert_product_file_format.py (the search text of a product). A catalogue is a list of product
dicts with WebShop's keys (asin, name, Title, Description, BulletPoints, Price, pricing, options, Attributes,
query, category, product_category, Rating, Reviews, ...), plus the goal fields from items_ins_v2
(instruction_text, instruction_attributes) or items_human_ins (instructions).
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal
from pathlib import Path

DEFAULT_PRICE = 100.0  # engine.py: products without pricing cost $100.0


def read_json(path: str | Path, what: str):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"vf_webshop: {what} not found at {path}; pass the path of WebShop's {what}")
    with path.open() as f:
        return json.load(f)


def load_processed_documents(path: str | Path) -> list[dict]:
    """Products from a search-engine documents file (`{"id", "contents", "product"}` per line, engine layout)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"vf_webshop: documents file not found at {path}; expected WebShop's "
            "search_engine/resources*/documents.jsonl"
        )
    products = []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            doc = json.loads(line)
            if "product" not in doc:
                raise ValueError(f"{path}:{line_no}: no 'product' field; is this a WebShop documents.jsonl?")
            products.append(doc["product"])
    return products


def _options(customization_options) -> dict[str, list[str]]:
    """engine.py load_products: option names and values lower-cased, '/' shown as ' | '."""
    options: dict[str, list[str]] = {}
    for option_name, option_contents in (customization_options or {}).items():
        if option_contents is None:
            continue
        options[option_name.lower()] = [
            c["value"].strip().replace("/", " | ").lower() for c in option_contents
        ]
    return options


def _pricing(pricing: str | None) -> tuple[list[float], str]:
    """engine.py load_products: '$12.99 - $15.99' -> ([12.99, 15.99], '$12.99 to $15.99')."""
    if not pricing:
        return [DEFAULT_PRICE], "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", price))) for price in pricing.split("$")[1:]]
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def process_raw_products(raw_products: list[dict], num_products: int | None = None) -> list[dict]:
    """WebShop's load_products over the raw scrape (items_shuffle*.json), without the reviews file."""
    products, seen = [], set()
    for p in raw_products[:num_products]:
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        pricing, price_tag = _pricing(p.get("pricing"))
        products.append(
            {
                **p,
                "Title": p["name"],
                "Description": p["full_description"],
                "Reviews": [],
                "Rating": "N.A.",
                "BulletPoints": p["small_description"]
                if isinstance(p["small_description"], list)
                else [p["small_description"]],
                "pricing": pricing,
                "Price": price_tag,
                "options": _options(p["customization_options"]),
                "MainImage": p["images"][0],
                "query": p["query"].lower().strip(),
            }
        )
    return products


def attach_goal_fields(
    products: list[dict], attributes: dict, human_instructions: dict | None = None
) -> None:
    """Attributes and instructions per asin, as load_products does (DUMMY_ATTR when an asin has none)."""
    for product in products:
        entry = attributes.get(product["asin"], {})
        product["Attributes"] = entry.get("attributes", ["DUMMY_ATTR"])
        product["instruction_text"] = entry.get("instruction")
        product["instruction_attributes"] = entry.get("instruction_attributes")
        if human_instructions is not None and product["asin"] in human_instructions:
            product["instructions"] = human_instructions[product["asin"]]


def generate_product_prices(products: list[dict], rng: random.Random) -> dict[str, float]:
    """engine.py: one price per product, uniform within its price range."""
    prices = {}
    for product in products:
        pricing = product["pricing"]
        if not pricing:
            prices[product["asin"]] = DEFAULT_PRICE
        elif len(pricing) == 1:
            prices[product["asin"]] = pricing[0]
        else:
            prices[product["asin"]] = rng.uniform(*pricing[:2])
    return prices


def search_text(product: dict) -> str:
    """convert_product_file_format.py: title, description, first bullet point and options, lower-cased."""
    option_text = ", and ".join(
        f"{name}: {', '.join(values)}" for name, values in product.get("options", {}).items()
    )
    bullets = product["BulletPoints"]
    return " ".join(
        [product["Title"], product["Description"], bullets[0] if bullets else "", option_text]
    ).lower()


# --- the generated shop (offline default) --------------------------------------------------------------------

# (query, product_category path, category, noun phrase, attribute pool, option pools)
PRODUCT_TYPES = [
    (
        "running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
        "fashion",
        "Running Shoes",
        ["non slip", "rubber sole", "lightweight", "memory foam", "breathable mesh"],
        {"color": ["black", "navy blue", "grey", "white"], "size": ["8", "9", "10", "11"]},
    ),
    (
        "yoga mat",
        "Sports & Outdoors › Exercise & Fitness › Yoga › Mats",
        "sports",
        "Yoga Mat",
        ["non slip", "eco friendly", "extra thick", "easy clean", "carrying strap"],
        {"color": ["purple", "teal", "black"], "size": ["6mm", "10mm"]},
    ),
    (
        "coffee maker",
        "Home & Kitchen › Kitchen & Dining › Coffee, Tea & Espresso › Coffee Makers",
        "kitchen",
        "Coffee Maker",
        ["stainless steel", "programmable", "auto shut off", "dishwasher safe", "bpa free"],
        {"color": ["black", "silver", "red"]},
    ),
    (
        "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        "beauty",
        "Shampoo",
        ["sulfate free", "paraben free", "natural ingredients", "tea tree", "for dry hair"],
        {"size": ["8 fl oz", "16 fl oz", "32 fl oz"]},
    ),
    (
        "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        "electronics",
        "Phone Case",
        ["shockproof", "wireless charging", "slim fit", "scratch resistant", "easy install"],
        {"color": ["clear", "black", "pink", "blue"]},
    ),
    (
        "console table",
        "Home & Kitchen › Furniture › Living Room Furniture › Tables › Sofa & Console Tables",
        "garden",
        "Console Table",
        ["solid wood", "easy assemble", "storage space", "living room", "metal frame"],
        {"color": ["walnut", "white", "espresso"]},
    ),
    (
        "wireless earbuds",
        "Electronics › Headphones, Earbuds & Accessories › Earbud Headphones",
        "electronics",
        "Wireless Earbuds",
        ["noise cancelling", "long battery life", "water resistant", "charging case", "hands free"],
        {"color": ["black", "white"]},
    ),
    (
        "protein bars",
        "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars",
        "grocery",
        "Protein Bars",
        ["gluten free", "low sugar", "high protein", "keto friendly", "non gmo"],
        {"flavor name": ["chocolate", "peanut butter", "vanilla"], "size": ["pack of 6", "pack of 12"]},
    ),
]
BRANDS = ["Acme", "Nordlys", "Vireo", "Halcyon", "Tamarind", "Quillon", "Brightwell", "Oakhurst", "Zephyra"]
ADJECTIVES = ["Classic", "Premium", "Ultra", "Everyday", "Pro", "Deluxe", "Compact", "Essential"]


def generate_catalog(seed: int = 0, products_per_type: int = 8) -> list[dict]:
    """A seeded shop in WebShop's product layout: per type, products with 3 of its 5 attributes and 2-4 values
    per option; half of them get an instruction naming 2 of their attributes, in the style of items_ins_v2."""
    if products_per_type < 1:
        raise ValueError(f"generate_catalog: products_per_type must be >= 1, got {products_per_type}")
    rng = random.Random(seed)
    products = []
    for type_index, (query, path, category, noun, attribute_pool, option_pools) in enumerate(PRODUCT_TYPES):
        for i in range(products_per_type):
            attributes = rng.sample(attribute_pool, 3)
            options = {
                name: sorted(rng.sample(values, rng.randint(min(2, len(values)), len(values))))
                for name, values in option_pools.items()
            }
            low = round(rng.uniform(8, 90), 2)
            pricing = [low] if rng.random() < 0.6 else [low, round(low * rng.uniform(1.05, 1.5), 2)]
            title = f"{rng.choice(BRANDS)} {rng.choice(ADJECTIVES)} {noun}, {attributes[0].title()} and {attributes[1].title()}"
            description = f"This {noun.lower()} is {attributes[0]}, {attributes[1]} and {attributes[2]}."
            instructed = i % 2 == 0
            goal_attributes = rng.sample(attributes, 2)
            products.append(
                {
                    "asin": f"S{type_index:02d}{i:03d}{rng.randrange(16**4):04X}",
                    "name": title,
                    "Title": title,
                    "Description": description,
                    "BulletPoints": [f"{a.capitalize()}." for a in attributes],
                    "pricing": pricing,
                    "Price": f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}",
                    "options": options,
                    "Attributes": attributes,
                    "query": query,
                    "category": category,
                    "product_category": path,
                    "Rating": "N.A.",
                    "Reviews": [],
                    "instruction_text": (
                        f"i am looking for a {noun.lower()} that is {goal_attributes[0]} and {goal_attributes[1]}"
                        if instructed
                        else None
                    ),
                    "instruction_attributes": goal_attributes if instructed else None,
                }
            )
    return products
