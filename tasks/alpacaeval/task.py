"""AlpacaEval 2.0 (level 2): instruction following, judged pairwise against reference outputs.

Data (read as plain files; `tatsu-lab/alpaca_eval`'s dataset script no longer loads):
- test: the 805 AlpacaEval instructions with their reference outputs, the JSON file
  `alpaca_eval_gpt4_baseline.json` of the dataset `tatsu-lab/alpaca_eval` (AlpacaEval 2.0's
  reference: gpt4_turbo), fetched with `huggingface_hub.hf_hub_download(repo_type="dataset")`.
  `A2RL_ALPACAEVAL_REFERENCE_FILE=alpaca_eval.json` selects AlpacaEval 1.0's text-davinci-003
  references instead (same schema: `instruction`, `output`, `generator`, `dataset`).
- train (visible): the first `n_train` (2,000) rows of `tatsu-lab/alpaca` (`instruction`,
  `input`, `output`) with `messages`; dev (hidden): the next `n_dev` (200) rows, judged against
  the dataset's own outputs.
- `A2RL_ALPACAEVAL_DIR`: a directory holding the reference JSON file and `alpaca.jsonl` (rows of
  `tatsu-lab/alpaca`), used instead of the hub (tests point it at fixtures in the real schema).

Scoring: `scoring.py`, over `judge.py` (protocol, prompt; the shared judge client's endpoint,
retries, fencing and cache) and `length_control.py`.
The score is the length-controlled win rate; the raw win rate and both intervals are metrics.
The paired interval of a run's improvement refits the length control (`improvement.py`).

The `paper` profile (`paper_spec`) evaluates as the reference harness does
(rdagent/scenarios/rl/autorl_bench/benchmarks/alpacaeval/eval.py): 512 new tokens, outputs
stripped, alpaca_eval's annotator `alpaca_eval_gpt4_turbo_fn` (`paper_annotator.py`) and its
length-controlled GLM with the instruction-difficulty term (`paper_length_control.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from a2rl.settings import Settings, load_settings
from a2rl.stats import NORMAL_METHOD

from ..base import Messages, Split, Task, TaskScore
from ..data_files import hidden_split, hub_file, hub_rows, read_jsonl
from ..data_status import DataStatus, TaskDataError, folder_or_hub
from ..hidden_data import hub_dataset_caches
from ..improvement import IntervalResult, Scored
from ..scorers import check_paired
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import TaskData
from ..train_rows import with_messages
from .options import AlpacaEvalOptions

N_TRAIN, N_DEV, N_TEST = 2000, 200, 805
EVAL_REPO = "tatsu-lab/alpaca_eval"
TRAIN_REPO = "tatsu-lab/alpaca"
DEFAULT_REFERENCE_FILE = "alpaca_eval_gpt4_baseline.json"
DATA_DIR_ENV = "A2RL_ALPACAEVAL_DIR"
ALPACA_FIXTURE = "alpaca.jsonl"
GRADER = GraderSettings(max_new_tokens=1024, stop=["<|im_end|>", "<|endoftext|>", "</s>"],
                        batch_size=32)
#: The harness's generation (benchmarks/__init__.py alpacaeval eval_config: max_tokens 512,
#: max_model_len 4096; eval.py: vLLM, temperature 0, no stop list): ended by the end of
#: sequence only, the base model's (the engines'; never the submission's).
PAPER_GRADER = GRADER.model_copy(update={"max_new_tokens": 512, "stop": []})
PAPER_MAX_MODEL_LEN = 4096
#: The paper profile's interval: normal, from alpaca_eval's standard error of the LC win rate.
PAPER_CI_METHOD = f"{NORMAL_METHOD} (alpaca_eval lc_standard_error)"


def _description(grader: GraderSettings = GRADER, name: str = "description.md",
                 n_train: int = N_TRAIN, n_dev: int = N_DEV, n_test: int = N_TEST) -> str:
    template = files(__package__).joinpath(name).read_text()
    return template.format(n_train=n_train, n_dev=n_dev, n_test=n_test,
                           max_new_tokens=grader.max_new_tokens)


#: What `a2rl tasks --profile` shows beyond the spec (TaskSpec.notes; profile plumbing).
NOTES = {
    "prompt_format": "the instruction as one user message, base model's chat template",
    "judge": "a2rl.tasks.alpacaeval.judge: alpaca_eval_clf_gpt4_turbo prompt, text answer m/M",
    "score": "length-controlled win rate: logistic fit on tanh(length difference / sd), "
             "no instruction-difficulty term (length_control.py)",
}
PAPER_NOTES = {
    "prompt_format": "the instruction as one user message, base model's chat template; "
                     "output stripped",
    "judge": "alpaca_eval 0.6.6 annotator alpaca_eval_gpt4_turbo_fn (package prompt, "
             "make_partial_leaderboard function call); the harness's judge model: gpt-5.2",
    "score": "alpaca_eval length_controlled_v1 GLM (instruction difficulty, gamed "
             "baselines): get_length_controlled_winrate",
    "max_model_len": str(PAPER_MAX_MODEL_LEN),
}


def _spec(n_train: int, n_dev: int, *, paper: bool = False) -> TaskSpec:
    extra: dict[str, Any] = {"profile": "paper", "notes": PAPER_NOTES} if paper else \
        {"notes": NOTES}
    return TaskSpec(
        **extra,  # fields of the profile plumbing (TaskSpec.profile, .notes)
        id="alpacaeval",
        level=2,
        title="AlpacaEval 2.0 (instruction following, LLM-judged)",
        graded_by="judge",
        public_test_ids=("tatsu-lab/alpaca_eval", "alpaca_eval.json"),
        description=_description(PAPER_GRADER, "description_paper.md") if paper
        else _description(),
        # 2: judged outputs fenced; words to the judge never win. Paper .p2: no stop list
        version="2.p2" if paper else "2",
        prompt_version="paper-2" if paper else "1",
        # the harness's README runs use Qwen/Qwen2.5-1.5B (the base model, not -Instruct)
        default_base_model="Qwen/Qwen2.5-1.5B",
        default_budget="12h" if paper else "2h",
        splits={
            "train": SplitInfo(n_items=n_train, visible=True,
                               source=f"{TRAIN_REPO} rows 0-{n_train - 1}"),
            "dev": SplitInfo(n_items=n_dev, visible=False,
                             source=f"{TRAIN_REPO} rows {n_train}-{n_train + n_dev - 1}, "
                                    "judged against the dataset's own outputs"),
            "test": SplitInfo(n_items=N_TEST, visible=False,
                              source=f"{EVAL_REPO} {DEFAULT_REFERENCE_FILE} (setting "
                                     "alpacaeval_reference_file)"),
        },
        grader=PAPER_GRADER if paper else GRADER,
    )


def alpaca_prompt(row: dict[str, Any]) -> str:
    """An alpaca row as one user message: the instruction, then its input after a blank line."""
    instruction = row["instruction"].strip()
    extra = (row.get("input") or "").strip()
    return f"{instruction}\n\n{extra}" if extra else instruction


def _options(settings: Settings, options: AlpacaEvalOptions | None) -> AlpacaEvalOptions:
    return options or AlpacaEvalOptions.resolve("alpacaeval", settings)


def _data_dir(options: AlpacaEvalOptions) -> Path | None:
    return Path(options.data_dir).expanduser() if options.data_dir else None


def load_eval_rows(settings: Settings,
                   options: AlpacaEvalOptions | None = None) -> list[dict[str, Any]]:
    """The AlpacaEval rows (instruction, output, generator, dataset), from a file or the hub."""
    opts = _options(settings, options)
    name = opts.reference_file
    local = _data_dir(opts)
    if local is not None:
        path = local / name
        if not path.is_file():
            raise FileNotFoundError(f"{DATA_DIR_ENV}={local} has no {name}")
    else:
        path = hub_file(EVAL_REPO, name, f"set {DATA_DIR_ENV} to a directory holding {name}")
    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or not all("instruction" in r and "output" in r for r in rows):
        raise ValueError(f"{path} is not an AlpacaEval JSON file (a list of rows with "
                         "'instruction' and 'output')")
    return rows


def load_alpaca_rows(n: int, settings: Settings,
                     options: AlpacaEvalOptions | None = None) -> list[dict[str, Any]]:
    """The first `n` rows of tatsu-lab/alpaca (instruction, input, output)."""
    local = _data_dir(_options(settings, options))
    if local is not None:
        return read_jsonl(local / ALPACA_FIXTURE, "alpacaeval")[:n]
    rows = hub_rows(TRAIN_REPO, f"train[:{n}]", f"set {DATA_DIR_ENV}")
    return [{k: row[k] for k in ("instruction", "input", "output")} for row in rows]


class AlpacaEvalData(TaskData):
    """AlpacaEval's data: a data folder, else `tatsu-lab/alpaca` and the evaluation set from
    the hub; the splits they give."""

    def splits(self, task: AlpacaEvalTask, settings: Settings) -> dict[str, SplitInfo]:
        n_train, n_dev, n_test = task.sizes(settings)
        spec = _spec(n_train, n_dev, paper=task.profile == "paper")
        return {**spec.splits, "test": spec.splits["test"].model_copy(
            update={"n_items": n_test})}

    def status(self, task: AlpacaEvalTask, settings: Settings) -> DataStatus:
        opts = task.options(settings)
        cached = all(any(p.exists() for p in hub_dataset_caches(repo))
                     for repo in (TRAIN_REPO, EVAL_REPO))
        return folder_or_hub(task.spec.id, dict(task.spec.splits), _data_dir(opts),
                             [opts.reference_file, ALPACA_FIXTURE], [TRAIN_REPO, EVAL_REPO],
                             cached)

    def hidden_paths(self, task: AlpacaEvalTask, settings: Settings) -> list[Path]:
        """The evaluation set's copies: the data folder and the hub caches."""
        folder = _data_dir(_options(settings, None))
        return [*([folder] if folder else []), *hub_dataset_caches(EVAL_REPO),
                *hub_dataset_caches(TRAIN_REPO)]


