"""The shop: BM25 search over the catalogue and WebShop's text-mode pages, with WebShop's action names.

Sources: princeton-nlp/WebShop web_agent_site/engine/engine.py (SEARCH_RETURN_N=50 hits, PRODUCT_WINDOW=10 per
page, button names, parse_action) and envs/web_agent_text_env.py (the `text` observation mode: visible page
texts joined by ' [SEP] '; clickables lower-cased; SimServer.receive's page transitions; options kept in the
session until the next results page). Templates: web_agent_site/templates/*.html.

Deliberate differences: search is offered on the search page only (WebShop's `has_search_bar`; the original
text env would also run a search typed elsewhere), an action that is not available gets an observation
saying so (the original silently does nothing), and a query over MAX_QUERY_CHARS is refused (a policy can write
200 KB; the original has no limit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from vf_webshop.catalog import search_text
from vf_webshop.reward import get_reward

SEARCH_RETURN_N = 50  # engine.py
PRODUCT_WINDOW = 10  # engine.py
SEP = " [SEP] "  # web_agent_text_env.py convert_html_to_text(simple=True)

END_BUTTON = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SUB_PAGES = (
    "Description",
    "Features",
    "Reviews",
)  # engine.py ACTION_TO_TEMPLATE without the hidden Attributes

MAX_QUERY_CHARS = 500  # a shopper's query is a few words
SHOWN_ACTION_CHARS = 200  # how much of an invalid action the observation quotes back


def parse_action(action: str) -> tuple[str, str | None]:
    r"""`search[red shoes]` -> ('search', 'red shoes'); anything else -> (action, None).

    engine.py parse_action matches `(.+)\[(.+)\]` from the start: within the first line, the name runs to the
    last `[` that has a `]` at least two characters later, and the argument to the last `]`. That regex backtracks
    quadratically over many `[`; this finds the same two positions with str.rfind."""
    line = action.split("\n", 1)[0]
    close = line.rfind("]")
    opening = line.rfind("[", 0, close - 1) if close >= 2 else -1
    if opening < 1:  # no `[` with a non-empty name before it and a non-empty argument after it
        return action, None
    return line[:opening], line[opening + 1 : close]


class Shop:
    """A catalogue, its prices and a BM25 index: shared, read-only, by every session."""

    def __init__(self, products: list[dict], prices: dict[str, float], *, bm25_backend: str = "bm25s"):
        from rlvr.retrieval import BM25Retriever, Document

        if not products:
            raise ValueError("Shop: empty catalogue")
        self.products = {p["asin"]: p for p in products}
        missing = [asin for asin in self.products if asin not in prices]
        if missing:
            raise ValueError(f"Shop: no price for {len(missing)} products, e.g. {missing[:3]}")
        self.prices = prices
        # WebShop indexes its documents with Lucene's BM25 through pyserini, whose defaults are k1=0.9, b=0.4
        docs = [Document(id=asin, title=p["Title"], text=search_text(p)) for asin, p in self.products.items()]
        self._index = BM25Retriever(docs, backend=bm25_backend, k1=0.9, b=0.4)
        self._satisfies: dict[tuple[str, str], bool] = {}

    def search(self, query: str) -> list[str]:
        """ASINs of the top SEARCH_RETURN_N products for `query` (engine.py get_top_n_product_from_keywords)."""
        return [hit.doc.id for hit in self._index.search(query, k=SEARCH_RETURN_N)]

    def purchase_reward(self, asin: str, goal: dict, options: dict, verbose: bool = False):
        return get_reward(
            self.products[asin], goal, price=self.prices[asin], options=options, verbose=verbose
        )

    def satisfies(self, asin: str, goal: dict) -> bool:
        """Whether buying `asin` with the goal's option values it offers earns reward 1.0 (cached)."""
        key = (json.dumps(goal, sort_keys=True), asin)
        if key not in self._satisfies:
            wanted = set(
                goal["goal_options"].values()
                if isinstance(goal["goal_options"], dict)
                else goal["goal_options"]
            )
            offered = {
                name: v
                for name, values in self.products[asin]["options"].items()
                for v in values
                if v in wanted
            }
            self._satisfies[key] = self.purchase_reward(asin, goal, offered) == 1.0
        return self._satisfies[key]


