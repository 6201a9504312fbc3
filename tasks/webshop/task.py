"""WebShop (level 3): buy the product an instruction describes on a simulated shopping site.

Graded by rollouts (`a2rl.tasks.rollout`) of the text site `sim.py` over the official data
(`catalog.py`): one episode per hidden goal, up to `MAX_STEPS` actions. The score is the success
rate (reward exactly 1, the original's rule) with its Wilson interval; the mean reward (the
original's "score" / 100) is a metric. The workspace gets the catalog and the training goals
under `data/webshop/`, the site under `env/`, and expert demonstrations in `data/train.jsonl`.

Under the `paper` profile the settings are the reference harness's (autorl_bench/benchmarks/
webshop): the first 100 goals, a 1,000-product catalog, 50 steps, the 5 earlier steps in every
prompt, 100 new tokens, its action clean-up (`PaperActions`) and success = reward >= 0.5
(`paper_success`). Its prompt wording and action list are not reproduced:
docs/paper-fidelity.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.layout import DATA
from a2rl.settings import Settings

from ..base import Split, TaskScore
from ..envapi.a2rl_env import Env, EnvPool, Episode
from ..interactive import READONLY_PATHS, InteractiveTask, RolloutSettings, write_readonly
from ..spec import GraderSettings, SplitInfo, TaskSpec
from . import sim
from .catalog import N_DEV, N_TEST, WebShopData, load_data
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
PAPER_STEPS, PAPER_HISTORY, PAPER_GOALS, PAPER_PRODUCTS = 50, 5, 100, 1000
PAPER_SUCCESS_AT = 0.5
PAPER_ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=PAPER_STEPS,
                                history_window=PAPER_HISTORY)
PAPER_GRADER = GRADER.model_copy(update={"max_new_tokens": 100})


class PaperActions:
    """The harness's clean-up of an action before stepping (webshop/eval.py `webshop_run`): an
    `Action:` prefix is dropped and `choose[` becomes `click[`. Our pool hands actions over
    lower-cased (`a2rl_env.parse_action`), so the prefix is matched in lower case."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def reset(self) -> Any:
        return self.env.reset()

    def step(self, action: str) -> Any:
        if action.startswith("action:"):
            action = action[len("action:"):].strip()
        if action.startswith("choose["):
            action = "click[" + action[len("choose["):]
        return self.env.step(action)


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
        pool = EnvPool([iid], [lambda g=goal: sim.WebShopEnv(catalog, g)],
                       instruction=rollout.instruction, window=rollout.history_window,
                       max_steps=rollout.max_steps)
        pool.reset()
        steps = []
        for k, action in enumerate(expert_actions(catalog, goal)):
            if not pool.active():
                break
            prompt = pool.prompts([0])[0]
            steps.append({"id": f"{iid}/{k}", "instance_id": iid, "step": k, "prompt": prompt,
                          "answer": action,
                          "messages": [{"role": "user", "content": prompt},
                                       {"role": "assistant", "content": action}]})
            pool.step({0: action})
        if pool.episodes[0].success:
            rows += steps
    return rows


def _description(paper: bool = False) -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    if paper:
        fields = {"success_rule": f"An episode **succeeds at reward {PAPER_SUCCESS_AT} or "
                                  "more** (the paper harness's rule).",
                  "history": f"the last {PAPER_HISTORY} pages with their actions",
                  "test_goals": f"goals 0-{PAPER_GOALS - 1} of a catalog of the first "
                                f"{PAPER_PRODUCTS} products (the paper harness's "
                                f"{PAPER_GOALS})",
                  "max_steps": PAPER_STEPS, "max_new_tokens": PAPER_GRADER.max_new_tokens}
    else:
        fields = {"success_rule": "An episode **succeeds only at reward 1** (the original's "
                                  "success rule).",
                  "history": "the previous page and action",
                  "test_goals": f"goals 0-499 (the original test goals, {N_TEST})",
                  "max_steps": MAX_STEPS, "max_new_tokens": GRADER.max_new_tokens}
    return template.format(n_test=N_TEST, n_dev=N_DEV, instruction=INSTRUCTION,
                           n_demo=N_DEMO_GOALS, **fields)


