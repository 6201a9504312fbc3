"""The WebShop site in text mode: search, result pages, item pages with options, buy, reward.

Standard library only (plus `bm25s` when it is installed), and no package-relative imports:
this file is also written into the workspace as `env/webshop_sim.py`, next to the backend
`env/webshop_env.py`, so the agent's training environment is the grader's, line for line.

What it reproduces of princeton-nlp/WebShop (`web_agent_site/envs/web_agent_text_env.py`,
`engine/engine.py`, `engine/goal.py`, `engine/normalize.py`): the pages and buttons of the text
environment, `search[...]`/`click[...]` actions (an invalid action does nothing), 50 results
shown 10 per page, the search documents (title, description, first bullet point, options) and
the reward `get_reward` (type, attribute, option and price matching). Deviations are listed in
the task's description.md; the main ones: BM25 by `bm25s` (Lucene's k1=0.9, b=0.4, no
stemming) instead of Pyserini, `thefuzz` re-implemented, and spaCy's noun tagging replaced by a
word filter in the type reward.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

try:  # inside the workspace: env/a2rl_env.py is a sibling module
    from a2rl_env import Step  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Step

SIM_VERSION = 1
SEP = " [SEP] "
SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
END_BUTTON, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "buy now", "next >", "< prev", "back to search"
SUB_PAGES = ("description", "features", "reviews")
EXACT_MATCH_OPTS = ("size",)
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
BM25_K1, BM25_B = 0.9, 0.4  # Pyserini's LuceneSearcher defaults, as the original's index
STOPWORDS = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
        "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there",
        "these", "they", "this", "to", "was", "will", "with", "i", "me", "my", "we", "our", "you",
        "your", "he", "she", "him", "her", "its", "them", "what", "which", "who", "whom", "am",
        "were", "been", "being", "have", "has", "had", "do", "does", "did", "so", "than", "too",
        "very", "can", "just", "should", "now", "from", "up", "down", "out", "over", "under",
        "again", "further", "once", "here", "when", "where", "why", "how", "all", "any", "both",
        "each", "few", "more", "most", "other", "some", "own", "same", "only",
    ])

# --- engine/normalize.py ------------------------------------------------------------------------
COLOR_SET = [
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue",
    "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper",
    "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso",
    "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather",
    "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum",
    "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger",
    "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
]


def normalize_color(text: str) -> str:
    """The first colour of COLOR_SET found in `text`, else `text` (the original's order)."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text


# --- thefuzz.fuzz.token_set_ratio ---------------------------------------------------------------
def _process(text: str) -> str:
    """thefuzz's default processor: non-alphanumerics to spaces, lower-cased, stripped."""
    return re.sub(r"[^0-9a-zA-Z]+", " ", text).lower().strip()


def _lcs(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def ratio(a: str, b: str) -> float:
    """The normalized indel similarity (rapidfuzz's `ratio`), 0..100."""
    total = len(a) + len(b)
    return 100.0 * 2 * _lcs(a, b) / total if total else 100.0


def token_set_ratio(a: str, b: str) -> int:
    """`thefuzz.fuzz.token_set_ratio` (rapidfuzz semantics, rounded as thefuzz does)."""
    ta, tb = set(_process(a).split()), set(_process(b).split())
    if not ta or not tb:
        return 0
    inter = ta & tb
    diff_ab, diff_ba = sorted(ta - tb), sorted(tb - ta)
    if inter and (not diff_ab or not diff_ba):
        return 100
    sect = " ".join(sorted(inter))
    sect_ab = " ".join([sect, *diff_ab]).strip()
    sect_ba = " ".join([sect, *diff_ba]).strip()
    best = ratio(sect_ab, sect_ba)
    if sect:
        best = max(best, ratio(sect, sect_ab), ratio(sect, sect_ba))
    return int(round(best))


# --- engine/goal.py: the reward ----------------------------------------------------------------
def type_words(name: str) -> list[str]:
    """Stand-in for spaCy's NOUN/PROPN tokens of a product name: its lower-cased alphabetic
    words of 2+ letters that are not stop words or colours (documented deviation)."""
    return [w for w in re.findall(r"[a-z]+", name.lower())
            if len(w) > 1 and w not in STOPWORDS and w not in COLOR_SET]


def get_type_reward(product: dict[str, Any], goal: dict[str, Any]) -> dict[str, Any]:
    query_match = product["query"] == goal["query"]
    cats_p = {x.strip() for x in product["product_category"].split("›")}
    cats_g = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(cats_p & cats_g) >= 2
    purchased, desired = type_words(product["name"]), type_words(goal["name"])
    title_score = (len(set(purchased) & set(desired)) / len(desired)) if desired else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _in_text(value: str, product: dict[str, Any]) -> bool:
    return (value in product["Title"].lower()
            or value in " ".join(product["BulletPoints"]).lower()
            or value in product["Description"].lower())


def get_attribute_reward(product: dict[str, Any], goal: dict[str, Any]) -> tuple[float, int]:
    matches = 0
    for g_attr in goal["attributes"]:
        if any(token_set_ratio(p_attr, g_attr) > 85 for p_attr in product["Attributes"]) or \
                _in_text(g_attr, product):
            matches += 1
    return matches / len(goal["attributes"]), matches


def get_option_reward(product: dict[str, Any], goal_options: Sequence[str],
                      purchased_options: dict[str, str]) -> tuple[float | None, int]:
    purchased = {k: normalize_color(v) for k, v in purchased_options.items()}
    goals = [normalize_color(o) for o in goal_options]
    matches = 0
    for key, value in purchased.items():
        if key.lower() in EXACT_MATCH_OPTS:
            matched = value in goals
        else:
            matched = any(token_set_ratio(g, value) > 85 for g in goals)
        if matched or _in_text(value, product):
            matches += 1
    return (matches / len(goals) if goals else None), matches


def get_reward(product: dict[str, Any], goal: dict[str, Any], price: float,
               options: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """The original total: (attribute matches + option matches + price ok) over (attributes +
    goal options + 1), times r_type. Returns (reward, the components)."""
    r_type = get_type_reward(product, goal)
    r_price = price <= goal["price_upper"] if goal["price_upper"] > 0 else None
    r_att, n_att = get_attribute_reward(product, goal)
    goal_opts = goal["goal_options"]
    goal_values = list(goal_opts.values()) if isinstance(goal_opts, dict) else list(goal_opts)
    r_option, n_opt = get_option_reward(product, goal_values, options)
    denom = len(goal["attributes"]) + len(goal_values) + 1
    total = (n_att + n_opt + int(bool(r_price))) / denom * r_type["r_type"]
    info = {**r_type, "r_att": r_att, "w_att": len(goal["attributes"]) / denom,
            "r_option": r_option, "w_option": len(goal_values) / denom,
            "r_price": r_price, "w_price": 1 / denom}
    return total, info


# --- search -------------------------------------------------------------------------------------
def tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in STOPWORDS]


def document_text(product: dict[str, Any]) -> str:
    """The original index's `contents`: title, description, first bullet point, options."""
    options = ", and ".join(f"{name}: {', '.join(values)}"
                            for name, values in product.get("options", {}).items())
    bullets = product["BulletPoints"] or [""]
    return " ".join([product["Title"], product["Description"], bullets[0], options]).lower()


class SearchEngine:
    """BM25 (Lucene variant) over the catalog's documents; `bm25s` when installed, else the same
    formula in pure Python (`backend` says which)."""

    def __init__(self, products: Sequence[dict[str, Any]]) -> None:
        self.asins = [p["asin"] for p in products]
        docs = [tokenize(document_text(p)) for p in products]
        try:
            import bm25s  # type: ignore[import-not-found]
        except ImportError:
            self.backend, self._bm25 = "python", None
            self._docs = [Counter(d) for d in docs]
            self._lens = [len(d) for d in docs]
            self._avg = (sum(self._lens) / len(docs)) if docs else 0.0
            df: Counter[str] = Counter()
            for d in self._docs:
                df.update(d.keys())
            n = len(docs)
            self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        else:
            self.backend = "bm25s"
            self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
            self._bm25.index(docs, show_progress=False)
            self._vocab = set(self._bm25.vocab_dict)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The asins of the best `k` documents, best first (ties by catalog order)."""
        tokens = tokenize(query)
        if not self.asins:
            return []
        if self._bm25 is None:
            scores = [self._score(i, tokens) for i in range(len(self.asins))]
        else:
            tokens = [t for t in tokens if t in self._vocab]
            if not tokens:
                return []
            scores = list(self._bm25.get_scores(tokens))
        order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
        return [self.asins[i] for i in order[:k]]

    def _score(self, i: int, tokens: Iterable[str]) -> float:
        doc, length, score = self._docs[i], self._lens[i], 0.0
        for t in tokens:
            tf = doc.get(t, 0)
            if tf:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * length / (self._avg or 1.0))
                score += self._idf[t] * tf / (tf + norm)
        return score


# --- the site -----------------------------------------------------------------------------------
def clean(text: Any) -> str:
    """One line of text (observations carry no newlines)."""
    return " ".join(str(text).split())


class Catalog:
    """The products (by asin) and their search engine, shared by every episode."""

    def __init__(self, products: Sequence[dict[str, Any]]) -> None:
        self.products = {p["asin"]: p for p in products}
        self.engine = SearchEngine(list(self.products.values()))


class WebShopEnv:
    """One WebShop session for one goal (an `a2rl_env.Env`)."""

    def __init__(self, catalog: Catalog, goal: dict[str, Any]) -> None:
        self.catalog, self.goal = catalog, goal
        self.page = "done"

    # state: page in {"search", "results", "item", "sub", "done"}
    def reset(self) -> Step:
        self.page, self.keywords, self.page_no = "search", "", 1
        self.results: list[str] = []
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.sub = ""
        return self._step()

    def _instruction(self) -> list[str]:
        return ["Instruction:", clean(self.goal["instruction_text"])]

    def instruction_text(self) -> str:
        """The original's `get_instruction_text()`: the text of the page's instruction heading
        (`<h4>Instruction: <br>{{ instruction_text }}</h4>`)."""
        return "Instruction: " + str(self.goal["instruction_text"])

    def clickables(self) -> list[str]:
        """What `click[...]` accepts on the current page (lower-case)."""
        if self.page == "results":
            out = [BACK_TO_SEARCH]
            if self.page_no > 1:
                out.append(PREV_PAGE)
            if self.page_no * PRODUCT_WINDOW < len(self.results):
                out.append(NEXT_PAGE)
            return out + [a.lower() for a in self._shown()]
        if self.page == "item":
            product = self.catalog.products[self.asin or ""]
            values = [v for vs in product["options"].values() for v in vs]
            return [BACK_TO_SEARCH, PREV_PAGE, *values, *SUB_PAGES, END_BUTTON]
        if self.page == "sub":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def _shown(self) -> list[str]:
        start = (self.page_no - 1) * PRODUCT_WINDOW
        return self.results[start:start + PRODUCT_WINDOW]

    def observation(self) -> str:
        if self.page == "search":
            return SEP.join(["WebShop", *self._instruction(), "Search"])
        parts = self._instruction() + ["Back to Search"]
        if self.page == "results":
            parts.append(f"Page {self.page_no} (Total results: {len(self.results)})")
            if self.page_no > 1:
                parts.append("< Prev")
            if self.page_no * PRODUCT_WINDOW < len(self.results):
                parts.append("Next >")
            for asin in self._shown():
                p = self.catalog.products[asin]
                parts += [asin, clean(p["Title"]), clean(p["Price"])]
            return SEP.join(parts)
        product = self.catalog.products[self.asin or ""]
        parts.append("< Prev")
        if self.page == "item":
            clicked = [f"You have clicked {v}." for v in self.options.values()]
            for name, values in product["options"].items():
                parts += [name, *values]
            parts += [clean(product["Title"]), f"Price: {product['Price']}",
                      f"Rating: {product.get('Rating', 'N.A.')}", "Description", "Features",
                      "Reviews", "Buy Now"]
            return SEP.join(clicked + parts)
        if self.sub == "description":
            parts.append(clean(product["Description"]))
        elif self.sub == "features":
            parts += [clean(b) for b in product["BulletPoints"]]
        else:
            for r in product.get("Reviews", []):
                parts += [clean(r.get("score", "")), clean(r.get("body", ""))]
        return SEP.join(parts)

    def _step(self, reward: float = 0.0, done: bool = False,
              info: dict[str, Any] | None = None) -> Step:
        info = dict(info or {})
        info["available_actions"] = {"has_search_bar": self.page == "search",
                                     "clickables": self.clickables()}
        obs = self.observation() if not done else info.pop("done_text")
        return Step(obs, reward=reward, done=done, admissible=None, info=info)

    def step(self, action: str) -> Step:
        if self.page == "done":
            raise RuntimeError("the episode is over: call reset()")
        m = re.match(r"^(\w+)\[(.+)\]$", action.strip())
        name, arg = (m.group(1), m.group(2).strip().lower()) if m else (action.strip(), "")
        if name == "search" and arg:
            return self._search(arg, 1)
        if name != "click" or arg not in self.clickables():
            return self._step()  # an invalid action does nothing, as in the original
        if arg == BACK_TO_SEARCH:
            self.page, self.asin, self.options = "search", None, {}
            return self._step()
        if arg == END_BUTTON:
            return self._buy()
        if self.page == "results":
            if arg == NEXT_PAGE:
                return self._search(self.keywords, self.page_no + 1)
            if arg == PREV_PAGE:
                return self._search(self.keywords, self.page_no - 1)
            self.page, self.asin, self.options = "item", arg.upper(), {}
            return self._step()
        if self.page == "item":
            if arg == PREV_PAGE:
                return self._search(self.keywords, self.page_no)
            if arg in SUB_PAGES:
                self.page, self.sub = "sub", arg
                return self._step()
            product = self.catalog.products[self.asin or ""]
            for opt_name, values in product["options"].items():
                if arg in values:
                    key = opt_name
            self.options[key] = arg
            return self._step()
        self.page = "item"  # the sub page's "< prev"
        return self._step()

    def _search(self, keywords: str, page_no: int) -> Step:
        self.page, self.keywords, self.page_no = "results", keywords, page_no
        self.results = self.catalog.engine.search(keywords)
        self.asin, self.options = None, {}
        return self._step()

    def _buy(self) -> Step:
        product = self.catalog.products[self.asin or ""]
        reward, parts = get_reward(product, self.goal, float(product["price"]), self.options)
        self.page = "done"
        success = abs(reward - 1.0) < 1e-9  # the original's rule: success only at reward 1
        text = SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                         f"{reward:.4f}"])
        return self._step(reward, True, {"success": success, "reward_parts": parts,
                                         "asin": self.asin, "options": dict(self.options),
                                         "done_text": text})