@dataclass
class StepResult:
    observation: str
    valid: bool
    done: bool = False
    reward: float = 0.0
    info: dict = field(default_factory=dict)


class Session:
    """One shopper's browser on the shop, for one goal (web_agent_text_env.py SimServer session + SimBrowser)."""

    def __init__(self, shop: Shop, goal: dict):
        self.shop = shop
        self.goal = goal
        self.reward = 0.0
        self.reward_info: dict = {}
        self._show_search_page()

    def _show_search_page(self) -> None:
        """index(): a fresh search page for the same goal (also what Back to Search does)."""
        self.page = "search"  # search | results | item | sub | done
        self.keywords: str | None = None
        self.results: list[str] = []
        self.page_num = 1
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.sub_page: str | None = None

    # --- what the agent sees ------------------------------------------------------------------------------
    def state_key(self) -> str:
        """The page the agent is on, for anchor-state grouping (GiGPO): equal keys = identical observations."""
        if self.page == "results":
            return f"results|{self.keywords}|{self.page_num}"
        if self.page in ("item", "sub"):
            sub = f"|{self.sub_page}" if self.page == "sub" else ""
            return f"{self.page}|{self.asin}|{json.dumps(self.options, sort_keys=True)}{sub}"
        return self.page

    def clickables(self) -> dict[str, tuple[str, str | None]]:
        """Lower-cased click targets of the current page -> (kind, option name) (get_available_actions)."""
        targets: dict[str, tuple[str, str | None]] = {}
        if self.page in ("results", "item", "sub"):
            targets[BACK_TO_SEARCH.lower()] = ("button", None)
        if self.page == "results":
            if self.page_num > 1:
                targets[PREV_PAGE.lower()] = ("button", None)
            if self.page_num * PRODUCT_WINDOW < len(self.results):
                targets[NEXT_PAGE.lower()] = ("button", None)
            for asin in self.listed():
                targets[asin.lower()] = ("product", None)
        elif self.page == "item":
            targets[PREV_PAGE.lower()] = ("button", None)
            for sub in SUB_PAGES:
                targets[sub.lower()] = ("button", None)
            targets[END_BUTTON.lower()] = ("button", None)
            for name, values in self.product()["options"].items():
                for value in values:
                    targets[value] = ("option", name)
        elif self.page == "sub":
            targets[PREV_PAGE.lower()] = ("button", None)
        return targets

    def available_actions(self) -> list[str]:
        """Action strings valid on this page, with WebShop's capitalisation."""
        if self.page == "search":
            return ["search[<your query>]"]
        names = {b.lower(): b for b in (BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, END_BUTTON, *SUB_PAGES)}
        return [
            f"click[{names.get(t, t.upper() if kind == 'product' else t)}]"
            for t, (kind, _) in self.clickables().items()
        ]

    def product(self) -> dict:
        return self.shop.products[self.asin]

    def listed(self) -> list[str]:
        """ASINs shown on the current results page."""
        return self.results[(self.page_num - 1) * PRODUCT_WINDOW : self.page_num * PRODUCT_WINDOW]

    def observation(self) -> str:
        """The page in WebShop's `text` observation mode (templates' visible texts joined by [SEP])."""
        instruction = self.goal["instruction_text"]
        if self.page == "search":
            parts = ["WebShop", "Instruction:", instruction, "Search"]
        elif self.page == "results":
            parts = [
                "Instruction:",
                instruction,
                BACK_TO_SEARCH,
                f"Page {self.page_num} (Total results: {len(self.results)})",
            ]
            if self.page_num > 1:
                parts.append(PREV_PAGE)
            if self.page_num * PRODUCT_WINDOW < len(self.results):
                parts.append(NEXT_PAGE)
            for asin in self.listed():
                product = self.shop.products[asin]
                parts += [asin, product["Title"], product["Price"]]
        elif self.page == "item":
            product = self.product()
            parts = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE]
            for name, values in product["options"].items():
                parts += [name, *values]
            parts += [
                product["Title"],
                f"Price: {product['Price']}",
                f"Rating: {product['Rating']}",
                *SUB_PAGES,
                END_BUTTON,
            ]
        elif self.page == "sub":
            parts = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE, *self._sub_page_texts()]
        else:
            parts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{self.reward}"]
        text = SEP.join(p.strip() for p in parts)
        if self.page == "item" and self.options:
            chosen = ", ".join(f"{k}: {v}" for k, v in self.options.items())
            text = f"You have clicked {chosen}.\n{text}"  # web_agent_text_env.py (text_rich) names clicked options
        return text

    def _sub_page_texts(self) -> list[str]:
        product = self.product()
        if self.sub_page == "Description":
            return [product["Description"] or "No Description"]
        if self.sub_page == "Features":
            return list(product["BulletPoints"]) or ["No Features"]
        reviews = product.get("Reviews") or []
        return [
            f"{r.get('score', '')} {r.get('title', '')} {r.get('body', '')}".strip() for r in reviews
        ] or ["No Reviews"]

    # --- what the agent does ------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        """Apply one action string; an unavailable or malformed one leaves the page as it was."""
        if self.page == "done":
            return self._invalid(action, "the purchase is complete")
        name, arg = parse_action(action.strip())
        if arg is not None:
            arg = arg.lower()  # web_agent_text_env.py step(): the argument is lower-cased
        if name == "search" and arg is not None and arg.strip():
            if len(arg) > MAX_QUERY_CHARS:
                return self._invalid(action, f"the query has {len(arg):,} characters; search with a few words "
                                             f"(at most {MAX_QUERY_CHARS})")
            if self.page != "search":
                return self._invalid(
                    action, f"search is only possible on the search page; click[{BACK_TO_SEARCH}] first"
                )
            self.keywords = arg
            self.results = self.shop.search(arg)
            self._show_results(page_num=1)
            return StepResult(self.observation(), valid=True)
        if name == "click" and arg is not None and arg in self.clickables():
            return self._click(arg)
        return self._invalid(action, "not an action of this page")

    def _click(self, target: str) -> StepResult:
        kind, option_name = self.clickables()[target]
        if target == END_BUTTON.lower():
            self.reward, self.reward_info = self.shop.purchase_reward(
                self.asin, self.goal, self.options, verbose=True
            )
            self.page = "done"
            return StepResult(
                self.observation(), valid=True, done=True, reward=self.reward, info=self.reward_info
            )
        if target == BACK_TO_SEARCH.lower():
            self._show_search_page()
        elif target == NEXT_PAGE.lower():
            self._show_results(self.page_num + 1)
        elif target == PREV_PAGE.lower():
            if self.page == "results":
                self._show_results(self.page_num - 1)
            elif self.page == "sub":
                self.page = "item"
            else:
                self._show_results(self.page_num)
        elif target in (s.lower() for s in SUB_PAGES):
            self.page, self.sub_page = "sub", next(s for s in SUB_PAGES if s.lower() == target)
        elif kind == "product":
            self.page, self.asin = "item", target.upper()
        else:
            self.options[option_name] = target
            self.page = "item"
        return StepResult(self.observation(), valid=True)

    def _show_results(self, page_num: int) -> None:
        """search_results(): a results page resets the chosen product and its options."""
        self.page, self.page_num, self.asin, self.options, self.sub_page = "results", page_num, None, {}, None

    def _invalid(self, action: str, why: str) -> StepResult:
        valid = ", ".join(self.available_actions()) or "none"
        shown = action if len(action) <= SHOWN_ACTION_CHARS else action[:SHOWN_ACTION_CHARS] + "..."
        text = f"Invalid action {shown!r}: {why}. Valid actions: {valid}.\n{self.observation()}"
        return StepResult(text, valid=False)
