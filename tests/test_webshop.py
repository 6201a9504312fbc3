"""WebShop on a fixture catalog written in the real schema (items_shuffle_1000.json,
items_ins_v2_1000.json, items_human_ins.json): loading, the goal split, search, navigation,
options, the reward on hand-computed cases, the workspace's environment API, and an `a2rl run`
with the reference agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Evaluation, Store
from a2rl.tasks import prepare_workspace, profile_settings
from a2rl.tasks.envapi.a2rl_env import EnvPool
from a2rl.tasks.webshop import sim
from a2rl.tasks.webshop.catalog import load_data
from a2rl.tasks.webshop.task import WebShopTask, expert_actions, paper_success

from .baseline_seed import base_model_dir, seed_base_model  # noqa: F401  (a fixture)
from .conftest import require_bwrap
from .helpers import with_task_options

FIXTURE = Path(__file__).parent / "fixtures" / "webshop"


@pytest.fixture
def shop(settings: Settings) -> Settings:
    return with_task_options(settings.updated({"base_model": "tiny-llama"}), "webshop",
                             data_dir=str(FIXTURE))


@pytest.fixture
def catalog(shop: Settings) -> sim.Catalog:
    return sim.Catalog(load_data(shop).products)


def goal(**overrides: Any) -> dict[str, Any]:
    base = {"asin": "B0WS000002", "query": "men t shirts", "name": "Mens Cotton Crew T-Shirt",
            "product_category": "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
            "instruction_text": "i want a navy blue cotton t-shirt in large",
            "attributes": ["machine wash", "cotton"], "goal_options": ["navy blue", "large"],
            "price_upper": 30.0, "category": "fashion"}
    return {**base, **overrides}


def test_products_goals_and_splits(shop: Settings) -> None:
    data = load_data(shop)
    # the duplicate asin and the 'nan' asin are skipped, as in load_products
    assert len(data.products) == 8
    tee = next(p for p in data.products if p["asin"] == "B0WS000002")
    assert tee["options"] == {"size": ["small", "medium", "large"],
                              "color": ["navy blue", "white"]}
    assert tee["Price"] == "$12.0 to $18.0" and 12.0 <= tee["price"] <= 18.0
    assert tee["query"] == "men t shirts" and tee["Attributes"] == ["machine wash", "cotton"]
    # 13 human instructions, one without attributes (skipped): 12 goals, in quarters
    assert len(data.goals) == 12
    sizes = [len(data.split_goals(s)) for s in ("test", "dev", "train")]
    assert sizes == [3, 3, 6]
    assert all("price lower than" in g["instruction_text"] for g in data.goals)
    assert load_data(shop).goals == data.goals  # the same on every load (seeded)


def test_search_pages_navigation_and_options(catalog: sim.Catalog) -> None:
    env = sim.WebShopEnv(catalog, goal())
    first = env.reset()
    assert first.observation.startswith("WebShop [SEP] Instruction: [SEP] i want a navy")
    assert first.info["available_actions"] == {"has_search_bar": True, "clickables": []}
    assert env.step("click[buy now]").observation == first.observation  # invalid: no-op
    results = env.step("search[cotton t-shirt men]")
    assert "Page 1 (Total results:" in results.observation
    assert results.observation.split(" [SEP] ")[4] == "B0WS000002"  # the best hit first
    item = env.step("click[b0ws000002]")
    assert "size [SEP] small [SEP] medium [SEP] large" in item.observation
    assert "Price: $12.0 to $18.0" in item.observation
    env.step("click[large]")
    chosen = env.step("click[navy blue]")
    assert chosen.observation.startswith("You have clicked large. [SEP] You have clicked navy")
    desc = env.step("click[description]")
    assert desc.observation.endswith("A classic crew neck tee in soft cotton.")
    back = env.step("click[< prev]")
    assert "Buy Now" in back.observation
    assert "Page 1" in env.step("click[< prev]").observation  # the item's < prev: results
    assert env.step("click[back to search]").info["available_actions"]["has_search_bar"]


def test_result_pages_next_and_prev(catalog: sim.Catalog) -> None:
    many = {f"B0PG{i:06d}": {**catalog.products["B0WS000006"], "asin": f"B0PG{i:06d}"}
            for i in range(23)}
    env = sim.WebShopEnv(sim.Catalog(list(many.values())), goal())
    env.reset()
    page1 = env.step("search[organic green tea]")
    assert "(Total results: 23)" in page1.observation and "Next >" in page1.observation
    assert "< Prev" not in page1.observation
    page3 = env.step("click[next >]")
    page3 = env.step("click[next >]")
    assert "Page 3 (Total results: 23)" in page3.observation
    assert "Next >" not in page3.observation and page3.observation.count("B0PG") == 3
    assert "Page 2" in env.step("click[< prev]").observation


def test_reward_hand_computed(catalog: sim.Catalog) -> None:
    tee = catalog.products["B0WS000002"]
    # everything right: (2 attributes + 2 options + price) / 5 * r_type 1
    reward, parts = sim.get_reward(tee, goal(), 15.0, {"size": "large", "color": "navy blue"})
    assert reward == 1.0 and parts["r_type"] == 1.0
    # wrong size (exact match), price over the cap: (2 + 1 + 0) / 5
    reward, _ = sim.get_reward(tee, goal(), 35.0, {"size": "small", "color": "navy blue"})
    assert reward == pytest.approx(3 / 5)
    # no option chosen: (2 + 0 + 1) / 5
    assert sim.get_reward(tee, goal(), 15.0, {})[0] == pytest.approx(3 / 5)
    # a different product type: the boots share no name word -> r_type 0
    boots = catalog.products["B0WS000005"]
    reward, parts = sim.get_reward(boots, goal(), 15.0, {})
    assert parts["title_score"] == 0.0 and reward == 0.0
    # query and category differ, half the name words match -> r_type 1 (title_score > 0.2)
    other = {**tee, "query": "x", "product_category": "A › B", "name": "Cotton Tank Top"}
    _, parts = sim.get_reward(other, goal(), 15.0, {})
    assert parts["title_score"] == pytest.approx(1 / 4) and parts["r_type"] == 1.0
    # fuzzy attribute match (token_set_ratio > 85) and colour normalization
    assert sim.token_set_ratio("machine washable", "machine wash") == 86  # 2*12/28
    assert sim.token_set_ratio("cotton", "100% cotton fabric") == 100
    assert sim.normalize_color("dark navy blue") == "blue"  # COLOR_SET order, not text order


def test_buy_ends_with_the_reward_and_success_rule(catalog: sim.Catalog) -> None:
    env = sim.WebShopEnv(catalog, goal())
    env.reset()
    env.step("search[mens cotton crew t-shirt]")
    env.step("click[b0ws000002]")
    env.step("click[small]")
    done = env.step("click[buy now]")
    assert done.done and done.reward == pytest.approx(3 / 5)  # 2 attributes + price, of 5
    assert done.info["success"] is False  # success only at reward 1
    with pytest.raises(RuntimeError):
        env.step("click[buy now]")


def test_workspace_env_api_trains_only(shop: Settings, tmp_path: Path) -> None:
    task = WebShopTask()
    ws = tmp_path / "ws"
    prepare_workspace(task, ws, shop)
    assert (ws / "env" / "webshop_sim.py").read_text() == Path(sim.__file__).read_text()
    hidden = [g["goal"]["instruction_text"] for s in ("dev", "test")
              for g in load_data(shop).split_goals(s)]
    text = "".join(p.read_text() for p in (ws / "data").rglob("*") if p.is_file())
    assert not any(h in text for h in hidden)
    demos = [json.loads(line) for line in (ws / "data" / "train.jsonl").open()]
    assert demos and demos[0]["answer"].startswith("search[")
    script = (
        "import sys; sys.path.insert(0, 'env'); import a2rl_env\n"
        "ids = a2rl_env.train_ids(); print('N', len(ids))\n"
        "import json\n"
        "rows = [json.loads(l) for l in open('data/train.jsonl')]\n"
        "first = [r for r in rows if r['instance_id'] == rows[0]['instance_id']]\n"
        "pool = a2rl_env.make_pool([first[0]['instance_id']] * 2)\n"
        "pool.reset()\n"
        "assert pool.prompts([0])[0] == first[0]['prompt']\n"
        "for r in first: pool.step({0: r['answer'], 1: 'click[nothing]'})\n"
        "print('R', pool.episodes[0].total_reward, pool.episodes[0].success)\n"
        "for bad in (lambda: a2rl_env.make('test-00000'), lambda: a2rl_env.train_ids('test')):\n"
        "    try:\n"
        "        bad()\n"
        "    except a2rl_env.SplitError:\n"
        "        print('REFUSED')\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=ws, capture_output=True, text=True,
                       timeout=120, env={"PATH": os.environ.get("PATH", "")})
    assert p.returncode == 0, p.stderr
    assert "N 6" in p.stdout and "R 1.0 True" in p.stdout and p.stdout.count("REFUSED") == 2


def test_grader_items_are_plain_json(shop: Settings) -> None:
    task = WebShopTask()
    items = task.load_split("test", shop)
    json.dumps(items)
    env = task.make_env(items[0])
    assert env.reset().observation.startswith("WebShop [SEP] Instruction:")
    assert task.spec.splits["test"].n_items == 500


A2RL = str(Path(sys.executable).parent / "a2rl")
#: fixture-sized training; GRPO samples as few tokens per action as the grader is capped to
#: (A2RL_GRADING__MAX_NEW_TOKENS=8 below), not the task's 48 (most of its rollout time)
QUICK = ["--agent-option", "sft_args=--steps 3 --holdout 0 --batch 4 --max-length 512",
         "--agent-option", "grpo_args=--iters 1 --instances 2 --group 2 --max-new-tokens 8"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_webshop_run_with_the_reference_agent(tmp_path: Path,
                                              base_model_dir: Path) -> None:  # noqa: F811
    require_bwrap()
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(seed_base_model(tmp_path, base_model_dir)),
               A2RL_BASE_MODEL="tiny-llama", A2RL_GRADING__MAX_NEW_TOKENS="8",
               A2RL_WEBSHOP_DIR=str(FIXTURE))
    p = subprocess.run([A2RL, "run", "--task", "webshop", "--agent", "reference", "--budget",
                        "15m", *QUICK, "--json"], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        evals = s.exec(select(Evaluation).where(Evaluation.run_id == summary["run_id"])).all()
    assert {e.split for e in evals} == {"dev", "test"}
    assert all(e.status == "done" and e.n_items == 3 for e in evals), [
        (e.split, e.status, e.error) for e in evals]
    assert all(it["episode"] is not None and "mean_reward" in e.metrics
               for e in evals for it in e.items)


# --- the paper profile (autorl_bench/benchmarks/webshop) -------------------------------------
def harness_success(done: bool, reward: float) -> bool:
    """webshop/eval.py `webshop_run`: on `done`, `success = reward >= 0.5`; an episode that
    reaches max_steps returns (0.0, max_steps, False)."""
    return done and reward >= 0.5


def _play(task: WebShopTask, items: list[dict[str, Any]],
          scripts: list[list[str]]) -> list[Any]:
    pool = EnvPool([it["id"] for it in items], [lambda it=it: task.make_env(it) for it in items],
                   instruction=task.rollout.instruction, window=task.rollout.history_window,
                   max_steps=task.rollout.max_steps)
    pool.reset()
    while active := pool.active():
        pool.step({i: (scripts[i][len(pool.episodes[i].actions)]
                       if len(pool.episodes[i].actions) < len(scripts[i]) else "click[nothing]")
                   for i in active})
    return pool.episodes


def test_paper_verdicts_match_the_harness(shop: Settings) -> None:
    paper = WebShopTask().with_profile("paper")
    assert (paper.rollout.max_steps, paper.rollout.history_window) == (50, 5)
    assert paper.spec.grader.max_new_tokens == 100 and paper.spec.grader.stop[0] == "\n"
    assert paper.spec.splits["test"].n_items == 100
    paper.load_split("test", shop)  # the catalog make_env plays on
    # the verdicts on hand-computed human goals (the paper's test goals are synthetic ones:
    # test_paper_test_goals_are_the_originals_synthetic_goals)
    items = paper.data(shop).split_goals("test")
    catalog = paper.catalog(paper.data(shop))
    assert [it["id"] for it in items] == [f"test-{i:05d}" for i in range(3)]
    expert = [expert_actions(catalog, it["goal"]) for it in items]
    no_options = [[e[0], e[1], "click[buy now]"] for e in expert]
    cases = [items[0], items[0], items[1], items[2], items[2]]
    scripts = [expert[0],                         # reward 1
               no_options[0],                     # reward 2/3
               no_options[1],                     # reward 0.5 exactly: a success there
               [expert[2][0], "click[b0ws000005]", "click[buy now]"],  # another product
               [expert[2][0]]]                    # never buys: cut at 50 steps
    cases = [{**it, "id": f"{it['id']}#{k}"} for k, it in enumerate(cases)]
    episodes = _play(paper, cases, scripts)
    rewards = [ep.rewards[-1] if ep.done else 0.0 for ep in episodes]
    assert rewards[:3] == [1.0, pytest.approx(2 / 3), 0.5] and rewards[3] < 0.5
    assert episodes[4].steps == 50 and not episodes[4].done
    expected = [harness_success(ep.done, r) for ep, r in zip(episodes, rewards, strict=True)]
    assert expected == [True, True, True, False, False]
    scored = paper.score_episodes(cases, episodes)
    assert [r.correct for r in scored.items] == expected and scored.score == 0.6
    assert scored.metrics["success_rule"] == "reward >= 0.5"
    # the a2rl profile keeps the original's rule (success only at reward 1), its 15 steps
    a2rl = WebShopTask()
    a2rl.load_split("test", shop)
    again = a2rl.score_episodes(cases, _play(a2rl, cases, scripts))
    assert [r.correct for r in again.items] == [True, False, False, False, False]
    assert "reward 0.5 or more" in paper.task_md() and "reward 1" in a2rl.task_md()
    # the harness's action clean-up in its own loop (case-sensitive, as webshop_run): an
    # `Action:` prefix is dropped and `choose[` read as `click[`
    wordy = [f"Action: {expert[0][0]}", expert[0][1].replace("click[", "choose[", 1),
             " Action: click[buy now]"]
    (ep,) = _play_paper(paper, [cases[1]], [wordy])
    assert ep.done and ep.rewards[-1] == pytest.approx(2 / 3) and paper_success(ep)
    (ep,) = _play_paper(paper, [cases[1]], [[wordy[0].lower(), *wordy[1:]]])
    assert not ep.done  # a lower-case `action:` is the harness's action as written: nothing
    (ep,) = _play(a2rl, [cases[1]], [[w.lower() for w in wordy]])
    assert not ep.done  # the a2rl profile takes actions as they are


def _play_paper(task: WebShopTask, items: list[dict[str, Any]],
                scripts: list[list[str]]) -> list[Any]:
    """The paper profile's own loop (the grader's) with scripted completions."""
    from a2rl.tasks.rdagent import parse_webshop
    from a2rl.tasks.webshop import paper as paper_loop

    from .rdagent_fixture import WEBSHOP

    text = parse_webshop(WEBSHOP).to_dict()
    done: list[int] = [0] * len(items)

    def generate(chats: list[Any]) -> list[str]:
        out = []
        for chat in chats:
            k = next(i for i, it in enumerate(items) if f"Instruction: Instruction: "
                     f"{it['goal']['instruction_text']}" in chat[1]["content"])
            step = done[k]
            done[k] += 1
            out.append(scripts[k][step] if step < len(scripts[k]) else "click[nothing]")
        return out

    return paper_loop.play([it["id"] for it in items],
                           [lambda it=it: task.make_env(it) for it in items], text, generate)


def test_paper_profile_reads_the_harness_product_files(settings: Settings,
                                                       tmp_path: Path) -> None:
    """With both the full files and the `_1000` ones, a2rl reads the full ones and the paper
    profile the harness's `_1000` ones; with only the full file, the paper profile takes its
    first 1,000 rows and says so."""
    import shutil

    folder = tmp_path / "both"
    folder.mkdir()
    for name in ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"):
        shutil.copy(FIXTURE / name, folder / name)
    small = json.loads((FIXTURE / "items_shuffle_1000.json").read_text())
    full = [{**p, "asin": "B0FULL" + p["asin"][-4:]} for p in small if p["asin"] != "nan"]
    (folder / "items_shuffle.json").write_text(json.dumps(full))
    attributes = json.loads((FIXTURE / "items_ins_v2_1000.json").read_text())
    (folder / "items_ins_v2.json").write_text(json.dumps(
        {"B0FULL" + k[-4:]: v for k, v in attributes.items()}))
    both = with_task_options(settings, "webshop", data_dir=str(folder))
    ours, paper = WebShopTask(), WebShopTask().with_profile("paper")
    assert {p["asin"][:6] for p in ours.data(both).products} == {"B0FULL"}
    assert ours.data(both).source == "items_shuffle.json; items_ins_v2.json"
    harness = paper.data(both)
    assert {p["asin"][:6] for p in harness.products} == {"B0WS00"}
    assert harness.source == "items_shuffle_1000.json; items_ins_v2_1000.json"
    assert harness.products[0]["Attributes"] == attributes[harness.products[0]["asin"]][
        "attributes"]
    only_full = tmp_path / "full"
    only_full.mkdir()
    for name in ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"):
        shutil.copy(folder / name, only_full / name)
    fallback = paper.data(with_task_options(settings, "webshop", data_dir=str(only_full)))
    assert {p["asin"][:6] for p in fallback.products} == {"B0FULL"}
    assert fallback.source == "items_shuffle.json; items_ins_v2.json"  # fewer than 1,000 rows
    assert "gdown 1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib" in profile_settings(paper)["data_download"]


def test_paper_test_goals_are_the_originals_synthetic_goals(shop: Settings) -> None:
    """The harness's env has no `human_goals`, so its goals are the original site's synthetic
    ones: per product with an instruction, one per combination of its options (names sorted),
    shuffled with seed 233; its sessions 0-99 are the first 100. Hand-checked on the fixture:
    the t-shirt's 3 sizes x 2 colours are 6 goals."""
    import random as stdlib_random

    paper = WebShopTask().with_profile("paper")
    items = paper.load_split("test", shop)
    data = paper.data(shop)
    attributes = json.loads((FIXTURE / "items_ins_v2_1000.json").read_text())
    products = {p["asin"]: p for p in data.products}
    expected = []  # get_synthetic_goals' order, before the shuffle
    for asin, product in products.items():
        text = attributes[asin]["instruction"]
        if text is None:
            continue
        names = sorted(product["options"])
        combos = [[]] if not names else [[]]
        for name in names:
            combos = [c + [(name, v)] for c in combos for v in product["options"][name]]
        expected += [(asin, text + (" with " + ", and ".join(f"{k}: {v}" for k, v in c)
                                    if c else "")) for c in combos]
    # options: 2 colours; 3 sizes x 2 colours; 2 flavours; 2; 3 x 2; none; 2 x 2; B0WS000008 has
    # no instruction
    assert len(expected) == len(data.synthetic) == 2 + 6 + 2 + 2 + 6 + 1 + 4
    shuffled = list(range(len(expected)))
    stdlib_random.Random(233).shuffle(shuffled)
    got = [(g["asin"], g["instruction_text"].split(", and price lower than")[0])
           for g in data.synthetic]
    assert got == [expected[i] for i in shuffled]
    tee = [g for g in data.synthetic if g["asin"] == "B0WS000002"]
    assert sorted(g["instruction_text"].split(" with ")[1].split(", and price")[0]
                  for g in tee) == sorted(f"color: {c}, and size: {z}"
                                          for c in ("navy blue", "white")
                                          for z in ("small", "medium", "large"))
    assert all(g["goal_options"].keys() == {"color", "size"} for g in tee)
    assert all(g["name"] == products["B0WS000002"]["Title"] for g in tee)
    assert [it["goal"] for it in items] == data.synthetic[:100]
    assert [it["id"] for it in items] == [f"test-{i:05d}" for i in range(len(data.synthetic))]
    # the a2rl profile keeps the human goals and builds no synthetic ones
    a2rl = WebShopTask()
    assert a2rl.load_split("test", shop) == a2rl.data(shop).split_goals("test")
    assert a2rl.data(shop).synthetic == []
    # an episode on a synthetic goal: the expert (options from the goal's dict) buys it
    catalog = paper.catalog(data)
    (ep,) = _play(paper, [items[0]], [expert_actions(catalog, items[0]["goal"])])
    assert ep.done and ep.rewards[-1] > 0.5
