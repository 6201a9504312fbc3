"""DeepSearchQA (level 3): answer hard multi-step questions by searching, judged by an LLM.

The episode (`game.py`) is ReAct-style: `search[query]` actions, then one `answer[text]`. The
grader rolls the model out with its host-side search backend (`search.py`) and then asks the
judge (`judge.py`) about every final answer at once; the agent's training code reaches search
only through the run's service socket (`services`), each search recorded in the store.

Under the `paper` profile: the harness's split (`datasets`' shuffle, `data.paper_order`), its
raw-completion Thought/Action loop (`paper.py`: its system prompt read from RD-Agent's wheel,
6 steps, 256 new tokens stopped at the next Action/Thought/Observation, a forced `answer[`
when no action parses), and its judge (`judge.py`: its prompt, one request read as it reads
it, a string match when the call fails). Search is still our backend: docs/paper-fidelity.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.layout import DATA
from a2rl.settings import Settings, load_settings

from .. import rdagent
from ..base import Split, Task, TaskScore
from ..data_files import hidden_split
from ..data_status import DataStatus, TaskDataError, folder_or_hub
from ..envapi.a2rl_env import Env, Episode
from ..hidden_data import hub_dataset_caches
from ..interactive import READONLY_PATHS, InteractiveTask, RolloutSettings, write_env
from ..services import Handler
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import TaskData
from ..train_rows import demonstrate
from ..workspace import write_readonly
from . import game, paper
from .data import FILE, N_DEV, N_TEST, N_TRAIN, REPO, load_rows, split_rows
from .options import DeepSearchQAOptions
from .published import PUBLISHED
from .search import (
    DEFAULT_K,
    HiddenAnswerFilter,
    SearchBackend,
    make_search,
    search_request,
)

GRADER = GraderSettings(max_new_tokens=128,
                        stop=["\n", "<|im_end|>", "<|endoftext|>", "</s>"], batch_size=64)
INSTRUCTION = ("Answer the question. Act with search[query] to search, then answer[text] once; "
               "list every item when many are asked.")
ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=8, history_window=2)
#: The harness (autorl_bench/benchmarks/__init__.py: eval_config max_steps 6; deepsearchqa/
#: eval.py: SamplingParams max_tokens 256, its stop strings, the whole conversation in every
#: prompt); the base model's end of sequence ends a completion too (the engines'; never the
#: submission's), as vLLM's does the base's.
PAPER_STEPS, PAPER_MAX_NEW_TOKENS = paper.MAX_STEPS, paper.MAX_NEW_TOKENS
PAPER_ROLLOUT = RolloutSettings(instruction=INSTRUCTION, max_steps=PAPER_STEPS,
                                history_window=PAPER_STEPS)
PAPER_GRADER = GRADER.model_copy(update={"max_new_tokens": PAPER_MAX_NEW_TOKENS,
                                         "stop": list(paper.STOP)})
#: Where the workspace gets the harness's prompt text under the paper profile.
PAPER_TEXT_FILE = "paper_text.json"

A2RL_EPISODE = """## The episode
The first observation is the question. Actions (the grader lower-cases them):
- `search[query]`: the {k} best results (`[k] title: snippet`) of the run's search engine;
- `answer[text]`: the final answer; the episode ends.
At most {max_steps} actions; an episode that never answers is incorrect, and so is an empty
answer (`answer[]`)."""
A2RL_GRADING = """\
- At every step the grader sends one user message, rendered with the **base model's chat
  template** and the generation prompt: the one-line prompt of `a2rl_env.render_prompt`
  (`{instruction}`, {history}, then `Now:` and the current observation). Greedy generation,
  at most {max_new_tokens} new tokens; the action is the first line of the output, stripped
  and lower-cased."""
PAPER_EPISODE = """## The episode (the paper harness's ReAct loop)
The model completes **raw text** (no chat template) in a `Thought:` / `Action:` format: the
harness's system prompt (`system` in `data/deepsearchqa/{text_file}`), a blank line, then
`Question: <question>`, `Answer type: <Single Answer or Set Answer>`, a blank line and
`Thought:`. An action is `Action: search[query]` or `Action: answer[text]` **within the same
completion** (generation stops before a new line starting `Action:`, `Thought:` or
`Observation:`, or at the base model's end of sequence, never one your checkpoint
declares). A search appends `Observation: <the top {k_paper} results' snippets joined by
" | ">` and `Thought:`; a completion without an action gets `Action: answer[` appended and a
forced answer completed up to `]`. At most {max_steps} actions; then the last answer given,
or `I don't know`."""
PAPER_GRADING = """\
- Greedy generation, at most {max_new_tokens} new tokens per step (128 for a forced answer).
  `env/deepsearchqa_paper.py` is the grader's own loop: `play(ids, questions, types,
  search_factory, json.load(open("data/deepsearchqa/{text_file}")), generate)` answers
  training questions exactly as you are graded, with your `generate(prompts, max_new_tokens,
  stop) -> completions`."""


def _description(paper_profile: bool = False) -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    if paper_profile:
        fields = {
            "episode": PAPER_EPISODE.format(text_file=PAPER_TEXT_FILE,
                                            k_paper=paper.SEARCH_RESULTS,
                                            max_steps=PAPER_STEPS),
            "grading": PAPER_GRADING.format(max_new_tokens=PAPER_MAX_NEW_TOKENS,
                                            text_file=PAPER_TEXT_FILE),
            "judged": "the harness's prompt (the gold answer, its type and the answer; not "
                      "the question)",
            "set_rule": "a **Set Answer** is correct when it contains every item of the gold "
                        "set (extra items allowed), as in the paper's harness; its reply is "
                        "correct only when its first line says `correct`, and when the judge "
                        "call fails, a string match decides (every gold item must appear in "
                        "the answer). Every answer is judged, an empty one too.",
            "shuffle": "in the order of `datasets`' `Dataset.shuffle(seed=42)` (the paper "
                       "harness's split)",
            "paper_files": f"\n- `data/deepsearchqa/{PAPER_TEXT_FILE}` and "
                           "`env/deepsearchqa_paper.py`: the grader's prompt text and loop.",
        }
    else:
        fields = {
            "episode": A2RL_EPISODE.format(k=DEFAULT_K, max_steps=ROLLOUT.max_steps),
            "grading": A2RL_GRADING.format(instruction=INSTRUCTION,
                                           history="the last two observations with their "
                                                   "actions",
                                           max_new_tokens=GRADER.max_new_tokens),
            "judged": "the question, the gold answer and its type",
            "set_rule": "a **Set Answer** is correct only when it names every item of the "
                        "gold set and nothing else. The judge's failure is never counted as "
                        "correct.",
            "shuffle": "shuffled with `random.Random(42)` (our split, not the paper harness's)",
            "paper_files": "",
        }
    return template.format(n_train=N_TRAIN, n_dev=N_DEV, n_test=N_TEST, **fields)


def search_fn(backend: SearchBackend) -> Callable[[str], list[dict[str, Any]]]:
    return lambda query: [r.model_dump() for r in backend.search(query, DEFAULT_K)]


def final_answer(ep: Episode) -> str | None:
    """The text of the episode's `answer[...]`, None when it never answered."""
    parsed = game.parse(ep.actions[-1]) if ep.actions and ep.done else None
    return parsed[1] if parsed and parsed[0] == "answer" else None


class DeepSearchQAData(TaskData):
    """DeepSearchQA's questions: `DSQA-full.csv` of a data folder or the hub, split by row
    ranges of a shuffle (`data.py`)."""

    def splits(self, task: DeepSearchQATask, settings: Settings) -> dict[str, SplitInfo]:
        """The splits the CSV's rows give (a copy of fewer than 900 rows: quarters)."""
        try:
            rows = load_rows(settings, task.options(settings))
        except (OSError, RuntimeError, ValueError) as exc:
            raise TaskDataError(f"task deepsearchqa: {str(exc).splitlines()[0]}") from None
        return {name: info.model_copy(update={
                    "n_items": len(split_rows(rows, name, task.profile))})
                for name, info in task.spec.splits.items()}

    def status(self, task: DeepSearchQATask, settings: Settings) -> DataStatus:
        folder = task.options(settings).data_dir
        return folder_or_hub(task.spec.id, dict(task.spec.splits),
                             Path(folder).expanduser() if folder else None, [FILE], [REPO],
                             any(p.exists() for p in hub_dataset_caches(REPO)))

    def hidden_paths(self, task: DeepSearchQATask, settings: Settings) -> list[Path]:
        """The CSV's copies (every split is a row range of it): data folder, hub caches."""
        data_dir = DeepSearchQAOptions.resolve("deepsearchqa", settings).data_dir
        return [*([Path(data_dir)] if data_dir else []), *hub_dataset_caches(REPO)]


def search_service(task: DeepSearchQATask, settings: Settings) -> Handler:
    """`search`: the run's only way to search from the sandbox (recorded per request), through
    the sandbox's filtered search (`DeepSearchQATask.sandbox_search`), built on first use."""
    search = functools.cache(lambda: task.sandbox_search(settings))
    return lambda request: search_request(search(), request)


def write_questions(task: Task, workspace: Path, settings: Settings,
                    link_base_model: bool) -> None:
    """The workspace's data/deepsearchqa/train.jsonl: the visible questions with their answers
    (never dev or test); under the `paper` profile also the harness's prompt text (read from
    RD-Agent's wheel now, never stored in a2rl)."""
    assert isinstance(task, DeepSearchQATask)
    text = "".join(json.dumps(r) + "\n" for r in task.train_rows(settings))
    files = {"train.jsonl": text}
    if task.profile == "paper":
        files[PAPER_TEXT_FILE] = json.dumps(task.paper_text(settings).to_dict(),
                                            indent=1) + "\n"
    write_readonly(workspace / DATA / "deepsearchqa", files)


class DeepSearchQATask(InteractiveTask):
    """google/deepsearchqa with a pluggable search backend and an LLM judge."""

    options_model = DeepSearchQAOptions
    has_paper_profile = True  # the reference harness has it (`with_profile`)

    rollout = ROLLOUT
    backend_name = "deepsearchqa_env"
    data_source = DeepSearchQAData()
    #: env/, then the visible questions (`write_questions`)
    workspace_parts = (write_env, write_questions)
    services = {"search": search_service}

    #: RD-Agent's wheel to read the paper profile's prompt text from, unchecked (tests give a
    #: fixture in its layout); None: the pinned wheel under $A2RL_HOME, digest-checked.
    harness_wheel: Path | None = None

    def __init__(self, judge: Any = None) -> None:
        #: a `CorrectnessJudge`; built from the settings on first use when None.
        self.judge = judge
        self._settings: Settings | None = None
        self.spec = TaskSpec(
            id="deepsearchqa",
            level=3,
            title="DeepSearchQA: multi-step search questions, LLM-judged (interactive)",
            graded_by="judge",
            description=_description(),
            version="2",  # 2: the judged answer fenced; words to the judge never correct
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
                "published": PUBLISHED,
                "version": f"{task.spec.version}.p2",  # .p2: the harness's stop lists only
                "prompt_version": "paper-3",
                "description": _description(paper_profile=True),
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
                "notes": {"judge": "the harness's judge prompt and reading of its reply (a "
                                   "set answer holding every gold item is correct, extra items "
                                   "allowed); on a judge failure, the harness's string match",
                          "success_if": "judged correct",
                          "history": "the whole episode (every earlier step)",
                          "prompt_format": "raw completion, the harness's Thought/Action loop "
                                           f"(RD-Agent {rdagent.VERSION}'s system prompt); "
                                           "a forced `Action: answer[` (128 tokens, stop ])",
                          "prompt_source": rdagent.DOWNLOAD},
            })
        return task

    # --- data -----------------------------------------------------------------------------
    def _settings_or_default(self) -> Settings:
        return self._settings or load_settings()[0]

    def train_rows(self, settings: Settings) -> list[dict[str, Any]]:
        return split_rows(load_rows(settings, self.options(settings)), "train", self.profile)

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        """Demonstrations: search the question's first words, then answer with the gold. The
        search is the sandbox's own (`sandbox_search`): the observations hold no result that
        carries a dev or test answer, only what the agent's own search would return."""
        backend = self.sandbox_search(settings)
        rows: list[dict[str, Any]] = []
        for row in self.train_rows(settings):
            query = " ".join(game.clean(row["problem"]).lower().split()[:12])
            actions = [f"search[{query}]", f"answer[{game.clean(row['answer']).lower()}]"]
            demo = demonstrate(row["id"], lambda r=row: game.QAEnv(r["problem"],
                                                                  search_fn(backend)),
                               actions, self.rollout)
            rows += demo.rows
        return rows

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        hidden_split(split)
        self._settings = settings
        return split_rows(load_rows(settings, self.options(settings)), split, self.profile)

    def make_env(self, item: dict[str, Any]) -> Env:
        settings = self._settings_or_default()
        backend = make_search(settings, options=self.options(settings))
        return game.QAEnv(item["problem"], search_fn(backend))

    def paper_text(self, settings: Settings | None = None) -> rdagent.DeepSearchQAText:
        """The harness's system prompt and judge prompts, from RD-Agent's wheel."""
        if self.harness_wheel is not None:
            return rdagent.deepsearchqa_text(self.harness_wheel, checked=False)
        return rdagent.deepsearchqa_text(
            rdagent.default_wheel(settings or self._settings_or_default()))

    def play_episodes(self, items: Sequence[dict[str, Any]], engine: Any,
                      grader: GraderSettings | None = None) -> list[Episode] | None:
        """The `paper` profile's episodes (the harness's raw-completion loop, `paper.play`);
        None under `a2rl`, whose episodes the grader's own rollout loop plays."""
        if self.profile != "paper":
            return None
        from a2rl.grading.seam import RawText

        grader = grader or self.spec.grader
        settings = self._settings_or_default()
        extra = [s for s in grader.stop if s not in paper.STOP]  # a caller's own stops
        search = search_fn(make_search(settings, options=self.options(settings)))

        def generate(prompts: list[str], max_new_tokens: int, stop: Sequence[str]
                     ) -> list[str]:
            return engine.generate([RawText(t) for t in prompts],
                                   max_new_tokens=min(max_new_tokens, grader.max_new_tokens),
                                   stop=[*stop, *extra])

        return paper.play([str(it["id"]) for it in items], [it["problem"] for it in items],
                          [it.get("answer_type") or "Single Answer" for it in items],
                          lambda: search,
                          self.paper_text(settings).to_dict(), generate,
                          max_steps=self.rollout.max_steps,
                          max_new_tokens=grader.max_new_tokens, stop=paper.STOP)

    def episode_group(self, item: dict[str, Any]) -> str | None:
        return item.get("problem_category") or None

    # --- scoring --------------------------------------------------------------------------
    def get_judge(self) -> Any:
        from .judge import CorrectnessJudge

        paper_profile = self.profile == "paper"
        if self.judge is None:
            self.judge = CorrectnessJudge.from_settings(
                self._settings_or_default(), rules="paper" if paper_profile else "a2rl")
        if (paper_profile and isinstance(self.judge, CorrectnessJudge)
                and self.judge.paper_prompts is None):  # the harness's judge text
            self.judge = self.judge.with_rules("paper", self.paper_text().to_dict())
        return self.judge

    def score_episodes(self, items: Sequence[dict[str, Any]],
                       episodes: Sequence[Episode]) -> TaskScore:
        """Judge every final answer (concurrently, cached), then score as any interactive
        task: success = judged correct; an episode without an answer or (under `a2rl`) with
        an empty one is incorrect without a judge call; a judge error is incorrect and
        counted. Under `paper` every answer is judged, an empty one too (the harness's)."""
        answers = [final_answer(ep) for ep in episodes]
        paper_profile = self.profile == "paper"
        todo = [i for i, a in enumerate(answers) if (a is not None if paper_profile else a)]
        judge = self.get_judge()
        before = judge.requests_made
        default_type = "Single Answer" if paper_profile else ""  # harness: .get(, "Single...")
        grades = judge.grade_many([items[i]["problem"] for i in todo],
                                  [items[i]["answer"] for i in todo],
                                  [items[i].get("answer_type") or default_type for i in todo],
                                  [answers[i] or "" for i in todo]) if todo else []
        verdicts: dict[int, Any] = dict(zip(todo, grades, strict=True))
        n_fallback = 0
        if self.profile == "paper":  # the harness: a failed judge call -> its string match
            from .judge import Grade, string_match

            for i, grade in verdicts.items():
                if grade.verdict == "error":
                    match = string_match(answers[i] or "", items[i]["answer"],
                                         items[i].get("answer_type", "Single Answer"))
                    verdicts[i] = Grade("correct" if match and not grade.flags else "incorrect",
                                        grade.raw_answers, grade.error, grade.attempts,
                                        flags=grade.flags)
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
                                      else None, "flags": grade.flags if grade else [],
                                      "raw": grade.raw_answers if grade else []})
        result.metrics.update({
            "n_answered": sum(a is not None for a in answers),
            "n_empty_answers": sum(a == "" for a in answers),
            "n_judge_errors": sum(g.verdict == "error" for g in grades),
            "n_addressed_to_judge": sum(bool(g.flags) for g in grades),
            "judge_requests": judge.requests_made - before,
            "judge": judge.public(),
        })
        if self.profile == "paper":
            result.metrics["n_string_match_fallbacks"] = n_fallback
        return result

    # --- workspace and services ------------------------------------------------------------
    def sandbox_search(self, settings: Settings) -> HiddenAnswerFilter:
        """The search the sandbox gets: the task's backend, every result that carries a dev
        or test answer or comes from the dataset's own pages withheld (the grader's rollouts
        search unfiltered: they must be able to find the answers)."""
        hidden = [(str(row["answer"]), str(row.get("answer_type", "")))
                  for split in ("dev", "test") for row in self.load_split(split, settings)]
        return HiddenAnswerFilter(make_search(settings, options=self.options(settings)),
                                  hidden, [REPO, REPO.split("/")[1], FILE])

    def env_backend_files(self) -> dict[str, str]:
        here = resources.files(__package__)
        files = {"deepsearchqa_env.py": here.joinpath("backend.py").read_text(),
                 "deepsearchqa_game.py": here.joinpath("game.py").read_text(),
                 # the services' client, shared with the host's callers (standard library)
                 "a2rl_socket.py": resources.files("a2rl").joinpath("jsonl_socket.py")
                 .read_text()}
        if self.profile == "paper":  # the grader's own loop
            files["deepsearchqa_paper.py"] = here.joinpath("paper.py").read_text()
        return files

