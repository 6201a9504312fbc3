"""Tasks: the registry, the `Task` base and its `TaskSpec` and `TaskOptions`, and the built-in
tasks.

Each built-in task lives in its own folder (`tasks/arith/`), imported only when used;
`get_task("arith")` returns an instance. Installed packages add tasks through the `a2rl.tasks`
entry-point group (docs/adding-a-task.md).
"""

from .base import ItemResult, Messages, Split, Task, TaskScore, copy_tree_readonly
from .base_models import resolve_base_model
from .data_status import DataStatus, TaskDataError
from .hidden_seed import secret_seed, seed_digest
from .options import OptionsError, TaskOptions, parse_assignments
from .registry import get_task, list_tasks, register, task_ids, task_load_errors
from .spec import GraderSettings, SplitInfo, TaskSpec
from .tiny_model import ensure_base_model

__all__ = [
    "DataStatus", "GraderSettings", "ItemResult", "Messages", "OptionsError", "Split",
    "SplitInfo", "Task", "TaskDataError", "TaskOptions", "TaskScore", "TaskSpec",
    "copy_tree_readonly", "ensure_base_model", "get_task", "list_tasks", "parse_assignments",
    "register", "resolve_base_model", "secret_seed", "seed_digest", "task_ids",
    "task_load_errors",
]
