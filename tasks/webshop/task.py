"""WebShop (level 3): buy the product an instruction describes on a simulated shopping site.

Graded by rollouts (`interactive.run_rollouts`) of the text site `sim.py` over the official data
(`catalog.py`): one episode per hidden goal, up to `MAX_STEPS` actions. The score is the success
rate (reward exactly 1, the original's rule) with its Wilson interval; the mean reward (the
original's "score" / 100) is a metric. The workspace gets the catalog and the training goals
under `data/webshop/`, the site under `env/`, and expert demonstrations in `data/train.jsonl`.

Under the `paper` profile the evaluation is the reference harness's (autorl_bench/benchmarks/
webshop): the first 100 goals, a 1,000-product catalog, and its episode loop (`paper.py`):
its system message and prompt (read from RD-Agent's wheel, `a2rl.tasks.rdagent`), the page's
available actions, the 5 earlier steps as numbered Observation/Action lines, 100 new tokens
stopped at a newline, its action clean-up, 50 steps and success = reward >= 0.5
(`paper_success`). What still differs: docs/paper-fidelity.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.layout import DATA
from a2rl.settings import Settings

from .. import rdagent
from ..base import Split, Task, TaskScore
from ..data_files import hidden_split
from ..data_status import DataStatus, TaskDataError
from ..envapi.a2rl_env import Env, Episode
from ..interactive import READONLY_PATHS, InteractiveTask, RolloutSettings, write_env
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import TaskData
from ..train_rows import chat_pair, demonstrate
from ..workspace import write_readonly
from . import paper, sim
from .catalog import (
    HUMAN_FILE,
    N_DEV,
    N_HUMAN_GOALS,
    N_TEST,
    WebShopData,
    download_command,
    load_data,
)
from .options import WebShopOptions

MAX_STEPS = 15
#: Training goals with an expert demonstration in data/train.jsonl (at most).
N_DEMO_GOALS = 200
GRADER = GraderSettings(max_new_tokens=48, stop=["\n", "<|im_end|>", "<|endoftext|>", "</s>"],
                        batch_size=64)
INSTRUCTION = ("You are shopping on WebShop. Act with search[query] or click[button]; "
               "buy the product the instruction asks for.")
ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=MAX_STEPS, history_window=1)

# The reference harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/):
# __init__.py eval_config max_steps 50, num_instructions 100; webshop/eval.py: num_products
# 1000, build_react_prompt history_window=5, SamplingParams max_tokens=100 stop ["\n"],
# and `success = reward >= 0.5` when the episode ends by a purchase (else reward 0, failure).
PAPER_STEPS, PAPER_HISTORY, PAPER_GOALS, PAPER_PRODUCTS = (paper.MAX_STEPS, paper.HISTORY_WINDOW,
                                                           100, 1000)
PAPER_SUCCESS_AT = paper.SUCCESS_AT
PAPER_ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=PAPER_STEPS,
                                history_window=PAPER_HISTORY)
#: The harness's stop list (a newline) and nothing else: the base model's end of sequence
#: ends a completion too (the engines'; never the submission's).
PAPER_GRADER = GRADER.model_copy(update={"max_new_tokens": paper.MAX_NEW_TOKENS,
                                         "stop": list(paper.STOP)})
#: Where the workspace gets the harness's prompt text under the paper profile (data/webshop/).
PAPER_TEXT_FILE = "paper_text.json"
#: Which site the workspace's environment plays (data/webshop/): the original's under paper.
SITE_FILE = "site.json"


def paper_success(episode: Episode) -> bool:
    """The harness's verdict: the episode ended (a purchase) with reward >= 0.5. An episode
    cut at the step limit, or ended by an error, fails."""
    return (episode.done and episode.error is None and bool(episode.rewards)
            and episode.rewards[-1] >= PAPER_SUCCESS_AT)


def expert_actions(catalog: sim.Catalog, goal: dict[str, Any]) -> list[str]:
    """A scripted expert: search the target's name, open it, pick the goal's options, buy.
    Used for demonstrations only (kept when it earns reward 1)."""
    product = catalog.products[goal["asin"]]
    query = " ".join(sim.clean(goal["name"]).lower().split()[:12])
    actions = [f"search[{query}]", f"click[{goal['asin'].lower()}]"]
    goal_opts = goal["goal_options"]
    wanted = list(goal_opts.values()) if isinstance(goal_opts, dict) else list(goal_opts)
    for values in product["options"].values():
        pick = next((v for v in values for w in wanted
                     if sim.normalize_color(v) == sim.normalize_color(w.lower())
                     or sim.token_set_ratio(w, v) > 85), None)
        if pick is not None:
            actions.append(f"click[{pick}]")
    return actions + ["click[buy now]"]


def demo_rows(catalog: sim.Catalog, goals: list[dict[str, Any]],
              rollout: RolloutSettings = ROLLOUT) -> list[dict[str, Any]]:
    """One row per expert step of the first training goals the expert solves: the grader's
    prompt there, the action, and the chat form of the pair."""
    rows: list[dict[str, Any]] = []
    for item in goals:
        if len({r["instance_id"] for r in rows}) >= N_DEMO_GOALS:
            break
        goal, iid = item["goal"], item["id"]
        if goal["asin"] not in catalog.products:
            continue
        demo = demonstrate(iid, lambda g=goal: sim.WebShopEnv(catalog, g),
                           expert_actions(catalog, goal), rollout)
        if demo.solved:
            rows += demo.rows
    return rows


def paper_demo_rows(catalog: sim.Catalog, goals: list[dict[str, Any]],
                    text: dict[str, str]) -> list[dict[str, Any]]:
    """The expert's steps under the `paper` profile: at each, the harness's chat (system
    message and prompt) and the action; kept for goals it solves (reward 1)."""
    rows: list[dict[str, Any]] = []
    for item in goals:
        if len({r["instance_id"] for r in rows}) >= N_DEMO_GOALS:
            break
        goal, iid = item["goal"], item["id"]
        if goal["asin"] not in catalog.products:
            continue
        actions = expert_actions(catalog, goal)
        steps: list[dict[str, Any]] = []

        def generate(chats: list[list[dict[str, str]]], steps: list[dict[str, Any]] = steps,
                     actions: list[str] = actions, iid: str = iid) -> list[str]:
            k = len(steps)
            steps.append({"id": f"{iid}/{k}", "instance_id": iid, "step": k,
                          "prompt": chats[0][-1]["content"], "answer": actions[k],
                          "messages": chat_pair(chats[0], actions[k])})
            return [actions[k]]

        (episode,) = paper.play([iid], [lambda g=goal: sim.WebShopEnv(catalog, g)], text,
                                generate, max_steps=len(actions))
        if episode.done and episode.rewards[-1] == 1.0:
            rows += steps
    return rows


A2RL_GRADING = """\
- At every step the grader sends one user message, rendered with the **base model's chat
  template** and the generation prompt: the one-line prompt of `a2rl_env.render_prompt`
  (`{instruction}`, then the previous page and action, then `Now:` and the current page).