class WebShopTask(InteractiveTask):
    """WebShop with the human instructions; see description.md for every deviation."""

    options_model = WebShopOptions

    rollout = ROLLOUT
    backend_name = "webshop_env"

    def __init__(self) -> None:
        self._catalogs: dict[int, sim.Catalog] = {}
        self._graded: sim.Catalog | None = None
        self.spec = TaskSpec(
            id="webshop",
            level=3,
            title="WebShop: buy what the instruction asks on a simulated shop (interactive)",
            description=_description(),
            version=f"1.s{sim.SIM_VERSION}",
            prompt_version="1",
            default_base_model="Qwen/Qwen2.5-1.5B",
            default_budget="4h",
            splits={
                "train": SplitInfo(n_items=0, visible=True,
                                   source="human goals 1500 to the end (of the seed-233 "
                                          "shuffle); environment in env/, demonstrations"),
                "dev": SplitInfo(n_items=N_DEV, visible=False, source="human goals 500-1499"),
                "test": SplitInfo(n_items=N_TEST, visible=False,
                                  source="human goals 0-499: the original test goals"),
            },
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
                "prompt_version": "paper-1",
                "description": _description(paper=True),
                "splits": {
                    **task.spec.splits,
                    "test": SplitInfo(n_items=PAPER_GOALS, visible=False,
                                      source=f"human goals 0-{PAPER_GOALS - 1} over the first "
                                             f"{PAPER_PRODUCTS} products (the harness's)"),
                },
                "notes": {"success_if": f"reward >= {PAPER_SUCCESS_AT} at the purchase (the "
                                        "paper harness's rule)",
                          "catalog": f"the first {PAPER_PRODUCTS} products"},
            })
        return task

    # --- data -----------------------------------------------------------------------------
    def data(self, settings: Settings) -> WebShopData:
        return load_data(settings, PAPER_PRODUCTS if self.profile == "paper" else None,
                         options=self.options(settings))

    def catalog(self, data: WebShopData) -> sim.Catalog:
        """The site's catalog and search index, built once per data."""
        key = id(data)
        if key not in self._catalogs:
            self._catalogs = {key: sim.Catalog(data.products)}
        return self._catalogs[key]

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        data = self.data(settings)
        return demo_rows(self.catalog(data), data.split_goals("train"), self.rollout)

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        if split not in ("dev", "test"):
            raise ValueError(f"hidden splits are 'dev' and 'test', not {split!r}")
        data = self.data(settings)
        self._graded = self.catalog(data)  # make_env's catalog (items stay plain JSON)
        goals = data.split_goals(split)
        return goals[:PAPER_GOALS] if self.profile == "paper" and split == "test" else goals

    def make_env(self, item: dict[str, Any]) -> Env:
        if self._graded is None:
            raise RuntimeError("load_split must be called before make_env")
        env = sim.WebShopEnv(self._graded, item["goal"])
        return PaperActions(env) if self.profile == "paper" else env

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
        return {"webshop_env.py": here.joinpath("backend.py").read_text(),
                "webshop_sim.py": here.joinpath("sim.py").read_text()}

    def prepare_workspace(self, workspace: Path, settings: Settings, *,
                          link_base_model: bool = False) -> None:
        """The shared layout and env/, plus data/webshop/: every product (public) and the
        training goals only."""
        super().prepare_workspace(workspace, settings, link_base_model=link_base_model)
        data = self.data(settings)
        products = "".join(json.dumps(p) + "\n" for p in data.products)
        goals = "".join(json.dumps({"id": g["id"], "goal": g["goal"]}) + "\n"
                        for g in data.split_goals("train"))
        write_readonly(workspace / DATA / "webshop",
                       {"products.jsonl": products, "train_goals.jsonl": goals})
