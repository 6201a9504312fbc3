"""The tools an agent works through, and the sandboxes their commands run in.

`TOOLS` lists each tool function with its MCP annotations; the server registers them all.
Tool functions find their run through `runtime.current()`, bound by the server per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_types import ToolAnnotations

from .budget import budget_status
from .commands import job_kill, job_status, run_command
from .files import edit_file, list_files, read_file
from .runtime import CallContext, RunRuntime, current
from .submissions import get_score, submit_checkpoint

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

TOOLS: list[tuple[Callable[..., Any], ToolAnnotations]] = [
    (run_command, _WRITE),
    (job_status, _READ),
    (job_kill, _WRITE),
    (read_file, _READ),
    (list_files, _READ),
    (edit_file, ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                open_world_hint=False)),
    (submit_checkpoint, ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                        open_world_hint=False)),
    (get_score, _READ),
    (budget_status, _READ),
]

__all__ = ["TOOLS", "CallContext", "RunRuntime", "current"]
