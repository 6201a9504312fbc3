"""DeepSearchQA (level 3): answer hard multi-step questions by searching, judged by an LLM.

The episode (`game.py`) is ReAct-style: `search[query]` actions, then one `answer[text]`. The
grader rolls the model out with its host-side search backend (`search.py`) and then asks the
judge (`judge.py`) about every final answer at once; the agent's training code reaches search
only through the run's service socket (`services`), each search recorded in the store.

Under the `paper` profile: the harness's split (`datasets`' shuffle, `data.paper_order`), its 6
steps with the whole history in every prompt, 256 new tokens, and its judge's rules (a set
answer holding every gold item is correct, extra items allowed; a failed judge call falls back
to its string match). Its Thought/Action completion loop and web search are not reproduced:
docs/paper-fidelity.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.layout import DATA
from a2rl.settings import Settings, load_settings

from ..base import Split, TaskScore
from ..envapi.a2rl_env import Env, EnvPool, Episode
from ..interactive import READONLY_PATHS, InteractiveTask, RolloutSettings, write_readonly
from ..spec import GraderSettings, SplitInfo, TaskSpec
from . import game
from .data import N_DEV, N_TEST, N_TRAIN, REPO, load_rows, split_rows
from .options import DeepSearchQAOptions
from .search import DEFAULT_K, SearchBackend, make_search, search_request

GRADER = GraderSettings(max_new_tokens=128,
                        stop=["\n", "<|im_end|>", "<|endoftext|>", "</s>"], batch_size=64)
INSTRUCTION = ("Answer the question. Act with search[query] to search, then answer[text] once; "
               "list every item when many are asked.")
ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=8, history_window=2)
#: The harness (autorl_bench/benchmarks/__init__.py: eval_config max_steps 6; deepsearchqa/
#: eval.py: SamplingParams max_tokens 256, and the whole conversation in every prompt).
PAPER_STEPS, PAPER_MAX_NEW_TOKENS = 6, 256
PAPER_ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=PAPER_STEPS,
                                history_window=PAPER_STEPS)
PAPER_GRADER = GRADER.model_copy(update={"max_new_tokens": PAPER_MAX_NEW_TOKENS})


def _description(paper: bool = False) -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    rollout, grader = (PAPER_ROLLOUT, PAPER_GRADER) if paper else (ROLLOUT, GRADER)
    if paper:
        history = "every earlier observation with its action"
        set_rule = ("a **Set Answer** is correct when it contains every item of the gold set "
                    "(extra items allowed), as in the paper's harness; when the judge call "
                    "fails, a string match decides (every gold item must appear in the answer).")
        shuffle = ("in the order of `datasets`' `Dataset.shuffle(seed=42)` (the paper "
                   "harness's split)")
    else:
        history = "the last two observations with their actions"
        set_rule = ("a **Set Answer** is correct only when it names every item of the gold "
                    "set and nothing else. The judge's failure is never counted as correct.")
        shuffle = "shuffled with `random.Random(42)` (our split, not the paper harness's)"
    return template.format(n_train=N_TRAIN, n_dev=N_DEV, n_test=N_TEST,
                           max_steps=rollout.max_steps, max_new_tokens=grader.max_new_tokens,
                           instruction=INSTRUCTION, k=DEFAULT_K, history=history,
                           set_rule=set_rule, shuffle=shuffle)


def search_fn(backend: SearchBackend) -> Callable[[str], list[dict[str, Any]]]:
    return lambda query: [r.model_dump() for r in backend.search(query, DEFAULT_K)]


def final_answer(ep: Episode) -> str | None:
    """The text of the episode's `answer[...]`, None when it never answered."""
    parsed = game.parse(ep.actions[-1]) if ep.actions and ep.done else None
    return parsed[1] if parsed and parsed[0] == "answer" else None


