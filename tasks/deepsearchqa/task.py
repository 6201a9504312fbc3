"""DeepSearchQA (level 3): answer hard multi-step questions by searching, judged by an LLM.

The episode (`game.py`) is ReAct-style: `search[query]` actions, then one `answer[text]`. The
grader rolls the model out with its host-side search backend (`search.py`) and then asks the
judge (`judge.py`) about every final answer at once; the agent's training code reaches search
only through the run's service socket (`services`), each search recorded in the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.settings import Settings, load_settings

from ..base import ScoreResult, Split
from ..envapi.a2rl_env import Env, EnvPool, Episode
from ..interactive import InteractiveTask, RolloutSettings, write_readonly
from ..spec import GraderSettings, SplitInfo, TaskSpec
from . import game
from .data import N_DEV, N_TEST, N_TRAIN, REPO, load_rows, split_rows
from .search import DEFAULT_K, SearchBackend, make_search, search_request

GRADER = GraderSettings(max_new_tokens=128,
                        stop=["\n", "<|im_end|>", "<|endoftext|>", "</s>"], batch_size=64)
INSTRUCTION = ("Answer the question. Act with search[query] to search, then answer[text] once; "
               "list every item when many are asked.")
ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=8, history_window=2)


def _description() -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    return template.format(n_train=N_TRAIN, n_dev=N_DEV, n_test=N_TEST,
                           max_steps=ROLLOUT.max_steps, max_new_tokens=GRADER.max_new_tokens,
                           instruction=INSTRUCTION, k=DEFAULT_K)


def search_fn(backend: SearchBackend) -> Callable[[str], list[dict[str, Any]]]:
    return lambda query: [r.model_dump() for r in backend.search(query, DEFAULT_K)]


def final_answer(ep: Episode) -> str | None:
    """The text of the episode's `answer[...]`, None when it never answered."""
    parsed = game.parse(ep.actions[-1]) if ep.actions and ep.done else None
    return parsed[1] if parsed and parsed[0] == "answer" else None


