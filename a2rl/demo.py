"""`a2rl demo`: the main job on the embedded default.

A run of the toy task on the local sandbox: the baseline, the reference agent talking MCP over
stdio to a real `a2rl serve` process, finalization, and a short summary.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from pydantic import BaseModel
from sqlalchemy import func
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Revision, Store, Submission, ToolCall
from a2rl.store.queries import best_submission


class DemoSummary(BaseModel):
    run_id: str
    task: str
    baseline_score: float | None
    best_score: float | None
    final_score: float | None
    submissions: int
    tool_calls: int
    revisions: int
    seconds: float


def server_params(settings: Settings, run_id: str) -> StdioServerParameters:
    """`a2rl serve --run RUN` with this installation's home and store."""
    exe = Path(sys.executable).parent / "a2rl"
    env = dict(os.environ, A2RL_HOME=str(settings.home_dir), A2RL_DB_URL=settings.database_url)
    return StdioServerParameters(command=str(exe), args=["serve", "--run", run_id], env=env)


async def run_demo(settings: Settings, store: Store, task: str = "arith",
                   backend: str | None = None,
                   say: Callable[[str], None] = lambda _m: None,
                   **sandbox: Any) -> DemoSummary:
    from a2rl.clients import ReferenceAgent
    from a2rl.server import create_run, finish_run

    started = time.monotonic()
    say(f"creating a run of '{task}' and scoring the base model (the baseline)")
    created = create_run(settings, store, task_id=task, backend=backend, start_clock=True,
                         agent="reference", **sandbox)
    run = created.run
    say(f"run {run.id}: baseline dev {run.baseline_dev:.3f}, test {run.baseline_test:.3f}")
    reason = "agent finished"
    try:
        async with Client(server_params(settings, run.id), mode="legacy") as client:
            await ReferenceAgent(client, say).run()
    except Exception as exc:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]  # type: ignore[assignment]
        reason = f"agent failed: {exc}"
        say(reason)
    say("finalizing: the best dev submission is scored on the hidden test split")
    run = finish_run(settings, store, run.id, reason=reason)
    best = best_submission(store, run.id, "test" if run.protocol == "paper" else "dev")
    with store.session() as s:
        counts = {m.__name__: s.exec(select(func.count()).select_from(m).where(
            m.run_id == run.id)).one() for m in (ToolCall, Revision, Submission)}
    return DemoSummary(
        run_id=run.id, task=run.task_id, baseline_score=run.baseline_test,
        best_score=best[1].score if best else None, final_score=run.final_score,
        submissions=counts["Submission"], tool_calls=counts["ToolCall"],
        revisions=counts["Revision"], seconds=round(time.monotonic() - started, 1))
