"""`a2rl demo`: the main job on the embedded default, a thin wrapper over `a2rl run`.

A run of the default task (the toy) with the default agent (the scripted reference agent),
which talks MCP over stdio to a real `a2rl serve` process; the orchestrator scores the
baseline, enforces the budget, finalizes and summarizes.
"""

from __future__ import annotations

from collections.abc import Callable

from a2rl.clients.orchestrator import Orchestrator, RunSummary
from a2rl.clients.registry import DEFAULT_AGENT
from a2rl.settings import Settings
from a2rl.store import RunConfig, Store
from a2rl.tasks.registry import DEFAULT_TASK

DEMO_FIELDS = ["run_id", "task", "baseline_score", "best_score", "final_score", "submissions",
               "tool_calls", "revisions", "seconds"]


def demo_failure(summary: RunSummary) -> str | None:
    """Why a finished demo did not show an improvement, in one sentence; None when it did.
    The demo exists to show one, so a run without it is a failure (the CLI exits 1)."""
    if summary.agent_status == "interrupted":
        return "the demo was interrupted before the agent finished"
    if summary.submissions == 0:
        why = {"budget": "the budget ran out first", "crashed": "the agent crashed"}.get(
            summary.agent_status or "", f"the agent ended {summary.agent_status}")
        return f"the demo made no submission ({why})"
    if summary.final_score is None or summary.baseline_score is None:
        return "the demo's final score is missing"
    if summary.final_score <= summary.baseline_score:
        return (f"the final score {summary.final_score:.3f} is not above the baseline "
                f"{summary.baseline_score:.3f}")
    return None


def run_demo(settings: Settings, store: Store, config: RunConfig | None = None,
             say: Callable[[str], None] = lambda _m: None) -> RunSummary:
    """The demo's run: `config` (default: the default agent on the default task) run by
    the orchestrator."""
    return Orchestrator(settings, store, say).run(
        config or RunConfig(task_id=DEFAULT_TASK, agent=DEFAULT_AGENT))
