"""Colour normalisation used by WebShop's option reward.

Source: princeton-nlp/WebShop web_agent_site/engine/normalize.py (COLOR_SET, normalize_color). The list order
matters: normalize_color returns the FIRST colour of this list contained in the string ("violet lavender" ->
"lavender", because "lavender" comes before "violet").
"""

from __future__ import annotations

COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip


def normalize_color(color_string):
    """The first COLOR_SET entry contained in `color_string`, else the input unchanged.

    `in` is Python's containment test, exactly as in the reference: a substring test for a str, and an element
    test for the (name, value) tuples that the reference passes for dict-valued goal options.
    """
    for norm_color in COLOR_SET:
        if norm_color in color_string:
            return norm_color
    return color_string
