"""What a task's data give on this installation, as the run will have them.

A task's spec states its splits as the paper's data give them (GSM8K: 7,273 / 200 / 1,319);
a user's own copy (`-T data_dir=`), a small fixture or a missing download gives other sizes,
or none. Three questions, asked before a run is made and by `a2rl tasks`:

- `splits`: the splits this installation's data give a run (sizes and sources), read from
  the data (a task whose data are generated or shipped keeps its spec's). TASK.md is written
  from these, so the agent reads what its run has.
- `check_data`: those splits, refused in one line (`TaskDataError`) when the data are
  missing, not in the task's schema, or too small for a split the run needs.
- `data_status`: for listing, cheap and offline: the data in place (with their sizes where
  reading them is cheap), or "not downloaded" with the command that fetches them.
A task answers them with its data part (`Task.data_source`, `a2rl.tasks.task_data`); this
module holds what the answers are made of.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from .spec import SplitInfo

#: The splits every run needs at least one item of: what the agent trains on is optional for
#: a task whose training data are an environment (its `train` may hold 0 rows), not these.
NEEDED_SPLITS = ("dev", "test")


class TaskDataError(ValueError):
    """A task's data cannot make a run (missing, not in the task's schema, too small): the
    message is one line naming the task, the file or option, and what to do."""


class DataStatus(BaseModel):
    """A task's data on this installation, as `a2rl tasks` lists them."""

    state: Literal["ready", "generated", "not_downloaded", "invalid"] = Field(
        description="ready: the data are in place; generated: made from a seed or shipped "
                    "with the package; not_downloaded: fetched by `fetch` (or the first "
                    "run); invalid: present but unusable (`note` says why)")
    splits: dict[str, SplitInfo] = Field(
        description="the splits the data give (the spec's where they are not read)")
    exact: bool = Field(True, description="the sizes were read from the data, not the spec's")
    fetch: str = Field("", description="how to get the data when they are not downloaded")
    note: str = Field("", description="where the data are, or why they cannot be used")

    def sizes(self) -> str:
        """"train 225, dev 75, test 40" (a `~` before a size the spec states, unread)."""
        mark = "" if self.exact else "~"
        return ", ".join(f"{name} {mark}{info.n_items}" for name, info in self.splits.items())


def small_data_cut(n_rows: int, n_dev: int) -> int:
    """How many dev rows a source of `n_rows` gives when dev is taken from its end: `n_dev`
    when the source has at least twice as many, else its last quarter (at least 1): a small
    copy (your own subset, a test fixture) still leaves most rows for training."""
    return n_dev if n_rows >= 2 * n_dev else max(1, n_rows // 4)


def check_sizes(task_id: str, splits: dict[str, SplitInfo], where: str) -> None:
    """Refuse splits a run cannot use: no item in dev or test (`where`: the data's origin)."""
    empty = [name for name in NEEDED_SPLITS if name in splits and splits[name].n_items < 1]
    if empty:
        sizes = ", ".join(f"{n} {s.n_items}" for n, s in splits.items())
        raise TaskDataError(f"task {task_id}: the data in {where} give no {empty[0]} item "
                            f"({sizes}); a run needs at least one")


def folder_or_hub(task_id: str, splits: dict[str, SplitInfo], folder: Path | None,
                  files: Sequence[str], repos: Sequence[str], cached: bool) -> DataStatus:
    """The status of a task that reads `files` from its `data_dir` option, else `repos` from
    the Hugging Face hub (`cached`: the hub's copy is on this machine). Sizes are the spec's:
    `TaskData.splits` reads the data, this does not."""
    if folder is not None:
        missing = [name for name in files if not (folder / name).is_file()]
        if missing:
            return DataStatus(state="invalid", splits=splits, exact=False,
                              note=f"data_dir {folder} has no {missing[0]}")
        return DataStatus(state="ready", splits=splits, exact=False,
                          note=f"data_dir {folder} (its sizes: a2rl tasks {task_id})")
    if cached:
        return DataStatus(state="ready", splits=splits, exact=False,
                          note=f"{', '.join(repos)} in the Hugging Face cache")
    return DataStatus(state="not_downloaded", splits=splits, exact=False,
                      fetch=f"the first run downloads {', '.join(repos)} from the Hugging Face "
                            f"hub; offline: -T data_dir=FOLDER with {', '.join(files)}")
