"""A run's workspace as the agent finds it: the layout every task shares, and the parts a task
adds (`Task.workspace_parts`).

The layout is `a2rl.layout`'s, the same for every task and backend: TASK.md, data/train.jsonl,
the base model, and the empty writable folders. Inputs are made read-only (files 0444) as a
second line behind the sandbox's read-only mounts. A task with more to show (an interactive
task's env/, WebShop's catalog, ALFWorld's training games) hands in workspace parts, each
writing its own files after the layout, in order; nothing of a hidden split goes there.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.layout import BASE_MODEL, DATA, TASK_FILE, WRITABLE_DIRS
from a2rl.settings import Settings

if TYPE_CHECKING:
    from .base import Task

__all__ = ["WorkspacePart", "copy_tree_readonly", "prepare_workspace", "write_readonly"]

#: Writes a task's own files into a workspace already laid out: (task, workspace, settings,
#: link_base_model).
WorkspacePart = Callable[["Task", Path, Settings, bool], None]


def prepare_workspace(task: Task, workspace: Path, settings: Settings, *,
                      link_base_model: bool = False) -> None:
    """Write `task`'s visible files: TASK.md, data/train.jsonl, base_model/, the empty
    writable folders, then the task's own parts.

    The base model is copied by default: a hardlink would share the inode with the cache, so
    an agent that chmods and rewrites a file there would corrupt every later run. Pass
    `link_base_model=True` only when the sandbox guarantees read-only mounts.
    """
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / TASK_FILE).write_text(task.task_md(settings))
    for name in WRITABLE_DIRS:
        (workspace / name).mkdir(exist_ok=True)
    data = workspace / DATA
    data.mkdir(exist_ok=True)
    train = data / "train.jsonl"
    if train.exists():
        train.chmod(0o644)
    with train.open("w") as f:
        for item in task.train_items(settings):
            f.write(json.dumps(item) + "\n")
    train.chmod(0o444)
    copy_tree_readonly(task.base_model_dir(settings), workspace / BASE_MODEL,
                       link=link_base_model)
    for part in task.workspace_parts:
        part(task, workspace, settings, link_base_model)


def copy_tree_readonly(src: Path, dest: Path, *, link: bool = False) -> None:
    """Copy (or hardlink) the files of `src` into `dest`, each left read-only (0444)."""
    if dest.exists():
        for p in dest.rglob("*"):
            if p.is_file():
                p.chmod(0o644)
        shutil.rmtree(dest)
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if link:
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
        else:
            shutil.copy2(path, target)
        target.chmod(0o444)


def write_readonly(folder: Path, files: dict[str, str]) -> None:
    """Replace `folder`'s files with `files`, each left 0444 (idempotent over earlier runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_file():
            old.chmod(0o644)
            old.unlink()
    for name, text in files.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o444)
