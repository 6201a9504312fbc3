"""Reading a task's data: its hidden splits' names, a file of its data folder, the Hugging Face
hub.

Each data-backed task read the same way and wrote it again: a JSON-lines file of the user's
copy (`-T data_dir=`), a dataset split or a file from the hub, each failure a one-line error
naming the file and the option that gives the task its data offline. Here once; what to read
(which repository, file, columns) and which exception a task raises stay the task's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from .base import Split

#: The hidden splits: what `Task.load_split` serves the grader.
HIDDEN_SPLITS: tuple[str, ...] = get_args(Split)


def hidden_split(split: str) -> Split:
    """`split` when it is a hidden split, else the one-line ValueError every task raises."""
    if split not in HIDDEN_SPLITS:
        raise ValueError(f"hidden splits are 'dev' and 'test', not {split!r}")
    return split  # type: ignore[return-value]


def read_jsonl(path: Path, task_id: str, error: Callable[[str], Exception] = ValueError
               ) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file (blank lines skipped); `error` (a one-line message naming
    the file, and the line) when it cannot be read or a line is not JSON."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"task {task_id}: {path}: {exc}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        try:
            rows.extend([json.loads(line)] if line.strip() else [])
        except json.JSONDecodeError as exc:
            raise error(f"task {task_id}: {path} line {n}: not JSON ({exc.msg})") from None
    return rows


def hub_file(repo: str, filename: str, offline: str) -> Path:
    """`filename` of the dataset `repo` on the Hugging Face hub (its cached copy when there is
    one); a one-line RuntimeError otherwise, ending with `offline`: how to give it a copy."""
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset"))
    except Exception as exc:  # offline and not cached, or the hub refused
        raise RuntimeError(
            f"cannot fetch {filename} from the dataset {repo} on the Hugging Face hub and no "
            f"cached copy exists ({type(exc).__name__}); connect once, or {offline}") from None


def hub_rows(repo: str, split: str, offline: str, *, config: str | None = None,
             error: Callable[[str], Exception] = RuntimeError) -> list[dict[str, Any]]:
    """The rows of `split` (a `datasets` split expression: "train", "train[:2200]") of the
    dataset `repo` (`config`), through `datasets` and its cache; `error` in one line
    otherwise, ending with `offline`."""
    try:
        from datasets import load_dataset

        ds = load_dataset(repo, config, split=split) if config else load_dataset(repo,
                                                                                  split=split)
    except Exception as exc:  # offline and not cached, or the hub refused
        name = f"{repo} ({config})" if config else repo
        raise error(f"cannot load {name} split {split!r} from the Hugging Face hub and no "
                    f"cached copy exists ({type(exc).__name__}); connect once (it is cached), "
                    f"or {offline}") from None
    return [dict(r) for r in ds]
