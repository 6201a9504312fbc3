"""ALFWorld (level 3): household tasks in a text world, graded by rollouts.

Graded by rollouts (`interactive.run_rollouts`) of the real ALFWorld TextWorld games (`game.py`):
one episode per hidden game, up to `MAX_STEPS` actions, success = the game is won. The score is
the success rate with its Wilson interval, with the success rate per task type (pick, look,
clean, heat, cool, pick_two) as a metric. Splits: train = ALFWorld's train games (visible in the
workspace under `data/alfworld/`, playable through `env/`), dev = valid_seen, test =
valid_unseen (134 games); the game files come from `a2rl alfworld download` (`data.py`).

Under the `paper` profile (`paper_spec`, `paper_rollout`) the games are played as the reference
harness plays them: ReAct with the authors' two examples per task type, the full history, raw
completion (`react.py`); the splits and the success rule are the same.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.layout import DATA
from a2rl.settings import Settings

from ..base import Split, Task
from ..data_files import hidden_split
from ..data_status import DataStatus, TaskDataError
from ..envapi.a2rl_env import Env, Episode, render_prompt
from ..interactive import READONLY_PATHS, InteractiveTask, RolloutSettings, write_env
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import TaskData
from ..train_rows import demonstrate
from . import game, react
from .data import JSON_DIR, N_DEV, N_TEST, N_TRAIN, data_dir, game_dir, list_games, target_dir
from .options import AlfWorldOptions
from .published import PUBLISHED
from .workspace import write_train_games

#: ALFWorld's usual step limit per episode (the original evaluation's max_nb_steps_per_episode).
MAX_STEPS = 50
#: Training games with an expert demonstration in data/train.jsonl (at most; spread over the
#: task types). Demonstrations are computed once per data folder and cached under $A2RL_HOME.
N_DEMO_GAMES = 600
#: Demonstrations of this many games or more are computed in worker processes.
PARALLEL_FROM = 16
GRADER = GraderSettings(max_new_tokens=32, stop=["\n", "<|im_end|>", "<|endoftext|>", "</s>"],
                        batch_size=128)
INSTRUCTION = ("You are in a household (ALFWorld). Complete the task by typing one of the "
               "admissible actions.")
ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=MAX_STEPS, history_window=2)
#: The reference harness's generation (benchmarks/alfworld/eval.py: vLLM SamplingParams
#: temperature 0, max_tokens 100, stop ["\n"]), ended besides by the base model's end of
#: sequence (the engines'; docs/paper-fidelity.md: never the submission's).
PAPER_GRADER = GraderSettings(max_new_tokens=react.MAX_NEW_TOKENS, stop=["\n"],
                              batch_size=128)
#: ReAct keeps every earlier step: the window is the step limit.
PAPER_ROLLOUT = RolloutSettings(instruction=react.HEADER.strip(), max_steps=react.MAX_STEPS,
                                history_window=react.MAX_STEPS)


def demo_episode(gdir: Path, iid: str) -> list[dict[str, Any]]:
    """The handcoded expert's steps on one game, as the grader's prompts and the expert's
    actions; [] when the expert does not win within the step limit."""
    demo = demonstrate(iid, lambda: game.AlfWorldEnv(gdir, expert=True),
                       lambda last: last.info.get("expert_action") if last is not None else None,
                       ROLLOUT)
    return demo.rows if demo.solved else []


def _demo_job(job: tuple[str, str]) -> list[dict[str, Any]]:
    try:
        return demo_episode(Path(job[0]), job[1])
    except Exception:  # noqa: BLE001 - a game the expert cannot play has no demonstration
        return []


def demo_games(ids: list[str], n: int) -> list[str]:
    """`n` training games spread evenly over the sorted list (so over the task types)."""
    if n <= 0 or n >= len(ids):
        return list(ids)
    return [ids[i * len(ids) // n] for i in range(n)]


def demo_rows(root: Path, settings: Settings) -> list[dict[str, Any]]:
    """Expert demonstrations of up to `N_DEMO_GAMES` training games, cached under
    $A2RL_HOME/cache/alfworld (computed once per data folder: `a2rl alfworld download` does
    it, else the first run's workspace)."""
    ids = demo_games([g.id for g in list_games(root, "train")], N_DEMO_GAMES)
    key = hashlib.sha256(json.dumps([str(root.resolve()), ids, game.GAME_VERSION,
                                     ROLLOUT.model_dump()]).encode()).hexdigest()[:16]
    cache = settings.home_dir / "cache" / "alfworld" / f"demos-{key}.jsonl"
    if cache.is_file():
        return [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
    jobs = [(str(game_dir(root, iid)), iid) for iid in ids]
    if len(jobs) < PARALLEL_FROM:
        results: Iterable[list[dict[str, Any]]] = map(_demo_job, jobs)
        rows = [row for rs in results for row in rs]
    else:  # real games: about a second each, so spread over processes
        workers = min(8, os.cpu_count() or 1)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
            rows = [row for rs in ex.map(_demo_job, jobs, chunksize=8) for row in rs]
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(cache)
    return rows


def _description(n_dev: int = N_DEV, n_test: int = N_TEST) -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    example = render_prompt(
        INSTRUCTION,
        [("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a "
          "countertop 1, and a toilet 1. Your task is to: put some spraybottle on toilet.",
          "go to cabinet 1")],
        "You arrive at cabinet 1. The cabinet 1 is closed. Your task is to: put some "
        "spraybottle on toilet.", ["examine cabinet 1", "go to countertop 1", "go to toilet 1",
                                   "inventory", "look", "open cabinet 1"], 1)
    return template.format(n_test=n_test, n_dev=n_dev, max_steps=MAX_STEPS,
                           max_new_tokens=GRADER.max_new_tokens, instruction=INSTRUCTION,
                           n_demo=N_DEMO_GAMES, window=ROLLOUT.history_window, example=example)


def _paper_description(n_dev: int = N_DEV, n_test: int = N_TEST) -> str:
    template = resources.files(__package__).joinpath("description_paper.md").read_text()
    return template.format(n_test=n_test, n_dev=n_dev, max_steps=react.MAX_STEPS,
                           max_new_tokens=PAPER_GRADER.max_new_tokens,
                           max_model_len=react.MAX_MODEL_LEN,
                           kept_tokens=react.MAX_MODEL_LEN - PAPER_GRADER.max_new_tokens - 1,
                           prompts_file=react.PROMPTS_FILE, n_demo=N_DEMO_GAMES)


def _splits(n_train: int = N_TRAIN, n_dev: int = N_DEV,
            n_test: int = N_TEST) -> dict[str, SplitInfo]:
    """The splits of a download with these numbers of games (ALFWorld's: 3,553, 140, 134)."""
    return {
        "train": SplitInfo(n_items=n_train, visible=True,
                           source="ALFWorld train games (json_2.1.1/train); environment in "
                                  "env/, expert demonstrations"),
        "dev": SplitInfo(n_items=n_dev, visible=False, source="ALFWorld valid_seen games"),
        "test": SplitInfo(n_items=n_test, visible=False,
                          source="ALFWorld valid_unseen games (out of distribution)"),
    }


class AlfWorldData(TaskData):
    """ALFWorld's games, downloaded by `a2rl alfworld download` (`data.py`): train, and
    valid_seen (dev) and valid_unseen (test)."""

    def splits(self, task: AlfWorldTask, settings: Settings) -> dict[str, SplitInfo]:
        return _splits(**{f"n_{k}": v for k, v in task.game_counts(settings).items()})

    def status(self, task: AlfWorldTask, settings: Settings) -> DataStatus:
        """The download's folder, without listing its games (ALFWorld's loader is slow)."""
        folder = target_dir(settings, task.options(settings))
        if not (folder / JSON_DIR).is_dir():
            return DataStatus(state="not_downloaded", splits=dict(task.spec.splits),
                              exact=False, fetch="a2rl alfworld download",
                              note=f"no {JSON_DIR}/ in {folder}")
        return DataStatus(state="ready", splits=dict(task.spec.splits), exact=False,
                          note=f"{folder} (sizes of its games: a2rl tasks alfworld)")

    def hidden_paths(self, task: AlfWorldTask, settings: Settings) -> list[Path]:
        """The dev and test games (valid_seen, valid_unseen) and the demonstrations' cache."""
        games = target_dir(settings) / JSON_DIR
        return [games / "valid_seen", games / "valid_unseen",
                settings.home_dir / "cache" / "alfworld"]


def write_games(task: Task, workspace: Path, settings: Settings, link_base_model: bool) -> None:
    """The workspace's data/alfworld/: the train games only (dev and test games are never
    written there). Under the `paper` profile the ReAct examples the grader prompts with are
    not written either: the harness stopped exposing them to agents (its `expose_files` for
    ALFWorld is `eval.py` alone)."""
    root = data_dir(settings, task.options(settings))
    write_train_games(root, list_games(root, "train"), workspace / DATA / "alfworld",
                      link=link_base_model)


class AlfWorldTask(InteractiveTask):
    """ALFWorld's text games (AlfredTWEnv); see description.md (and description_paper.md for
    the `paper` profile)."""

    options_model = AlfWorldOptions
    has_paper_profile = True  # the reference harness has it (`with_profile`)

    rollout = ROLLOUT
    backend_name = "alfworld_env"
    data_source = AlfWorldData()
    #: env/, then the training games (`write_games`)
    workspace_parts = (write_env, write_games)
    #: The reference harness's evaluation (benchmarks/alfworld/eval.py, and the README's
    #: ALFWorld run: Qwen/Qwen2.5-1.5B-Instruct, --timeout 41600, about 11.6 h; the harness's
    #: default --timeout is 3600); the budget is the paper's 12 h (`profiles.PAPER_BUDGET`).
    paper_spec = TaskSpec(
        # fields of the profile plumbing (TaskSpec.profile, .notes)
        **{"profile": "paper", "notes": {
            "prompt_format": "raw text (no chat template): ReAct header, the authors' two "
                             "examples of the task type, the first observation, then the "
                             "whole history as ' <action>\\n<observation>\\n>'",
            "action": "completion up to the first newline, stripped; think: -> OK.",
            "success": "won when the game ends, within 50 steps",
            "examples": f"{react.PROMPTS_FILE} (ysymyth/ReAct {react.PROMPTS_COMMIT[:8]})"}},
        id="alfworld",
        level=3,
        title="ALFWorld: household tasks in a text world (interactive, ReAct as in the paper)",
        description=_paper_description(),
        # .p2: the harness's context (4,096 tokens, the oldest text cut), no end-of-text
        # stop strings (the base's end of sequence only), the examples not in the workspace
        version=f"1.g{game.GAME_VERSION}.p2",
        prompt_version="paper-react-2",
        default_base_model="Qwen/Qwen2.5-1.5B-Instruct",
        default_budget="12h",
        splits=_splits(),
        grader=PAPER_GRADER,
        readonly_paths=READONLY_PATHS,
        published=PUBLISHED,
    )
    paper_rollout = PAPER_ROLLOUT

    def __init__(self) -> None:
        self._root: Path | None = None
        self.spec = TaskSpec(
            id="alfworld",
            level=3,
            title="ALFWorld: household tasks in a text world (interactive)",
            description=_description(),
            version=f"1.g{game.GAME_VERSION}",
            prompt_version="1",
            default_base_model="Qwen/Qwen2.5-1.5B",
            default_budget="12h",
            splits=_splits(),
            grader=GRADER,
            readonly_paths=READONLY_PATHS,
        )

    def with_profile(self, profile: str) -> AlfWorldTask:
        """Under `paper`, the harness's ReAct evaluation (`paper_spec`, `paper_rollout`)."""
        task = super().with_profile(profile)
        assert isinstance(task, AlfWorldTask)
        if task.profile == "paper" and task is not self:
            task.spec, task.rollout = self.paper_spec, self.paper_rollout
        return task

    # --- data -----------------------------------------------------------------------------

    def game_counts(self, settings: Settings) -> dict[str, int]:
        """Games per split in the data folder (`TaskDataError` when there is none)."""
        try:
            root = data_dir(settings, self.options(settings))
            return {split: len(list_games(root, split)) for split in ("train", "dev", "test")}
        except (OSError, RuntimeError) as exc:
            raise TaskDataError(f"task alfworld: {exc}") from None

    def task_md(self, settings: Settings | None = None) -> str:
        if settings is None:
            return self.spec.description
        counts = self.game_counts(settings)
        make = _paper_description if self.profile == "paper" else _description
        return make(n_dev=counts["dev"], n_test=counts["test"])

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        return demo_rows(data_dir(settings, self.options(settings)), settings)

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        """`{"id", "task_type"}` per game; the id is its folder under json_2.1.1."""
        hidden_split(split)
        root = data_dir(settings, self.options(settings))
        self._root = root  # make_env's folder (items stay plain JSON)
        return [g.model_dump() for g in list_games(root, split)]

    def make_env(self, item: dict[str, Any]) -> Env:
        if self._root is None:
            raise RuntimeError("load_split must be called before make_env")
        return game.AlfWorldEnv(game_dir(self._root, item["id"]),
                                raw=getattr(self, "profile", "a2rl") == "paper")

    def play_episodes(self, items: Sequence[dict[str, Any]], engine: Any,
                      grader: GraderSettings | None = None) -> list[Episode] | None:
        """The `paper` profile's episodes (ReAct, `react.play`); None under `a2rl`, whose
        episodes the grader's own rollout loop plays."""
        if getattr(self, "profile", "a2rl") != "paper":
            return None
        if self._root is None:
            raise RuntimeError("load_split must be called before play_episodes")
        from a2rl.grading.seam import RawText

        grader = grader or self.spec.grader
        prompts = react.load_prompts(self._root)
        tokenizer = getattr(engine, "tokenizer", None)
        if tokenizer is None:  # the harness's context limit is counted in the model's tokens
            raise RuntimeError(f"the engine {getattr(engine, 'engine_name', engine)!r} has no "
                               "tokenizer: ALFWorld's paper profile fits each prompt to "
                               f"{react.MAX_MODEL_LEN} tokens with it")

        def generate(texts: list[str]) -> list[str]:
            return engine.generate(
                [RawText(react.fit_context(t, tokenizer, react.MAX_MODEL_LEN,
                                           grader.max_new_tokens)) for t in texts],
                max_new_tokens=grader.max_new_tokens, stop=grader.stop)

        return react.play([str(it["id"]) for it in items],
                          [functools.partial(self.make_env, it) for it in items],
                          [react.game_name(game_dir(self._root, it["id"])) for it in items],
                          prompts, generate, max_steps=self.rollout.max_steps)

    def episode_group(self, item: dict[str, Any]) -> str | None:
        return game.TASK_GROUPS.get(item.get("task_type", ""), item.get("task_type") or None)

    # --- workspace ------------------------------------------------------------------------
    def env_backend_files(self) -> dict[str, str]:
        here = resources.files(__package__)
        files = {f"{self.backend_name}.py": here.joinpath("backend.py").read_text(),
                 "alfworld_game.py": here.joinpath("game.py").read_text()}
        if getattr(self, "profile", "a2rl") == "paper":  # the grader's ReAct loop
            files["alfworld_react.py"] = here.joinpath("react.py").read_text()
        return files

