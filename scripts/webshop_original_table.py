"""Regenerate the original WebShop's expected outputs on our fixture
(tests/fixtures/webshop/original_webshop.json, read by tests/test_webshop_original.py).

A maintainer's tool: `make test` never runs it, and it needs no network. It runs the original's
own code (princeton-nlp/WebShop, `web_agent_site/`, as the paper harness clones it) on our
fixture catalog, the way the harness does (`WebAgentTextEnv(observation_mode="text",
num_products=1000)`, the index built by the original's `search_engine/` scripts), over the
table's fixed inputs, and writes the outputs back into the table's `expected` and `header`.
Nothing of the original is copied into this repository; this file only calls it.

It needs, in the Python it runs under (not a2rl's venv; Python 3.10 or 3.11):
    pip install pyserini==0.17.0 --no-deps
    pip install "numpy<2" pyjnius pandas thefuzz==0.19.0 python-Levenshtein \
        beautifulsoup4==4.11.1 flask==2.2.5 Werkzeug==2.2.3 gym==0.24.0 selenium==4.2.0 \
        spacy rich tqdm cleantext==1.1.4 rank_bm25==0.2.2
a Java runtime (11 or later) for Lucene, a checkout of the original, and a spaCy English
pipeline for the type reward (`--spacy-model`: a package name or a model folder; the original
loads `en_core_web_sm`). python-Levenshtein is there because the harness's RD-Agent requires
it, and thefuzz 0.19.0 then scores with it. Modules the original imports but never uses on this
path are stood in for and listed in the header: `torch` (image features only) and
pyserini's dense (faiss) encoders and searchers (the Lucene searcher is the real one).

    python scripts/webshop_original_table.py --webshop ~/src/WebShop --spacy-model PATH
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_TABLE = HERE.parent / "tests" / "fixtures" / "webshop" / "original_webshop.json"
DATA_FILES = ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json")
#: The harness's size (benchmarks/webshop/eval.py: WebAgentTextEnv(num_products=1000)).
NUM_PRODUCTS = 1000
INDEX = "indexes_1k"
SEARCH_RETURN_N = 50
#: Imported by the original on this path, never called: stood in for (and said so).
STUB_MODULES = ("pyserini.encode", "pyserini.search.faiss")
SITECUSTOMIZE = f'''"""Stand-ins for {", ".join(STUB_MODULES)}: imported, never used."""
import sys, types
for _name in {STUB_MODULES!r}:
    _mod = types.ModuleType(_name)
    _mod.__getattr__ = lambda attr: type(attr, (), {{}})
    sys.modules[_name] = _mod
'''
PRICE_CLAUSE = re.compile(r", and price lower than \d+\.\d\d dollars$")


def _stub(name: str) -> None:
    mod = types.ModuleType(name)
    mod.__getattr__ = lambda attr: type(attr, (), {})  # type: ignore[method-assign]
    sys.modules[name] = mod


def build_site(webshop: Path, fixture: Path, work: Path, *, descending: bool = False) -> Path:
    """A copy of the original's site and search engine with our fixture as its data/ (its
    products sorted by descending asin with `descending`), and its Lucene index built by its
    own scripts (as the harness's `_build_search_index` runs them)."""
    site = work / "WebShop"
    for part in ("web_agent_site", "search_engine"):
        shutil.copytree(webshop / part, site / part)
    (site / "data").mkdir()
    for name in DATA_FILES:
        shutil.copy(fixture / name, site / "data" / name)
    if descending:
        products = site / "data" / DATA_FILES[0]
        rows = sorted(json.loads(products.read_text()), key=lambda p: p["asin"], reverse=True)
        products.write_text(json.dumps(rows))
    stubs = work / "stubs"
    stubs.mkdir()
    (stubs / "sitecustomize.py").write_text(SITECUSTOMIZE)
    engine = site / "search_engine"
    for d in ("resources_100", "resources", "resources_1k", "resources_100k", "indexes"):
        (engine / d).mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(stubs),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for cmd in ([sys.executable, "convert_product_file_format.py"], ["bash", "run_indexing.sh"]):
        subprocess.run(cmd, cwd=engine, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return site


def load_original(site: Path, spacy_model: str) -> dict[str, Any]:
    """Import the original's modules from `site`, its type reward's spaCy pipeline being
    `spacy_model` (it loads "en_core_web_sm" by name)."""
    import spacy  # before the torch stand-in: thinc probes for a real torch

    model_load = spacy.load
    spacy.load = lambda _name, **kw: model_load(spacy_model, **kw)  # type: ignore[assignment]
    for name in (*STUB_MODULES, "torch"):
        _stub(name)
    sys.path.insert(0, str(site))
    from pyserini.analysis import Analyzer, get_lucene_analyzer
    from pyserini.index import IndexReader
    from web_agent_site.engine import engine as engine_mod
    from web_agent_site.engine import goal as goal_mod
    from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv

    spacy.load = model_load  # type: ignore[assignment]
    return {"engine": engine_mod, "goal": goal_mod, "Env": WebAgentTextEnv,
            "analyzer": Analyzer(get_lucene_analyzer()),
            "reader": IndexReader(str(site / "search_engine" / INDEX))}


def descending_search(site: Path, queries: list[str]) -> list[list[list[Any]]]:
    """Each query's hits over the index of the catalog in descending asin order (which shows
    how equal scores are ordered: by index order or by asin)."""
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(site / "search_engine" / INDEX))
    return [[[h.docid, round(float(h.score), 6)] for h in searcher.search(q, k=SEARCH_RETURN_N)]
            for q in queries]


def run(orig: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    engine_mod, goal_mod = orig["engine"], orig["goal"]
    env = orig["Env"](observation_mode="text", num_products=NUM_PRODUCTS)
    server = env.server
    # its synthetic goals in session order (sessions 0..n-1), the unseeded price clause cut
    goals = [{"asin": g["asin"], "instruction": PRICE_CLAUSE.sub("", g["instruction_text"]),
              "attributes": g["attributes"], "goal_options": g["goal_options"],
              "weight": g["weight"]} for g in server.goals]
    products = {a: {"Title": p["Title"], "Price": p["Price"], "options": p["options"],
                    "Attributes": p["Attributes"], "query": p["query"]}
                for a, p in server.product_item_dict.items()}
    # the prices both sides use (the original draws range prices unseeded)
    server.product_prices.update(inputs["prices"])

    searcher, reader = server.search_engine, orig["reader"]
    search = []
    for query in inputs["queries"]:
        hits = searcher.search(query, k=SEARCH_RETURN_N)
        shown = engine_mod.get_top_n_product_from_keywords(
            query.split(" "), searcher, server.all_products, server.product_item_dict)
        search.append({"query": query, "tokens": orig["analyzer"].analyze(query),
                       "hits": [[h.docid, round(float(h.score), 6)] for h in hits],
                       "results": [p["asin"] for p in shown]})
    documents = {}
    for i in range(reader.stats()["documents"]):
        docid = reader.convert_internal_docid_to_collection_docid(i)
        documents[docid] = reader.get_document_vector(docid)
    from jnius import autoclass

    small_float = autoclass("org.apache.lucene.util.SmallFloat")
    norms = [small_float.byte4ToInt(small_float.intToByte4(n)) for n in inputs["lengths"]]
    analyzer = {"words": [orig["analyzer"].analyze(w) for w in inputs["words"]],
                "documents": documents, "stored_lengths": norms}

    server.goals = [ep["goal"] for ep in inputs["episodes"]]
    episodes = []
    for session, ep in enumerate(inputs["episodes"]):
        obs, _ = env.reset(session=session)
        steps = [{"observation": obs, "available_actions": env.get_available_actions(),
                  "instruction_text": env.get_instruction_text()}]
        for action in ep["actions"]:
            obs, reward, done, _ = env.step(action)
            step = {"action": action, "observation": obs, "reward": reward, "done": done}
            if not done:
                step["available_actions"] = env.get_available_actions()
            steps.append(step)
            if done:
                break
        episodes.append({"name": ep["name"], "steps": steps})

    rewards = []
    for case in inputs["rewards"]:
        product = server.product_item_dict[case["asin"]]
        total, info = goal_mod.get_reward(product, case["goal"], price=case["price"],
                                          options=case["options"], verbose=True)
        rewards.append({"name": case["name"], "reward": total, "info": info})
    names = sorted({p["name"] for p in server.all_products}
                   | {c["goal"]["name"] for c in inputs["rewards"]} | set(inputs["names"]))
    nouns = {n: [t.text.lower() for t in goal_mod.nlp(n) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]
             for n in names}
    return {"goals": goals, "products": products, "search": search, "analyzer": analyzer,
            "episodes": episodes, "rewards": rewards, "type_nouns": nouns}


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def header(webshop: Path, commit: str | None, orig: dict[str, Any]) -> dict[str, Any]:
    if commit is None:
        got = subprocess.run(["git", "-C", str(webshop), "rev-parse", "HEAD"],
                             capture_output=True, text=True)
        commit = got.stdout.strip() or "unknown"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    nlp = orig["goal"].nlp
    about = (nlp.meta.get("description") or "no description").splitlines()[0]
    pyserini_dir = Path(sys.modules["pyserini"].__file__ or "").parent
    jars = sorted(p.name for p in (pyserini_dir / "resources" / "jars").glob("*.jar"))
    return {
        "source": "princeton-nlp/WebShop (github), web_agent_site/ and search_engine/, as the "
                  "paper harness clones it (git clone --depth 1)",
        "webshop_commit": commit,
        "how": "scripts/webshop_original_table.py: the original's convert_product_file_format.py "
               "and run_indexing.sh over this folder's items_*.json (its Lucene index "
               f"{INDEX}); WebAgentTextEnv(observation_mode='text', num_products="
               f"{NUM_PRODUCTS}); its synthetic goals as loaded (price clause cut: unseeded "
               "there); product_prices set to inputs.prices; search = its LuceneSearcher and "
               "get_top_n_product_from_keywords; episodes = server.goals set to each episode's "
               "goal, env.reset(session=i), env.step per action, get_available_actions; "
               "rewards = goal.get_reward(product, goal, price, options, verbose=True); "
               "type_nouns = goal.nlp's NOUN/PROPN/PNOUN tokens of the catalog's names, the "
               "goals' and inputs.names; stored_lengths = Lucene's SmallFloat norm of "
               "each of inputs.lengths (a document's length as BM25 reads it); "
               "descending_search = the queries' hits over a second "
               "index, of the catalog sorted by descending asin",
        "stood_in": {
            "torch": "imported by web_agent_text_env for image features only (get_image=0)",
            "pyserini dense modules": f"{', '.join(STUB_MODULES)}: imported by pyserini's "
                                      "search package, never used (the Lucene searcher is real)",
            "spaCy pipeline": f"{nlp.meta.get('lang')}_{nlp.meta.get('name')} "
                              f"{nlp.meta.get('version')} ({about}) for en_core_web_sm (the "
                              "harness: spacy==3.7.2 and `python -m spacy download "
                              "en_core_web_sm`)",
        },
        "versions": {"python": platform.python_version(), "java": java.splitlines()[0],
                     "pyserini": _version("pyserini"), "anserini_jars": jars,
                     "thefuzz": _version("thefuzz"), "Levenshtein": _version("Levenshtein"),
                     "spacy": _version("spacy"), "beautifulsoup4": _version("beautifulsoup4"),
                     "flask": _version("flask")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--webshop", type=Path, required=True, help="a checkout of the original")
    ap.add_argument("--spacy-model", default="en_core_web_sm",
                    help="spaCy pipeline for the type reward (name or folder)")
    ap.add_argument("--commit", help="the checkout's commit, when it is not a git work tree")
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    args = ap.parse_args()
    table = json.loads(args.table.read_text())
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as tmp2:
        site = build_site(args.webshop.resolve(), args.table.parent, Path(tmp))
        orig = load_original(site, args.spacy_model)
        expected = run(orig, table["inputs"])
        backwards = build_site(args.webshop.resolve(), args.table.parent, Path(tmp2),
                               descending=True)
        expected["descending_search"] = descending_search(backwards, table["inputs"]["queries"])
        table = {"header": header(args.webshop.resolve(), args.commit, orig),
                 "inputs": table["inputs"], "expected": expected}
    args.table.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.table}")


if __name__ == "__main__":
    main()