class DeepSearchQATask(InteractiveTask):
    """google/deepsearchqa with a pluggable search backend and an LLM judge."""

    rollout = ROLLOUT
    backend_name = "deepsearchqa_env"

    def __init__(self, judge: Any = None) -> None:
        #: a `CorrectnessJudge`; built from the settings on first use when None.
        self.judge = judge
        self._settings: Settings | None = None
        self.spec = TaskSpec(
            id="deepsearchqa",
            level=3,
            title="DeepSearchQA: multi-step search questions, LLM-judged (interactive)",
            description=_description(),
            version="1",
            prompt_version="1",
            default_base_model="Qwen/Qwen2.5-1.5B",
            default_budget="4h",
            splits={
                "train": SplitInfo(n_items=N_TRAIN, visible=True,
                                   source=f"{REPO} rows 0-99 of the seed-42 shuffle"),
                "dev": SplitInfo(n_items=N_DEV, visible=False,
                                 source="rows 300-399 of the shuffle (from the 600 unused)"),
                "test": SplitInfo(n_items=N_TEST, visible=False,
                                  source="rows 100-299 of the shuffle: the paper's 200"),
            },
            grader=GRADER,
            readonly_paths=["base_model", "data", "env"],
        )

    # --- data -----------------------------------------------------------------------------
    def _settings_or_default(self) -> Settings:
        return self._settings or load_settings()[0]

    def train_rows(self, settings: Settings) -> list[dict[str, Any]]:
        return split_rows(load_rows(settings), "train")

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        """Demonstrations: search the question's first words, then answer with the gold."""
        backend = make_search(settings)
        rows: list[dict[str, Any]] = []
        for row in self.train_rows(settings):
            query = " ".join(game.clean(row["problem"]).lower().split()[:12])
            actions = [f"search[{query}]", f"answer[{game.clean(row['answer']).lower()}]"]
            pool = EnvPool([row["id"]], [lambda r=row: game.QAEnv(r["problem"],
                                                                 search_fn(backend))],
                           instruction=ROLLOUT.instruction, window=ROLLOUT.history_window,
                           max_steps=ROLLOUT.max_steps)
            pool.reset()
            for k, action in enumerate(actions):
                prompt = pool.prompts([0])[0]
                rows.append({"id": f"{row['id']}/{k}", "instance_id": row["id"], "step": k,
                             "prompt": prompt, "answer": action,
                             "messages": [{"role": "user", "content": prompt},
                                          {"role": "assistant", "content": action}]})
                pool.step({0: action})
        return rows

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        if split not in ("dev", "test"):
            raise ValueError(f"hidden splits are 'dev' and 'test', not {split!r}")
        self._settings = settings
        return split_rows(load_rows(settings), split)

    def make_env(self, item: dict[str, Any]) -> Env:
        backend = make_search(self._settings_or_default())
        return game.QAEnv(item["problem"], search_fn(backend))

    def episode_group(self, item: dict[str, Any]) -> str | None:
        return item.get("problem_category") or None

    # --- scoring --------------------------------------------------------------------------
    def get_judge(self) -> Any:
        if self.judge is None:
            from a2rl.grading.judge import Judge

            from .judge import CorrectnessJudge

            self.judge = CorrectnessJudge(Judge.from_settings(self._settings_or_default()))
        return self.judge

    def score_episodes(self, items: Sequence[dict[str, Any]],
                       episodes: Sequence[Episode]) -> ScoreResult:
        """Judge every final answer (concurrently, cached), then score as any interactive
        task: success = judged correct; an episode without an answer or with an empty one is
        incorrect without a judge call; a judge error is incorrect and counted."""
        answers = [final_answer(ep) for ep in episodes]
        todo = [i for i, a in enumerate(answers) if a]
        judge = self.get_judge()
        before = judge.requests_made
        grades = judge.grade_many([items[i]["problem"] for i in todo],
                                  [items[i]["answer"] for i in todo],
                                  [items[i].get("answer_type", "") for i in todo],
                                  [answers[i] or "" for i in todo]) if todo else []
        verdicts: dict[int, Any] = dict(zip(todo, grades, strict=True))
        for i, ep in enumerate(episodes):
            grade = verdicts.get(i)
            ep.success = bool(grade and grade.correct)
            if ep.rewards:
                ep.rewards[-1] = 1.0 if ep.success else 0.0
        result = super().score_episodes(items, episodes)
        for i, item in enumerate(result.items):
            grade = verdicts.get(i)
            item.expected = items[i]["answer"]
            item.parsed = json.dumps({"answer": answers[i], "verdict": grade.verdict if grade
                                      else "incorrect", "judge_error": grade.error if grade
                                      else None, "raw": grade.raw_answers if grade else []})
        result.metrics.update({
            "n_answered": sum(a is not None for a in answers),
            "n_empty_answers": sum(a == "" for a in answers),
            "n_judge_errors": sum(g.verdict == "error" for g in grades),
            "judge_requests": judge.requests_made - before,
            "judge": {**judge.config.public(), "prompt_version": "dsqa-correctness.1"},
        })
        return result

    # --- workspace and services ------------------------------------------------------------
    def services(self, settings: Settings) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """`search`: the run's only way to search from the sandbox (recorded per request)."""
        return {"search": lambda request: search_request(make_search(settings), request)}

    def env_backend_files(self) -> dict[str, str]:
        here = resources.files(__package__)
        return {"deepsearchqa_env.py": here.joinpath("backend.py").read_text(),
                "deepsearchqa_game.py": here.joinpath("game.py").read_text()}

    def prepare_workspace(self, workspace: Path, settings: Settings, *,
                          link_base_model: bool = False) -> None:
        """The shared layout and env/, plus data/deepsearchqa/train.jsonl: the visible
        questions with their answers (never dev or test)."""
        super().prepare_workspace(workspace, settings, link_base_model=link_base_model)
        text = "".join(json.dumps(r) + "\n" for r in self.train_rows(settings))
        write_readonly(workspace / "data" / "deepsearchqa", {"train.jsonl": text})