class AlpacaEvalTask(Task):
    """AlpacaEval 2.0 against reference outputs, judged by an OpenAI-compatible model."""

    options_model = AlpacaEvalOptions
    data_source = AlpacaEvalData()
    has_paper_profile = True  # the reference harness has it (`with_profile`)

    #: The reference harness's evaluation (see the module docstring).
    paper_spec = _spec(N_TRAIN, N_DEV, paper=True)

    def __init__(self, n_train: int = N_TRAIN, n_dev: int = N_DEV, judge: Any = None) -> None:
        self.n_train, self.n_dev = n_train, n_dev
        #: a `judge.Judge`; built from the environment on first use when None.
        self.judge = judge
        self._settings: Settings | None = None
        self.spec = _spec(n_train, n_dev)

    def paired_interval(self, final: Scored, base: Scored) -> IntervalResult:
        """The score is a length-controlled win rate, not a share of items correct: a paired
        bootstrap refitting the length control (`improvement.lc_interval`)."""
        from .improvement import lc_interval  # numpy: imported where a score is computed

        return lc_interval(final, base)

    def with_profile(self, profile: str) -> AlpacaEvalTask:
        """Under `paper`, the harness's generation, judge and length control (`paper_spec`)."""
        task = super().with_profile(profile)
        assert isinstance(task, AlpacaEvalTask)
        if task.profile == "paper" and task is not self:
            task.spec = _spec(self.n_train, self.n_dev, paper=True)
        return task

    def _alpaca(self, settings: Settings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(train rows, dev rows). A source with fewer rows than both need (a small offline
        copy) keeps its last quarter as dev, as GSM8K does, so dev is never empty."""
        rows = load_alpaca_rows(self.n_train + self.n_dev, settings, self.options(settings))
        cut = self.n_train if len(rows) == self.n_train + self.n_dev else \
            len(rows) - max(1, len(rows) // 4)
        return rows[:cut], rows[cut:]

    def sizes(self, settings: Settings) -> tuple[int, int, int]:
        """(train, dev, test) rows the data give; `TaskDataError` when they cannot be read."""
        try:
            train, dev = self._alpaca(settings)
            return len(train), len(dev), len(load_eval_rows(settings, self.options(settings)))
        except (OSError, RuntimeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            raise TaskDataError(f"task alpacaeval: {str(exc).splitlines()[0]}") from None

    def task_md(self, settings: Settings | None = None) -> str:
        if settings is None:
            return self.spec.description
        n_train, n_dev, n_test = self.sizes(settings)
        if self.profile == "paper":
            return _description(PAPER_GRADER, "description_paper.md", n_train, n_dev, n_test)
        return _description(GRADER, "description.md", n_train, n_dev, n_test)

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        items = []
        for i, row in enumerate(self._alpaca(settings)[0]):
            prompt = alpaca_prompt(row)
            item = {"id": f"train-{i:05d}", "instruction": row["instruction"],
                    "input": row.get("input", ""), "output": row["output"],
                    "prompt": prompt, "answer": row["output"]}  # as every task names them
            items.append(with_messages(item, self.build_prompt(item), row["output"]))
        return items

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        self._settings = settings
        if hidden_split(split) == "dev":
            rows = self._alpaca(settings)[1]
            return [{"id": f"dev-{i:04d}", "prompt": alpaca_prompt(r), "reference": r["output"],
                     "reference_generator": "text-davinci-003", "dataset": TRAIN_REPO}
                    for i, r in enumerate(rows)]
        return [{"id": f"test-{i:04d}", "prompt": r["instruction"], "reference": r["output"],
                 "reference_generator": r.get("generator", ""), "dataset": r.get("dataset", "")}
                for i, r in enumerate(load_eval_rows(settings, self.options(settings)))]

    def build_prompt(self, item: dict[str, Any]) -> Messages:
        return [{"role": "user", "content": item["prompt"]}]

    def get_judge(self) -> Any:
        if self.judge is None:
            from .judge import Judge

            self.judge = Judge.from_settings(self._settings or load_settings()[0])
        return self.judge

    def score_outputs(
        self, items: Sequence[dict[str, Any]], outputs: Sequence[str]
    ) -> TaskScore:
        """The judge's verdicts made a win rate (`scoring.py`): under `a2rl` the
        length-controlled one of our judge, under `paper` alpaca_eval's annotator and GLM."""
        from . import scoring  # numpy and pandas: imported where a score is computed

        check_paired(items, outputs)
        if self.profile == "paper":
            settings = self._settings or load_settings()[0]
            return scoring.paper_win_rate(self.get_judge(), items, outputs,
                                          _data_dir(self.options(settings)))
        return scoring.win_rate_score(self.get_judge(), items, outputs)
