"""Small formatting helpers shared by the renderers."""

from __future__ import annotations

from .schema import Evidence, Interval, ProcessMetrics, Report

ROUTE_LABELS = {"sft": "SFT", "grpo": "GRPO", "ppo": "PPO", "dpo": "DPO",
                "rloo_reinforce": "RLOO/REINFORCE", "reward_model": "reward-model training",
                "distillation": "distillation", "copy_of_base": "copy of the base",
                "no_training": "no training", "unknown": "unknown"}
FAILURE_LABELS = {"runtime_error": "runtime error", "out_of_memory": "out of memory",
                  "budget_kill": "killed by the budget", "invalid_checkpoint":
                  "invalid checkpoint", "grader_error": "grader error",
                  "diverged": "training diverged", "no_submission": "no submission"}


def num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def pct(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if 0 < x < 0.1 else f"{100 * x:.0f}%"


def dur(s: float | None) -> str:
    if s is None:
        return "–"
    s = float(s)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def interval(iv: Interval | None) -> str:
    if iv is None:
        return "–"
    noise = " (within noise)" if iv.within_noise else ""
    return f"{iv.estimate:+.3f} [95% CI {iv.low:+.3f}, {iv.high:+.3f}]{noise}"


def evidence(e: Evidence) -> str:
    where = ""
    if e.file:
        where = f"{e.file}:{e.line}" if e.line else e.file
    elif e.job_id:
        where = f"job {e.job_id}"
    elif e.submission_id:
        where = f"submission {e.submission_id}"
    label = {"command": "$ ", "code": "", "log": "", "submission": "", "evaluation": "",
             "run": ""}[e.kind]
    return f"{where}: {label}{e.text}" if where else f"{label}{e.text}"


def summary_rows(r: Report) -> list[tuple[str, str]]:
    """(label, plain text) rows of the summary table; `improvement` is the interval."""
    s = r.summary
    return [
        ("task", s.task), ("agent", f"{s.agent or '–'} {s.agent_version or ''}".strip()),
        ("driver model", s.driver_model or "–"), ("base model", s.base_model or "–"),
        ("protocol", s.protocol), ("status", f"{s.status} ({s.end_reason or '–'})"),
        ("budget used", f"{dur(s.budget_used_s)} of {dur(s.budget_s)}"),
        ("baseline (dev / test)", f"{num(s.baseline_dev)} / {num(s.baseline_test)}"),
        (f"best {r.trajectory.split}", f"{num(s.best_dev)} ({s.best_submission_id or '–'})"),
        ("final test", f"{num(s.final_test)} ({s.final_submission_id or 'baseline'})"),
        ("improvement", interval(s.improvement)),
        ("submissions", f"{s.submissions_total}: {s.submissions_valid} valid, "
                        f"{s.submissions_refused} refused, {s.submissions_failed} failed"),
    ]


def metric_rows(m: ProcessMetrics) -> list[tuple[str, str]]:
    return [
        ("valid submission rate", pct(m.valid_submission_rate)),
        ("time to first valid submission", dur(m.time_to_first_valid_s)),
        ("time to first improvement", dur(m.time_to_first_improvement_s)),
        ("time to best", dur(m.time_to_best_s)),
        ("submissions improving on the previous best", pct(m.improving_share)),
        ("budget with a job running", pct(m.job_running_share)),
        ("tool calls (errors)", f"{m.tool_calls} ({m.tool_errors})"),
        ("tool calls by kind", ", ".join(f"{k} {v}" for k, v in m.tool_calls_by_kind.items())),
        ("jobs", str(m.jobs)), ("revisions", str(m.revisions)),
    ]
