"""The MCP `instructions`: the rules of a run, as the agent first reads them."""

from __future__ import annotations

from a2rl.store import Run

RULES = """\
You are working in an isolated workspace to post-train a base model so that it scores
better on a task. Work only through these tools.

Workspace layout: TASK.md (the task; also the resource a2rl://task), base_model/ and data/
(read-only inputs), code/ (your code), output/ (checkpoints you submit), logs/ (job logs).
Paths are always relative to the workspace root.

- run_command runs bash in the workspace. Long commands (training) keep running as background
  jobs: poll them with job_status(job_id, wait_s) instead of waiting in one call.
- Commands have no network access. Python with torch, transformers and trl is on PATH.
- Every call, every file change and every job is recorded.
- Every job's environment holds A2RL_SEED, this run's seed: seed your training's randomness
  from it, so that your recipe can be re-run with other seeds (a2rl replay does).
- The budget is wall-clock time from your first call; budget_status tells what is left.
  At the deadline all jobs are stopped and every tool except budget_status refuses work.
"""


def instructions_for(run: Run | None) -> str:
    if run is None:
        return RULES
    minutes = run.budget_s / 60
    limit = (f" and at most {run.max_submissions} submissions" if run.max_submissions else "")
    return (RULES + f"\nThis run: task '{run.task_id}', a budget of {minutes:.0f} minutes"
            f"{limit}. Start by reading TASK.md.\n")
