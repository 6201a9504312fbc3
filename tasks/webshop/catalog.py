"""The WebShop data, host side: the official files read as `web_agent_site/engine/engine.py`
(`load_products`) and `engine/goal.py` (`get_human_goals`) read them, and the goal splits.

Files (princeton-nlp/WebShop's `data/` folder, fetched by its setup.sh; setting `webshop_dir`):
- `items_shuffle.json` (or `items_shuffle_1000.json`): the products, a JSON list of rows with
  `asin`, `name`, `full_description`, `small_description`, `pricing`, `customization_options`,
  `category`, `query`, `product_category`, `images`;
- `items_ins_v2.json` (or `items_ins_v2_1000.json`): `{asin: {"attributes": [...], ...}}`;
  the `a2rl` profile reads the full files when both are there; the `paper` profile the
  `_1000` ones, as the harness does (`WebAgentTextEnv(num_products=1000)` loads
  web_agent_site/utils.py's DEFAULT_FILE_PATH `items_shuffle_1000.json` and DEFAULT_ATTR_PATH
  `items_ins_v2_1000.json`; its `benchmarks/webshop/data.py` downloads those two), falling back
  to the first 1,000 rows of the full file when only that is there (`WebShopData.source` says
  which);
- `items_human_ins.json`: `{asin: [{"instruction", "instruction_attributes",
  "instruction_options", ...}]}`, the human goals;
- `reviews.json` (optional, the `a2rl` profile only: the original never reads it):
  `[{"asin", "reviews", "average_rating"}]`.

Goals are the human goals in product order, shuffled with `random.seed(233)` as the original
`SimServer` does; the splits are the original baseline's (`baseline_models/env.py`): test =
goals 0-499, dev ("eval" there) = 500-1499, train = the rest. A copy with fewer than 1,501
goals (a fixture) is split in quarters: test, dev, then train the remaining half.

The `paper` profile's test goals are the **synthetic** ones (`synthetic_goals`): the reference
harness builds `WebAgentTextEnv` without `human_goals`, so the original `SimServer` draws its
goals with `get_synthetic_goals` from the attribute file's `instruction` and
`instruction_attributes` (engine/engine.py `load_products`, engine/goal.py), shuffled with
`random.seed(233)`; its sessions 0-99 are goals 0-99 of that list.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from a2rl.settings import Settings

from .options import WebShopOptions
from .sim import PRICE_RANGE

GOAL_SHUFFLE_SEED = 233
#: The synthetic goals' price caps: the original draws them from the unseeded `random` too;
#: a seed of their own, so that building them leaves the human goals' draws unchanged.
SYNTHETIC_PRICE_SEED = 20220702
#: The original draws product prices and price caps from an unseeded `random`; here they come
#: from this seed, so every process (grader, workspace) sees the same prices.
PRICE_SEED = 20220701
N_TEST, N_DEV = 500, 1000
#: The full data's human goals (WebShop's paper: 12,087 instructions, split 10,587 / 1,000 / 500)
N_HUMAN_GOALS = 12087
PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
#: The harness's files first (the paper profile).
SMALL_FIRST = {PRODUCT_FILES: PRODUCT_FILES[::-1], ATTRIBUTE_FILES: ATTRIBUTE_FILES[::-1]}
#: The harness's download of them (benchmarks/webshop/data.py `_download_webshop_data`: gdown
#: with these Google Drive ids), written into the data folder.
HARNESS_DOWNLOADS = (("1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib", "items_shuffle_1000.json"),
                     ("1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu", "items_ins_v2_1000.json"),
                     ("14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O", "items_human_ins.json"))
HUMAN_FILE = "items_human_ins.json"
REVIEW_FILE = "reviews.json"


class WebShopData(BaseModel):
    """Processed products (what the site shows and the reward reads) and the shuffled goals."""

    products: list[dict[str, Any]]
    goals: list[dict[str, Any]]
    source: str
    #: the synthetic goals, shuffled (built for the paper profile only: `load_data(...,
    #: harness_files=True)`)
    synthetic: list[dict[str, Any]] = []

    def split_range(self, split: str) -> range:
        n = len(self.goals)
        n_test, n_dev = (N_TEST, N_DEV) if n > N_TEST + N_DEV else (n // 4, n // 4)
        ranges = {"test": range(0, n_test), "dev": range(n_test, n_test + n_dev),
                  "train": range(n_test + n_dev, n)}
        if split not in ranges:
            raise ValueError(f"WebShop splits are train, dev and test, not {split!r}")
        return ranges[split]

    def split_goals(self, split: str) -> list[dict[str, Any]]:
        """`{"id", "goal_index", "goal"}` per goal of the split (index into the shuffle)."""
        return [{"id": f"{split}-{i:05d}", "goal_index": i, "goal": self.goals[i]}
                for i in self.split_range(split)]

    def synthetic_goals(self, n: int) -> list[dict[str, Any]]:
        """The first `n` synthetic goals as test items (the harness's sessions 0..n-1)."""
        if not self.synthetic:
            raise ValueError(f"{self.source}: no synthetic goals (the attribute file has no "
                             "`instruction` with `instruction_attributes`)")
        return [{"id": f"test-{i:05d}", "goal_index": i, "goal": self.synthetic[i],
                 "goal_source": "synthetic"} for i in range(min(n, len(self.synthetic)))]


def _first(folder: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"webshop_dir={folder} has none of {', '.join(names)}")


def data_dir(settings: Settings, options: WebShopOptions | None = None) -> Path:
    """The data folder: the task's option `data_dir` (deprecated alias `webshop_dir`)."""
    opts = options or WebShopOptions.resolve("webshop", settings)
    if not opts.data_dir:
        raise RuntimeError(
            "WebShop needs its data files (items_shuffle*.json, items_ins_v2*.json, "
            "items_human_ins.json from princeton-nlp/WebShop's setup.sh); set -T data_dir= "
            "([tasks.webshop] data_dir, or the deprecated webshop_dir / A2RL_WEBSHOP_DIR) to "
            "the folder holding them")
    folder = Path(opts.data_dir).expanduser()
    if not folder.is_dir():
        raise RuntimeError(f"webshop_dir={folder} is not a folder")
    return folder


def _pricing(raw: Any) -> tuple[list[float], str]:
    if not raw:
        return [100.0], "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in str(raw).split("$")[1:]]
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def process_products(raw: list[dict[str, Any]], attributes: dict[str, Any],
                     reviews: dict[str, dict[str, Any]], rng: random.Random
                     ) -> list[dict[str, Any]]:
    """`load_products` minus images and flask: one dict per distinct valid asin, with its
    price drawn as `generate_product_prices` does (from `rng`)."""
    seen: set[str] = set()
    out = []
    for p in raw:
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        pricing, tag = _pricing(p.get("pricing"))
        options: dict[str, list[str]] = {}
        for name, contents in (p.get("customization_options") or {}).items():
            if contents is None:
                continue
            options[name.lower()] = [c["value"].strip().replace("/", " | ").lower()
                                     for c in contents]
        small = p.get("small_description")
        review = reviews.get(asin, {})
        out.append({
            "asin": asin, "name": p["name"], "Title": p["name"],
            "Description": p.get("full_description") or "",
            "BulletPoints": small if isinstance(small, list) else [small or ""],
            "pricing": pricing, "Price": tag, "options": options,
            "Attributes": attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"],
            "category": p.get("category", ""), "query": (p.get("query") or "").lower().strip(),
            "product_category": p.get("product_category") or "",
            "Rating": review.get("average_rating", "N.A."),
            "Reviews": [{"score": r.get("score", r.get("stars", "")),
                         "body": r.get("body", r.get("review", ""))}
                        for r in review.get("reviews", [])],
        })
    for prod in out:  # generate_product_prices, after every product is read (as there)
        pricing = prod["pricing"]
        prod["price"] = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
    return out


def human_goals(products: list[dict[str, Any]], human: dict[str, list[dict[str, Any]]],
                rng: random.Random) -> list[dict[str, Any]]:
    """`get_human_goals`: one goal per human instruction with attributes, in product order."""
    goals = []
    for item in products:
        for ins in human.get(item["asin"], []):
            attributes = ins.get("instruction_attributes") or []
            if not attributes:
                continue
            upper, price_text = price_cap(item["price"], rng)
            goals.append({
                "asin": item["asin"], "category": item["category"], "query": item["query"],
                "name": item["name"], "product_category": item["product_category"],
                "instruction_text": ins["instruction"].strip(".") + price_text,
                "attributes": attributes, "price_upper": upper,
                "goal_options": ins.get("instruction_options") or [], "weight": 1,
            })
    return goals


def price_cap(price: float, rng: random.Random) -> tuple[float, str]:
    """A goal's price cap and its text, as the original's goal makers draw it: the larger of
    two of the next four steps of `PRICE_RANGE` above the product's price (none when fewer
    than two are left)."""
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) < 2:
        return 1000000.0, ""
    _, upper = sorted(rng.sample(price_range, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def download_command(folder: str = "$WEBSHOP_DIR") -> str:
    """The shell commands that fetch the harness's data files into `folder`."""
    return " && ".join(f'gdown {file_id} -O "{folder}/{name}"'
                       for file_id, name in HARNESS_DOWNLOADS)


def synthetic_goals(products: list[dict[str, Any]], attributes: dict[str, Any],
                    rng: random.Random) -> list[dict[str, Any]]:
    """`get_synthetic_goals` (engine/goal.py) over the products `load_products` gave the
    attribute file's `instruction` and `instruction_attributes`: per product with an
    instruction, one goal per combination of its options (option names sorted), the
    instruction followed by ` with <name>: <value>, and ...` and the price cap's text; each
    goal's weight is the mean over its attributes of 1 / (goals with that attribute)."""
    goals: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for product in products:
        entry = attributes.get(product["asin"]) or {}
        text = entry.get("instruction")
        if text is None:
            continue
        wanted = entry.get("instruction_attributes") or []
        if not wanted:  # the original asserts there are some
            continue
        upper, price_text = price_cap(product["price"], rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({
                "asin": product["asin"], "category": product["category"],
                "query": product["query"], "name": product["Title"],
                "product_category": product["product_category"],
                "instruction_text": f"{text}{option_text}{price_text}", "attributes": wanted,
                "price_upper": upper, "goal_options": goal_options,
            })
            for att in wanted:
                counts[att] = counts.get(att, 0) + 1
    for goal in goals:
        goal["weight"] = sum(1.0 / counts[a] for a in goal["attributes"]) / len(
            goal["attributes"])
    return goals


@lru_cache(maxsize=4)
def _load(folder: str, num_products: int, small_first: bool = False) -> WebShopData:
    root = Path(folder)
    order = (lambda names: SMALL_FIRST[names]) if small_first else (lambda names: names)
    products_file = _first(root, order(PRODUCT_FILES))
    raw = json.loads(products_file.read_text())
    source = products_file.name
    if num_products > 0:
        if len(raw) > num_products:
            source += f", first {num_products}"
        raw = raw[:num_products]
    attributes_file = _first(root, order(ATTRIBUTE_FILES))
    source += f"; {attributes_file.name}"
    attributes = json.loads(attributes_file.read_text())
    human = json.loads(_first(root, (HUMAN_FILE,)).read_text())
    reviews: dict[str, dict[str, Any]] = {}
    # the original never reads reviews.json (its load_products has that code commented out):
    # under the paper profile every rating is N.A. and no product has reviews, as there
    if (root / REVIEW_FILE).is_file() and not small_first:
        reviews = {r["asin"]: r for r in json.loads((root / REVIEW_FILE).read_text())}
    rng = random.Random(PRICE_SEED)
    products = process_products(raw, attributes, reviews, rng)
    goals = human_goals(products, human, rng)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    synthetic: list[dict[str, Any]] = []
    if small_first:  # the paper profile's test goals
        synthetic = synthetic_goals(products, attributes, random.Random(SYNTHETIC_PRICE_SEED))
        random.Random(GOAL_SHUFFLE_SEED).shuffle(synthetic)
    return WebShopData(products=products, goals=goals, source=source, synthetic=synthetic)


def load_data(settings: Settings, num_products: int | None = None,
              options: WebShopOptions | None = None, *,
              harness_files: bool = False) -> WebShopData:
    """The processed catalog and goals (cached per folder, product limit and file choice);
    `num_products` overrides the option (the paper profile's 1,000); `harness_files` prefers
    the `_1000` files the harness reads (the paper profile)."""
    opts = options or WebShopOptions.resolve("webshop", settings)
    limit = opts.num_products if num_products is None else num_products
    return _load(str(data_dir(settings, opts).resolve()), limit, harness_files)
