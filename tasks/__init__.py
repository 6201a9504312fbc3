"""Tasks: the registry, the `Task` base and the parts tasks assemble, and the built-in tasks.

Each built-in task lives in its own folder (`tasks/arith/`), imported only when used;
`get_task("arith")` returns an instance. Installed packages add tasks through the `a2rl.tasks`
entry-point group (docs/adding-a-task.md). A task is its spec, its data, its prompt and its
parts (`base.py`); what the harness does with one is the functions below: lay out its
workspace, check its data, list its settings, start its services.
"""

from .base import ItemResult, Messages, Split, Task, TaskScore
from .base_models import base_model_name, resolve_base_model
from .data_status import DataStatus, TaskDataError
from .hidden_seed import secret_seed, seed_digest
from .listing import profile_settings
from .options import OptionsError, TaskOptions, parse_assignments
from .registry import (
    get_task,
    list_tasks,
    register,
    task_ids,
    task_load_errors,
    task_of_run,
)
from .services import ServiceAnswer, service_handlers
from .spec import GraderSettings, SplitInfo, TaskSpec
from .task_data import (
    SecretSeed,
    TaskData,
    audit_control_items,
    check_data,
    data_status,
    hidden_data_paths,
)
from .tiny_model import ensure_base_model
from .workspace import copy_tree_readonly, prepare_workspace

__all__ = [
    "DataStatus", "GraderSettings", "ItemResult", "Messages", "OptionsError", "SecretSeed",
    "ServiceAnswer", "Split", "SplitInfo", "Task", "TaskData", "TaskDataError", "TaskOptions",
    "TaskScore", "TaskSpec", "audit_control_items", "base_model_name", "check_data",
    "copy_tree_readonly", "data_status", "ensure_base_model", "get_task", "hidden_data_paths",
    "list_tasks", "parse_assignments", "prepare_workspace", "profile_settings", "register",
    "resolve_base_model", "secret_seed", "seed_digest", "service_handlers", "task_ids",
    "task_load_errors", "task_of_run",
]
