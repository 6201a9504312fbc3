"""The GSM8K task (level 1).

Data: `openai/gsm8k` config `main` through `datasets.load_dataset` (Hugging Face cache), or,
when `data_dir` is given or the option `data_dir` is set (`-T data_dir=`, `[tasks.gsm8k]`;
deprecated: `gsm8k_dir`, `A2RL_GSM8K_DIR`), the files
`train.jsonl` / `test.jsonl` of that folder in the dataset's own schema
(`{"question", "answer"}`): the test fixtures use this, and so can a user with an offline copy.
Splits: visible train = the dataset's train split minus its last `N_DEV` rows, which are the
hidden dev split; hidden test = the dataset's test split. With fewer than `2 * N_DEV` train
rows (a copy of one's own, the test fixtures), dev is the last quarter
(`data_status.small_data_cut`); TASK.md and `a2rl tasks gsm8k` state the sizes the data give.

Under the `paper` profile (`paper.py`) every train row is visible (the dev rows too: the harness
has no dev split), the prompt is OpenCompass's 4-shot chat prompt read from its wheel, and the
answer is scored with OpenCompass's postprocessors; see docs/paper-fidelity.md.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from a2rl.settings import Settings

from .. import opencompass
from ..base import Messages, Split, Task
from ..data_files import hidden_split, hub_rows, read_jsonl
from ..data_status import DataStatus, TaskDataError, check_sizes, small_data_cut
from ..hidden_data import hub_dataset_caches
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import TaskData
from ..train_rows import with_messages
from . import paper
from .options import GSM8KOptions
from .published import PUBLISHED
from .scoring import SCORER, target_of

DATASET, CONFIG = "openai/gsm8k", "main"
N_TRAIN_ALL, N_DEV, N_TEST = 7473, 200, 1319
PROMPT_VERSION = "1"
PROMPT_TEMPLATE = "Question: {question}\nAnswer:"
DEFAULT_BASE_MODEL = "Qwen/Qwen2.5-1.5B"
GRADER = GraderSettings(max_new_tokens=256,
                        stop=["Question:", "</s>", "<|im_end|>", "<|endoftext|>"],
                        batch_size=64)
#: The harness's generation: gsm8k_gen_1d7fe4's GenInferencer max_out_len=512; greedy; ended
#: by the model's end-of-sequence token (VLLMwithChatTemplate's stop words). Our stop at
#: "Question:" changes no score: gsm8k_postprocess reads only the text before the first one.
PAPER_GRADER = GraderSettings(max_new_tokens=512, stop=["Question:"], batch_size=64)


class GSM8KDataUnavailable(TaskDataError):
    """The dataset could not be loaded (no hub access and no local copy, a file missing or a
    row not in the dataset's schema): one line naming the file and the option."""


#: What the dev split is, said once for TASK.md, `a2rl tasks` and the docs.
DEV_RULE = (f"dev: the last {N_DEV} train rows, or the last quarter of fewer than "
            f"{2 * N_DEV}")


def _description(n_train_all: int = N_TRAIN_ALL, n_test: int = N_TEST) -> str:
    """TASK.md for a train split of `n_train_all` rows and a test split of `n_test`."""
    template = files(__package__).joinpath("description.md").read_text()
    n_dev = small_data_cut(n_train_all, N_DEV)
    n_train = n_train_all - n_dev
    return template.format(n_train=n_train, n_dev=n_dev, n_test=n_test,
                           dev_start=n_train, dev_end=n_train_all - 1, dev_rule=DEV_RULE,
                           prompt_version=PROMPT_VERSION, max_new_tokens=GRADER.max_new_tokens,
                           stop=json.dumps(GRADER.stop),
                           base_model=DEFAULT_BASE_MODEL)


def _splits(n_train_all: int, n_test: int, origin: str) -> dict[str, SplitInfo]:
    """The a2rl profile's splits of a train split of `n_train_all` rows (`origin`: where)."""
    n_dev = small_data_cut(n_train_all, N_DEV)
    n_train = n_train_all - n_dev
    return {"train": SplitInfo(n_items=n_train, visible=True,
                               source=f"{origin} train, rows 0-{n_train - 1}"),
            "dev": SplitInfo(n_items=n_dev, visible=False,
                             source=f"{origin} train, rows {n_train}-{n_train_all - 1} "
                                    f"({DEV_RULE})"),
            "test": SplitInfo(n_items=n_test, visible=False, source=f"{origin} test")}


def build_user_prompt(question: str) -> str:
    return PROMPT_TEMPLATE.format(question=question)


@lru_cache(maxsize=8)
def load_rows(folder: str | None, split: str) -> list[dict[str, Any]]:
    """GSM8K's rows of `split` ("train" or "test") from `folder` or the hub, checked against
    the dataset's schema. Cached per (folder, split): the grader asks for a split repeatedly."""
    if folder is not None:
        path = Path(folder) / f"{split}.jsonl"
        if not path.is_file():
            raise GSM8KDataUnavailable(f"task gsm8k: {path} not found (-T data_dir={folder}: "
                                       "a folder with train.jsonl and test.jsonl)")
        rows = read_jsonl(path, "gsm8k", GSM8KDataUnavailable)
    else:
        rows = hub_rows(DATASET, split, "set -T data_dir= to a folder with train.jsonl and "
                        "test.jsonl", config=CONFIG,
                        error=lambda why: GSM8KDataUnavailable(f"task gsm8k: {why}"))
    where = f"{Path(folder) / f'{split}.jsonl'}" if folder is not None else f"{DATASET} {split}"
    for n, row in enumerate(rows, 1):
        if (not isinstance(row, dict) or not isinstance(row.get("question"), str)
                or "####" not in str(row.get("answer"))):
            raise GSM8KDataUnavailable(
                f"task gsm8k: {where} row {n} is not in the dataset's schema (a \"question\" "
                f"and an \"answer\" ending in '#### N'): {json.dumps(row)[:120]}")
    if not rows:
        raise GSM8KDataUnavailable(f"task gsm8k: {where} has no rows")
    return rows


def dev_size(n_train_rows: int) -> int:
    return small_data_cut(n_train_rows, N_DEV)


class GSM8KData(TaskData):
    """GSM8K's data: a data folder or the hub's dataset, the splits they give."""

    def splits(self, task: GSM8KTask, settings: Settings) -> dict[str, SplitInfo]:
        """The splits the data give (read: the hub's copy is downloaded by the first run)."""
        folder = task.data_dir(settings)
        n_train, n_test = len(task.rows("train", settings)), len(task.rows("test", settings))
        if n_train < 2:
            raise GSM8KDataUnavailable(
                f"task gsm8k: {folder or DATASET} has {n_train} train row; a run needs at "
                "least 2 (one to train on, one for dev)")
        if task.profile == "paper":  # every train row is visible; dev is the last N_DEV
            n_dev = small_data_cut(n_train, N_DEV)
            sizes = {"train": n_train, "dev": n_dev, "test": n_test}
            splits = {name: info.model_copy(update={"n_items": sizes[name]})
                      for name, info in task.spec.splits.items()}
            splits["dev"].source = (f"the last {n_dev} train rows ({DEV_RULE}), also in "
                                    "data/train.jsonl (the harness has no dev split)")
            return splits
        return _splits(n_train, n_test, str(folder) if folder else f"{DATASET} ({CONFIG})")

    def status(self, task: GSM8KTask, settings: Settings) -> DataStatus:
        """A data folder is read (its sizes); the hub's copy is not (the spec's sizes): it is
        either in the Hugging Face cache or downloaded by the first run."""
        folder = task.data_dir(settings)
        if folder is not None:
            try:
                splits = self.splits(task, settings)
                check_sizes(task.spec.id, splits, str(folder))
            except TaskDataError as exc:
                return DataStatus(state="invalid", splits=dict(task.spec.splits), exact=False,
                                  note=str(exc))
            return DataStatus(state="ready", splits=splits, note=f"data_dir {folder}")
        if any(p.exists() for p in hub_dataset_caches(DATASET)):
            return DataStatus(state="ready", splits=dict(task.spec.splits), exact=False,
                              note=f"{DATASET} in the Hugging Face cache")
        return DataStatus(state="not_downloaded", splits=dict(task.spec.splits), exact=False,
                          fetch=f"the first run downloads {DATASET} from the Hugging Face hub; "
                                "offline: -T data_dir=FOLDER with train.jsonl and test.jsonl")

    def hidden_paths(self, task: GSM8KTask, settings: Settings) -> list[Path]:
        """The dataset's copies: the data folder (its test.jsonl) and the hub caches."""
        folder = task.data_dir(settings)
        return [*([folder] if folder else []), *hub_dataset_caches(DATASET)]


class GSM8KTask(Task):
    """GSM8K with lm-evaluation-harness's prompt and answer extraction (see `scoring.py`)."""

    options_model = GSM8KOptions
    data_source = GSM8KData()
    has_paper_profile = True  # the reference harness has it (`with_profile`)

    def __init__(self, *, data_dir: Path | str | None = None,
                 base_model: str | None = None,
                 opencompass_wheel: Path | str | None = None) -> None:
        self._data_dir = data_dir
        #: The OpenCompass wheel the paper profile reads its prompt from; None: the downloaded
        #: one in $A2RL_HOME (digest-checked). Tests pass a fixture wheel in the same layout.
        self._oc_wheel = Path(opencompass_wheel) if opencompass_wheel else None
        self.base_model_override = base_model
        self.scorer = SCORER
        self.spec = TaskSpec(
            id="gsm8k",
            level=1,
            title="GSM8K grade-school math",
            public_test_ids=("openai/gsm8k", "gsm8k"),
            description=_description(),
            version="2",  # 2: several answers, number spam, hedges, grader echoes are wrong
            prompt_version=PROMPT_VERSION,
            default_base_model=DEFAULT_BASE_MODEL,
            default_budget="10h",
            splits=_splits(N_TRAIN_ALL, N_TEST, f"{DATASET} ({CONFIG})"),
            grader=GRADER,
            notes={"prompt_format": "zero-shot chat: 'Question: <question>\\nAnswer:' "
                                    "(lm-evaluation-harness gsm8k)",
                   "answer_extraction": "lm-eval gsm8k v3.0: strict '#### N', else the "
                                        "last number; numeric normalization",
                   "refused": "several distinct '#### ' answers, a run of 8+ bare numbers, "
                              "alternatives ('3 or 4') as the answer, a grader field "
                              "('expected: 18'): wrong"},
        )

    def with_profile(self, profile: str) -> GSM8KTask:
        task = super().with_profile(profile)
        assert isinstance(task, GSM8KTask)
        if task.profile == "paper":
            task.scorer = paper.SCORER
            task.spec = task.spec.model_copy(update={
                "grader": PAPER_GRADER,
                "published": PUBLISHED,
                "prompt_version": "paper-2",  # 2: user turns end with OpenCompass's newline
                "description": _paper_description(),
                "splits": {
                    "train": SplitInfo(n_items=N_TRAIN_ALL, visible=True,
                                       source=f"{DATASET} ({CONFIG}) train, all rows (the "
                                              "harness's gsm8k/data.py)"),
                    "dev": SplitInfo(n_items=N_DEV, visible=True,
                                     source=f"the last {N_DEV} train rows, also in "
                                            "data/train.jsonl (the harness has no dev split)"),
                    "test": SplitInfo(n_items=N_TEST, visible=False,
                                      source=f"{DATASET} ({CONFIG}) test, all rows "
                                             "(OpenCompass test_range [:])"),
                },
                "notes": {
                    "prompt_format": f"OpenCompass {opencompass.VERSION} gsm8k_gen_1d7fe4: "
                                     "4-shot chain of thought in chat form, the model's "
                                     "chat template",
                    "answer_extraction": "extract-non-reasoning-content, then "
                                         "gsm8k_postprocess (last number before 'Question:')",
                    "correct_if": "Gsm8kEvaluator.is_equal: |float(pred) - int(ref)| < 1e-6",
                    "prompt_source": opencompass.DOWNLOAD,
                },
            })
        return task

    # --- data -------------------------------------------------------------------------------
    def data_dir(self, settings: Settings) -> Path | None:
        raw = self._data_dir or self.options(settings).data_dir
        return Path(raw).expanduser() if raw else None

    def task_md(self, settings: Settings | None = None) -> str:
        """The description with the sizes this run's data give."""
        if settings is None:
            return self.spec.description
        n_train, n_test = len(self.rows("train", settings)), len(self.rows("test", settings))
        if self.profile == "paper":
            return _paper_description(n_train, n_test)
        return _description(n_train, n_test)

    def rows(self, split: str, settings: Settings) -> list[dict[str, Any]]:
        """The dataset's rows of `split` ("train" or "test"), in the dataset's order."""
        folder = self.data_dir(settings)
        return load_rows(str(folder) if folder else None, split)

    def paper_config(self, settings: Settings) -> opencompass.GenConfig:
        """OpenCompass's gsm8k_gen_1d7fe4 prompt (the paper profile), from its wheel."""
        return opencompass.gen_config(paper.CONFIG, settings, self._oc_wheel)

    def _item(self, split: str, index: int, row: dict[str, Any],
              config: opencompass.GenConfig | None = None) -> dict[str, Any]:
        if config is not None:  # paper: the chat OpenCompass sends, and its reference
            chat = opencompass.render(config, paper.COLUMN, row["question"])
            return {"id": f"{split}-{index:05d}", "question": row["question"],
                    "answer": row["answer"],
                    "target": paper.gsm8k_dataset_postprocess(row["answer"]),
                    "prompt": chat[-1]["content"], "chat": chat}
        return {"id": f"{split}-{index:05d}", "question": row["question"],
                "answer": row["answer"], "target": target_of(row["answer"]),
                "prompt": build_user_prompt(row["question"])}

    def _config(self, settings: Settings) -> opencompass.GenConfig | None:
        return self.paper_config(settings) if self.profile == "paper" else None

    def _train_and_dev(self, settings: Settings) -> tuple[list[dict[str, Any]],
                                                           list[dict[str, Any]]]:
        """(visible train, dev). Under `paper` the train split is every row, dev included."""
        rows = self.rows("train", settings)
        config = self._config(settings)
        items = [self._item("train", i, r, config) for i, r in enumerate(rows)]
        cut = len(items) - dev_size(len(items))
        return (items if self.profile == "paper" else items[:cut]), items[cut:]

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        """The visible rows with their chat form: the grader's messages, then the answer."""
        return [with_messages(item, self.build_prompt(item), item["answer"])
                for item in self._train_and_dev(settings)[0]]

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        if hidden_split(split) == "dev":
            return list(self._train_and_dev(settings)[1])
        config = self._config(settings)
        return [self._item("test", i, r, config)
                for i, r in enumerate(self.rows("test", settings))]

    # --- model and prompt -------------------------------------------------------------------
    def build_prompt(self, item: dict[str, Any]) -> Messages:
        if self.profile == "paper":
            return [dict(m) for m in item["chat"]]
        return [{"role": "user", "content": build_user_prompt(item["question"])}]


def _paper_description(n_train_all: int = N_TRAIN_ALL, n_test: int = N_TEST) -> str:
    n_dev = small_data_cut(n_train_all, N_DEV)
    return files(__package__).joinpath("description_paper.md").read_text().format(
        n_train=n_train_all, n_dev=n_dev, n_test=n_test, dev_start=n_train_all - n_dev,
        dev_end=n_train_all - 1, max_new_tokens=PAPER_GRADER.max_new_tokens,
        oc_version=opencompass.VERSION, base_model=DEFAULT_BASE_MODEL)