- Greedy generation, at most {max_new_tokens} new tokens; the action is the first line of the
  output, stripped and lower-cased (`a2rl_env.parse_action`)."""
PAPER_GRADING = """\
- As the paper's harness does (its prompt text is read from RD-Agent's wheel, and is in
  `data/webshop/{text_file}`): at every step a chat of two messages, rendered with the **base
  model's chat template** and the generation prompt: the harness's system message (`system`),
  then its prompt (`prompt`, with `Instruction: ` + the instruction heading of the page, which
  itself starts `Instruction: `, and the page's available actions, one a line:
  `search[<your query>]` where there is a search bar, then `click[<text>]` for each button,
  product and option), then the last {history} earlier steps as `Observation k: <page>` /
  `Action k: <action>` lines numbered from the start, then `Observation n: <page>` and
  `Action n:`.
- Greedy generation, at most {max_new_tokens} new tokens, stopped at the first newline or
  the base model's end of sequence (never one your checkpoint declares); the action is
  the output stripped, a leading `Action:` dropped and `choose[` read as `click[`
  (case-sensitive). At most {max_steps} actions.
- `env/webshop_paper.py` is the grader's own loop: `play(ids, [lambda: webshop_env.
  make_train_env(id)], json.load(open("data/webshop/{text_file}")), generate)` plays training
  goals exactly as you are graded, with your `generate(chats) -> completions`; its
  `build_prompt` and `messages` render one step."""


A2RL_DEVIATIONS = """\
1. Search: BM25 by `bm25s` (Lucene scoring, k1=0.9, b=0.4 as Pyserini's defaults; words
   lower-cased, English stop words dropped, **no stemming**) instead of Pyserini/Lucene's
   analyzer; documents are the original's (title, description, first bullet, options). Without
   `bm25s` the same formula runs in pure Python.
2. The type reward's noun extraction (spaCy `en_core_web_sm`, NOUN/PROPN) is replaced by the
   name's alphabetic words of 2+ letters that are not stop words or colours; `thefuzz`'s
   `token_set_ratio` is re-implemented (same definition, rounded). The option reward also
   counts a chosen value found in the product's text, and sizes match exactly.
3. Prices: the original draws range prices and price caps from an unseeded `random`; here a
   fixed seed, so every process agrees. The goal order (seed 233) is the original's.
4. Item pages start with `You have clicked <option>.` for each chosen option (as the
   original's `text_rich` mode says), since the prompt only keeps one earlier page.
5. The item page's back button is `< Prev` (the text environment's name), images are not
   shown, the done page shows the reward, and `reviews.json` is optional (ratings `N.A.`,
   no reviews without it). Whitespace is collapsed so observations are one line; `Next >`
   shows only when there is a next page; an action must end at its `]`.
6. A copy with fewer than 1,501 goals (test fixtures) is split in quarters (test, dev, then
   train the rest) instead of the fixed ranges."""
PAPER_DEVIATIONS = """\
The site is the original's text mode (`WebAgentTextEnv(observation_mode="text")`, as the
harness runs it), compared with the original's own code on fixed episodes: its search (Lucene's
English analyzer with Porter stemming, BM25 k1=0.9, b=0.4), pages, buttons (`Next >` on every
results page), action parsing and reward. What remains:
1. The type reward's noun extraction (spaCy `en_core_web_sm`, NOUN/PROPN) is replaced by the
   name's lower-cased words holding a letter, function words left out (`type_nouns`).
2. Search is Lucene's scoring re-done in Python (double precision: two scores that differ in
   the 7th digit may rank the other way); equal scores rank by asin, as there.
3. Prices: the original draws range prices and price caps from an unseeded `random`; here a
   fixed seed, so every process agrees. The goal order (seed 233) is the original's.
4. The done page shows the reward (the original's shows its MTurk page); images are not shown.
5. A copy with fewer than 1,501 human goals (test fixtures) splits train and dev in quarters."""


def _ranges(n_goals: int) -> dict[str, range]:
    """The human goals' splits of a shuffle of `n_goals` (`WebShopData.split_range`)."""
    return {split: WebShopData(products=[], goals=[{}] * n_goals, source="").split_range(split)
            for split in ("train", "dev", "test")}


def _span(r: range) -> str:
    return f"{r.start}-{r.stop - 1}" if len(r) else "none"


def _splits(n_goals: int) -> dict[str, SplitInfo]:
    """The a2rl profile's splits of a shuffle of `n_goals` human goals."""
    r = _ranges(n_goals)
    small = "" if n_goals > N_TEST + N_DEV else f"; a copy of {n_goals} goals: quarters"
    return {"train": SplitInfo(n_items=len(r["train"]), visible=True,
                               source=f"human goals {r['train'].start} to the end (of the "
                                      f"seed-233 shuffle){small}; environment in env/, "
                                      "demonstrations"),
            "dev": SplitInfo(n_items=len(r["dev"]), visible=False,
                             source=f"human goals {_span(r['dev'])}"),
            "test": SplitInfo(n_items=len(r["test"]), visible=False,
                              source=f"human goals {_span(r['test'])}: the original test "
                                     "goals" if not small else
                                     f"human goals {_span(r['test'])}")}


def _description(paper: bool = False, n_goals: int = N_HUMAN_GOALS) -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    r = _ranges(n_goals)
    if paper:
        fields = {"success_rule": f"An episode **succeeds at reward {PAPER_SUCCESS_AT} or "
                                  "more** (the paper harness's rule).",
                  "test_goals": f"the paper harness's {PAPER_GOALS}: **synthetic** goals "
                                f"0-{PAPER_GOALS - 1} of a catalog of the first "
                                f"{PAPER_PRODUCTS} products (generated from each product's "
                                "instruction and options, as the original site does without "
                                "human goals, shuffled with seed 233)",
                  "action_case": "the site reads their argument in lower case",
                  "paper_files": f"\n- `data/webshop/{PAPER_TEXT_FILE}` and "
                                 "`env/webshop_paper.py`: the grader's prompt text and loop "
                                 "(below).",
                  "grading": PAPER_GRADING.format(history=PAPER_HISTORY,
                                                  max_new_tokens=PAPER_GRADER.max_new_tokens,
                                                  max_steps=PAPER_STEPS,
                                                  text_file=PAPER_TEXT_FILE),
                  "max_steps": PAPER_STEPS, "deviations": PAPER_DEVIATIONS}
    else:
        fields = {"success_rule": "An episode **succeeds only at reward 1** (the original's "
                                  "success rule).",
                  "test_goals": f"goals {_span(r['test'])} (the original test goals, "
                                f"{len(r['test'])})" if n_goals > N_TEST + N_DEV else
                                f"goals {_span(r['test'])} ({len(r['test'])})",
                  "action_case": "lower-cased by the grader", "paper_files": "",
                  "grading": A2RL_GRADING.format(instruction=INSTRUCTION,
                                                 max_new_tokens=GRADER.max_new_tokens),
                  "max_steps": MAX_STEPS, "deviations": A2RL_DEVIATIONS}
    return template.format(n_test=len(r["test"]), n_dev=len(r["dev"]),
                           n_train=len(r["train"]), dev_range=_span(r["dev"]),
                           n_demo=N_DEMO_GOALS, **fields)


class WebShopSource(TaskData):
    """WebShop's data folder (`catalog.py`): the human goals' splits, and under `paper` the
    harness's synthetic test goals."""

    def splits(self, task: WebShopTask, settings: Settings) -> dict[str, SplitInfo]:
        """The splits the data folder's human goals give (under `paper`, its test is the
        synthetic goals, at most `PAPER_GOALS`)."""
        try:
            data = task.data(settings)
        except (OSError, RuntimeError, ValueError) as exc:
            raise TaskDataError(f"task webshop: {exc}") from None
        splits = _splits(len(data.goals))
        if task.profile == "paper":
            n = min(PAPER_GOALS, len(data.synthetic))
            splits["test"] = task.spec.splits["test"].model_copy(update={"n_items": n})
        return splits

    def status(self, task: WebShopTask, settings: Settings) -> DataStatus:
        """The data folder's files, without loading the catalog (a few hundred MB)."""
        folder = task.options(settings).data_dir
        fetch = f"-T data_dir=FOLDER after: {download_command('FOLDER')}"
        if not folder:
            return DataStatus(state="not_downloaded", splits=dict(task.spec.splits),
                              exact=False, fetch=fetch)
        path = Path(folder).expanduser()
        if not (path / HUMAN_FILE).is_file():
            return DataStatus(state="invalid", splits=dict(task.spec.splits), exact=False,
                              fetch=fetch, note=f"data_dir {path} has no {HUMAN_FILE}")
        return DataStatus(state="ready", splits=dict(task.spec.splits), exact=False,
                          note=f"data_dir {path} (sizes when a run loads it: a2rl tasks "
                               "webshop)")

    def hidden_paths(self, task: WebShopTask, settings: Settings) -> list[Path]:
        """The human goals file (dev and test are human goals); the catalog is public."""
        data_dir = WebShopOptions.resolve("webshop", settings).data_dir
        return [Path(data_dir).expanduser() / HUMAN_FILE] if data_dir else []


def write_shop(task: Task, workspace: Path, settings: Settings, link_base_model: bool) -> None:
    """The workspace's data/webshop/: every product (public) and the training goals only;
    under the `paper` profile also the harness's prompt text the grader uses (read from
    RD-Agent's wheel now, never stored in a2rl)."""
    assert isinstance(task, WebShopTask)
    data = task.data(settings)
    products = "".join(json.dumps(p) + "\n" for p in data.products)
    goals = "".join(json.dumps({"id": g["id"], "goal": g["goal"]}) + "\n"
                    for g in data.split_goals("train"))
    files = {"products.jsonl": products, "train_goals.jsonl": goals,
             SITE_FILE: json.dumps({"original": task.profile == "paper"}) + "\n"}
    if task.profile == "paper":
        files[PAPER_TEXT_FILE] = json.dumps(task.paper_text(settings).to_dict(),
                                            indent=1) + "\n"
    write_readonly(workspace / DATA / "webshop", files)


class WebShopTask(InteractiveTask):
    """WebShop with the human instructions; see description.md for every deviation."""

    options_model = WebShopOptions
    has_paper_profile = True  # the reference harness has it (`with_profile`)

    rollout = ROLLOUT
    backend_name = "webshop_env"
    data_source = WebShopSource()
    #: env/, then the shop's public catalog and the training goals (`write_shop`)
    workspace_parts = (write_env, write_shop)

    #: RD-Agent's wheel to read the paper profile's prompt text from, unchecked (tests give a
    #: fixture in its layout); None: the pinned wheel under $A2RL_HOME, digest-checked.
    harness_wheel: Path | None = None

    def __init__(self) -> None:
        self._catalogs: dict[int, sim.Catalog] = {}
        self._graded: sim.Catalog | None = None
        self._settings: Settings | None = None
        self.spec = TaskSpec(
            id="webshop",
            level=3,
            title="WebShop: buy what the instruction asks on a simulated shop (interactive)",
            description=_description(),
            version=f"1.s{sim.SIM_VERSION}",
            prompt_version="1",
            default_base_model="Qwen/Qwen2.5-1.5B",
            default_budget="4h",
            splits=_splits(N_HUMAN_GOALS),
            grader=GRADER,
            readonly_paths=READONLY_PATHS,
            notes={"success_if": "reward == 1 (the original WebShop's rule)"},
        )

    def with_profile(self, profile: str) -> WebShopTask:
        task = super().with_profile(profile)
        assert isinstance(task, WebShopTask)
        if task.profile == "paper":
            task.rollout = PAPER_ROLLOUT
            task._catalogs, task._graded = {}, None
            task.spec = task.spec.model_copy(update={
                "grader": PAPER_GRADER,
                # .p2: the harness's stop list only; .p3: the original site (Lucene search,
                # pages, action parsing, option reward), compared with its code
                "version": f"{task.spec.version}.p3",
                "prompt_version": "paper-3",
                "description": _description(paper=True),
                "splits": {
                    **task.spec.splits,
                    "test": SplitInfo(n_items=PAPER_GOALS, visible=False,
                                      source=f"synthetic goals 0-{PAPER_GOALS - 1} (seed-233 "
                                             f"shuffle) of the first {PAPER_PRODUCTS} products "
                                             "(the harness's)"),
                },
                "notes": {"success_if": f"reward >= {PAPER_SUCCESS_AT} at the purchase (the "
                                        "paper harness's rule)",
                          "catalog": f"the first {PAPER_PRODUCTS} products of "
                                     "items_shuffle_1000.json with items_ins_v2_1000.json "
                                     "(the harness's files; else of items_shuffle.json)",
                          "data_download": download_command(),
                          "prompt_format": "the harness's: its system message and prompt "
                                           f"(RD-Agent {rdagent.VERSION}'s wheel), the page's "
                                           "available actions, numbered Observation/Action "
                                           "lines; base model's chat template",
                          "prompt_source": rdagent.DOWNLOAD},
            })
        return task

    # --- data -----------------------------------------------------------------------------
    def data(self, settings: Settings) -> WebShopData:
        paper_profile = self.profile == "paper"
        return load_data(settings, PAPER_PRODUCTS if paper_profile else None,
                         options=self.options(settings), harness_files=paper_profile)

    def catalog(self, data: WebShopData) -> sim.Catalog:
        """The site's catalog and search index, built once per data; under the `paper`
        profile the original site's (its Lucene search, pages, action parsing and reward)."""
        key = id(data)
        if key not in self._catalogs:
            self._catalogs = {key: sim.Catalog(data.products, original=self.profile == "paper")}
        return self._catalogs[key]

    def paper_text(self, settings: Settings | None) -> rdagent.WebShopText:
        """The harness's system message and prompt, from RD-Agent's wheel."""
        if self.harness_wheel is not None:
            return rdagent.webshop_text(self.harness_wheel, checked=False)
        if settings is None:
            raise RuntimeError("load_split must be called before the paper profile's episodes")
        return rdagent.webshop_text(rdagent.default_wheel(settings))

    def task_md(self, settings: Settings | None = None) -> str:
        if settings is None:
            return self.spec.description
        return _description(self.profile == "paper", len(self.data(settings).goals))

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        data = self.data(settings)
        if self.profile == "paper":
            return paper_demo_rows(self.catalog(data), data.split_goals("train"),
                                   self.paper_text(settings).to_dict())
        return demo_rows(self.catalog(data), data.split_goals("train"), self.rollout)

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        hidden_split(split)
        data = self.data(settings)
        self._graded = self.catalog(data)  # make_env's catalog (items stay plain JSON)
        self._settings = settings
        if self.profile == "paper" and split == "test":  # the harness's sessions 0-99
            return data.synthetic_goals(PAPER_GOALS)
        return data.split_goals(split)

    def make_env(self, item: dict[str, Any]) -> Env:
        if self._graded is None:
            raise RuntimeError("load_split must be called before make_env")
        return sim.WebShopEnv(self._graded, item["goal"])

    def play_episodes(self, items: Sequence[dict[str, Any]], engine: Any,
                      grader: GraderSettings | None = None) -> list[Episode] | None:
        """The `paper` profile's episodes (the harness's loop, `paper.play`); None under
        `a2rl`, whose episodes the grader's own rollout loop plays."""
        if self.profile != "paper":
            return None
        if self._graded is None:
            raise RuntimeError("load_split must be called before play_episodes")
        grader = grader or self.spec.grader
        text = self.paper_text(self._settings).to_dict()

        def generate(chats: list[list[dict[str, str]]]) -> list[str]:
            return engine.generate(chats, max_new_tokens=grader.max_new_tokens,
                                   stop=grader.stop)

        return paper.play([str(it["id"]) for it in items],
                          [functools.partial(self.make_env, it) for it in items], text,
                          generate, max_steps=self.rollout.max_steps,
                          window=self.rollout.history_window)

    def episode_group(self, item: dict[str, Any]) -> str | None:
        return item["goal"].get("category") or None

    def score_episodes(self, items: Sequence[dict[str, Any]],
                       episodes: Sequence[Episode]) -> TaskScore:
        """The shared scoring; under the paper profile each episode's success is first
        re-decided by the harness's rule (`paper_success`)."""
        if self.profile == "paper":
            for ep in episodes:
                ep.success = paper_success(ep)
        result = super().score_episodes(items, episodes)
        if self.profile == "paper":
            result.metrics["success_rule"] = f"reward >= {PAPER_SUCCESS_AT}"
        return result

    # --- workspace ------------------------------------------------------------------------
    def env_backend_files(self) -> dict[str, str]:
        here = resources.files(__package__)
        files = {"webshop_env.py": here.joinpath("backend.py").read_text(),
                 "webshop_sim.py": here.joinpath("sim.py").read_text(),
                 "webshop_lucene.py": here.joinpath("lucene.py").read_text()}
        if self.profile == "paper":  # the grader's own loop
            files["webshop_paper.py"] = here.joinpath("paper.py").read_text()
        return files

