"""`a2rl demo`: the main job on the embedded default, a thin wrapper over `a2rl run`.

A run of the toy task with the scripted reference agent, which talks MCP over stdio to a real
`a2rl serve` process; the orchestrator scores the baseline, enforces the budget, finalizes and
summarizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from a2rl.clients.orchestrator import Orchestrator, RunOptions, RunSummary
from a2rl.settings import Settings
from a2rl.store import Store

DEMO_FIELDS = ["run_id", "task", "baseline_score", "best_score", "final_score", "submissions",
               "tool_calls", "revisions", "seconds"]


def run_demo(settings: Settings, store: Store, task: str = "arith", backend: str | None = None,
             say: Callable[[str], None] = lambda _m: None, **sandbox: Any) -> RunSummary:
    opts = RunOptions(task=task, agent="reference", backend=backend, sandbox=sandbox)
    return Orchestrator(settings, store, say).run(opts)