class DeepSearchQATask(InteractiveTask):
    """google/deepsearchqa with a pluggable search backend and an LLM judge."""

    options_model = DeepSearchQAOptions

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
                                   source=f"{REPO} rows 0-99 of our seed-42 shuffle"),
                "dev": SplitInfo(n_items=N_DEV, visible=False,
                                 source="rows 300-399 of the shuffle (from the 600 unused)"),
                "test": SplitInfo(n_items=N_TEST, visible=False,
                                  source="rows 100-299 of our random.Random(42) shuffle "
                                         "(not the paper harness's split)"),
            },
            grader=GRADER,
            readonly_paths=READONLY_PATHS,
            notes={"judge": "LLM judge; a set answer must name every gold item and no other",
                   "success_if": "judged correct"},
        )

    def with_profile(self, profile: str) -> DeepSearchQATask:
        task = super().with_profile(profile)
        assert isinstance(task, DeepSearchQATask)
        if task.profile == "paper":
            from .judge import CorrectnessJudge

            task.rollout = PAPER_ROLLOUT
            if isinstance(task.judge, CorrectnessJudge):
                task.judge = task.judge.with_rules("paper")
            task.spec = task.spec.model_copy(update={
                "grader": PAPER_GRADER,
                "prompt_version": "paper-1",
                "description": _description(paper=True),
                "splits": {
                    "train": SplitInfo(n_items=N_TRAIN, visible=True,
                                       source=f"{REPO} rows 0-99 of datasets' "
                                              "Dataset.shuffle(seed=42) (the harness's)"),
                    "dev": SplitInfo(n_items=N_DEV, visible=False,
                                     source="rows 300-399 of that shuffle (from the 600 the "
                                            "harness leaves unused)"),
                    "test": SplitInfo(n_items=N_TEST, visible=False,
                                      source="rows 100-299 of that shuffle: the harness's "
                                             "200 eval questions"),
                },
                "notes": {"judge": "LLM judge with the harness's rules: a set answer holding "
                                   "every gold item is correct (extra items allowed); on a "
                                   "judge failure, the harness's string match",
                          "success_if": "judged correct",
                          "history": "the whole episode (every earlier step)"},
            })
        return task

    # --- data -----------------------------------------------------------------------------
    def _settings_or_default(self) -> Settings:
        return self._settings or load_settings()[0]

    def train_rows(self, settings: Settings) -> list[dict[str, Any]]:
        return split_rows(load_rows(settings, self.options(settings)), "train", self.profile)

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        """Demonstrations: search the question's first words, then answer with the gold."""
        backend = make_search(settings, options=self.options(settings))
        rows: list[dict[str, Any]] = []
        for row in self.train_rows(settings):
            query = " ".join(game.clean(row["problem"]).lower().split()[:12])
            actions = [f"search[{query}]", f"answer[{game.clean(row['answer']).lower()}]"]
            pool = EnvPool([row["id"]], [lambda r=row: game.QAEnv(r["problem"],
                                                                 search_fn(backend))],
                           instruction=self.rollout.instruction,
                           window=self.rollout.history_window,
                           max_steps=self.rollout.max_steps)
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
        return split_rows(load_rows(settings, self.options(settings)), split, self.profile)

    def make_env(self, item: dict[str, Any]) -> Env:
        settings = self._settings_or_default()
        backend = make_search(settings, options=self.options(settings))
        return game.QAEnv(item["problem"], search_fn(backend))

    def episode_group(self, item: dict[str, Any]) -> str | None:
        return item.get("problem_category") or None

    # --- scoring --------------------------------------------------------------------------
    def get_judge(self) -> Any:
        if self.judge is None:
            from .judge import CorrectnessJudge

            self.judge = CorrectnessJudge.from_settings(
                self._settings_or_default(), rules="paper" if self.profile == "paper" else "a2rl")
        return self.judge

    def score_episodes(self, items: Sequence[dict[str, Any]],
                       episodes: Sequence[Episode]) -> TaskScore:
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
        n_fallback = 0
        if self.profile == "paper":  # the harness: a failed judge call -> its string match
            from .judge import Grade, string_match

            for i, grade in verdicts.items():
                if grade.verdict == "error":
                    match = string_match(answers[i] or "", items[i]["answer"],
                                         items[i].get("answer_type", "Single Answer"))
                    verdicts[i] = Grade("correct" if match else "incorrect",
                                        grade.raw_answers, grade.error, grade.attempts)
                    n_fallback += 1
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
            "judge": judge.public(),
        })
        if self.profile == "paper":
            result.metrics["n_string_match_fallbacks"] = n_fallback
        return result

    # --- workspace and services ------------------------------------------------------------
    def services(self, settings: Settings) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """`search`: the run's only way to search from the sandbox (recorded per request)."""
        return {"search": lambda request: search_request(
            make_search(settings, options=self.options(settings)), request)}

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
        write_readonly(workspace / DATA / "deepsearchqa", {"train.jsonl": text})
