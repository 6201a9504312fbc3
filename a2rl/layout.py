"""The workspace layout, named once: the folders every run's workspace has and which of them
are inputs.

Why here (beside `settings` and `stats`, below every top-level package): tasks write the
layout (`a2rl.tasks.prepare_workspace`), the server creates it, the tools and the sandboxes enforce
it, and each used to keep its own list of the same names. A task adds inputs of its own by
listing them in its `TaskSpec.readonly_paths`; the sandbox mounts exactly that list read-only.
"""

from __future__ import annotations

TASK_FILE = "TASK.md"
CODE = "code"  # the agent's own files
OUTPUT = "output"  # checkpoints the agent submits (output/<name>/)
LOGS = "logs"  # job logs, as the agent names them (logs/<job>.log)
DATA = "data"  # the visible train split (data/train.jsonl), read-only
BASE_MODEL = "base_model"  # the base model's files, read-only
ENV = "env"  # interactive tasks: the environment API and backend, read-only

#: Folders created empty for the agent to write in.
WRITABLE_DIRS: tuple[str, ...] = (CODE, OUTPUT, LOGS)
#: The inputs of every task (`TaskSpec.readonly_paths`' default).
READONLY_INPUTS: tuple[str, ...] = (BASE_MODEL, DATA)
#: The inputs of an interactive (level-3) task.
INTERACTIVE_READONLY_INPUTS: tuple[str, ...] = (BASE_MODEL, DATA, ENV)
#: What a run made before runs recorded their task's read-only paths was mounted with.
LEGACY_READONLY_INPUTS: tuple[str, ...] = INTERACTIVE_READONLY_INPUTS
