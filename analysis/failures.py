"""Failures of a run, each typed and backed by evidence from logs and records.

A job's end is read from its stored cause (`Job.end_cause`, decided by the sandbox supervisor
from who stopped it and the kernel's OOM count; see `a2rl.store.JobEndCause`), never guessed
from its exit code: a SIGKILL is the budget's, the agent's, the operator's or the OOM killer's.
Rows of older versions, with no cause, keep the old reading, marked as a guess.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from a2rl.store import Job, aware

from .data import RunData
from .schema import Evidence, Failure

TRACEBACK = "Traceback (most recent call last)"
OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b|out of memory|"
                 r"^Killed$|oom-kill", re.I | re.M)
# What a job's own log says when a process ran out of memory and said so (an exception): with a
# stored cause, bash's "Killed" (any SIGKILL) is no evidence of memory.
OOM_RAISED = re.compile(r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b|out of memory",
                        re.I | re.M)
LOSS = re.compile(r"(?<![A-Za-z_])['\"]?loss['\"]?\s*[:=]\s*['\"]?"
                  r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))", re.I)
# First match wins: the specific reasons before "outside output/", since most refusals tell the
# agent to save under output/ (a folder that does not exist is "no such folder").
RULES = [("no such folder", re.compile(r"does not exist|no such (?:file|dir|folder)", re.I)),
         ("base weights", re.compile(r"base model|train before", re.I)),
         ("adapter without merged weights", re.compile(r"merge|adapter", re.I)),
         ("outside output/", re.compile(r"not under output|outside output", re.I)),
         ("missing path", re.compile(r"not found", re.I)),
         ("submission limit", re.compile(r"limit", re.I)),
         ("deadline passed", re.compile(r"deadline|budget", re.I))]
# Substrings (lower case) that any match of the pattern contains.
_HINTS = {OOM: ("memory", "killed", "oom"), OOM_RAISED: ("memory",)}
# A stored cause (JobEndCause) as a failure: its type and what it means; "exited" (judged by
# its exit code and log) and "run_finished" (a job left running when the run was closed) are
# no failure by themselves.
CAUSE_FAILURES = {
    "out_of_memory": ("out_of_memory", "out of memory (the kernel's OOM killer)"),
    "signal": ("killed_by_signal", "killed by a signal from inside the job"),
    "limit": ("resource_limit", "ended by a limit of the sandbox"),
    "job_kill": ("job_killed", "stopped by the agent (job_kill)"),
    "deadline": ("budget_kill", "stopped at the run's deadline (its time limit)"),
    "budget": ("budget_kill", "stopped when the run's budget ran out"),
    "interrupted": ("interrupted", "interrupted by the operator"),
    "lost": ("job_lost", "lost with its sandbox supervisor"),
}
DIVERGE_FACTOR = 10.0
MIN_REFERENCE_LOSS = 0.01


def refusal_rule(error: str | None) -> str:
    for name, pattern in RULES:
        if error and pattern.search(error):
            return name
    return "other"


def _lines(text: str) -> list[str]:
    return text.splitlines()


def last_lines(text: str, limit: int = 300) -> str:
    """The end of an error, where its exception is, as one line: as many of its last
    non-blank lines as fit in `limit` characters, joined by ' ⏎ ' (a traceback's first
    lines only say where it started)."""
    out: list[str] = []
    for line in reversed([x.strip() for x in text.splitlines() if x.strip()]):
        if out and sum(len(x) + 3 for x in out) + len(line) > limit:
            break
        out.append(line)
    joined = " ⏎ ".join(reversed(out))
    cut = len(out) < len([x for x in text.splitlines() if x.strip()]) or len(joined) > limit
    return ("… " if cut else "") + (joined if len(joined) <= limit else joined[-limit:])


def _traceback(job_id: str, log: str, path: str) -> Evidence | None:
    lines = _lines(log)
    starts = [i for i, line in enumerate(lines) if TRACEBACK in line]
    if not starts:
        return None
    # The exception line: the first non-indented line after the last traceback's frames.
    for i in range(starts[-1] + 1, len(lines)):
        if lines[i] and not lines[i].startswith((" ", "\t")):
            return Evidence(kind="log", job_id=job_id, file=path, line=i + 1,
                            text=lines[i].strip()[:300])
    return Evidence(kind="log", job_id=job_id, file=path, line=starts[-1] + 1,
                    text=lines[starts[-1]].strip())


def loss_values(log: str) -> list[tuple[int, float]]:
    """(line number, value) of each loss the log prints.

    One regex pass over the whole log, counting newlines between matches (a per-line loop
    was most of a large run's report time); a match spanning lines is not a printed loss.
    """
    out = []
    no, pos = 1, 0
    for m in LOSS.finditer(log):
        if "\n" in m.group(0) or "\r" in m.group(0):
            continue
        no += log.count("\n", pos, m.start())
        pos = m.start()
        try:
            out.append((no, float(m.group(1))))
        except ValueError:
            continue
    return out


def _diverged(values: list[tuple[int, float]]) -> tuple[int, float, str] | None:
    for no, v in values:
        if math.isnan(v) or math.isinf(v):
            return no, v, f"loss became {v}"
    # The reference: the median of the first three values. Losses near zero (RL objectives
    # often are) make ratios meaningless, so those are only checked for NaN/inf.
    head = sorted(v for _, v in values[:3])
    ref = head[len(head) // 2] if head else 0.0
    if ref < MIN_REFERENCE_LOSS:
        return None
    for no, v in values[3:]:
        if v > DIVERGE_FACTOR * ref:
            return no, v, f"loss rose from {ref:g} to {v:g} (over {DIVERGE_FACTOR:g}x)"
    return None


def _line_of(log: str, pattern: re.Pattern[str]) -> tuple[int, str]:
    hints = _HINTS.get(pattern)
    if hints is not None and not any(h in log.lower() for h in hints):
        return 0, ""  # a cheap substring test first: most logs have no match
    for no, line in enumerate(_lines(log), 1):
        if pattern.search(line):
            return no, line.strip()[:300]
    return 0, ""


def find_failures(d: RunData) -> list[Failure]:
    out: list[Failure] = []
    deadline = aware(d.run.deadline)
    for job in d.jobs:
        log = d.text(job.log_blob_sha) or ""
        at = d.t(job.ended_at or job.started_at)
        cmd = Evidence(kind="command", text=job.command[:300], job_id=job.id)
        status = Evidence(kind="run", job_id=job.id,
                          text=f"job {job.id} {job.state} exit_code={job.exit_code}")
        failed = job.exit_code not in (0, None) or job.state in ("killed", "timeout", "lost")
        if job.end_cause:
            out += _caused(job, log, at, cmd, status, failed)
        else:
            out += _guessed(job, log, at, cmd, status, failed, deadline)
        if (div := _diverged(loss_values(log))) is not None:
            no, _, why = div
            line = _lines(log)[no - 1].strip()
            line = line if len(line) <= 160 else line[:160] + " …"
            out.append(Failure(type="diverged", at_s=at, job_id=job.id, message=why, evidence=[
                Evidence(kind="log", job_id=job.id, file=job.log_path, line=no, text=line), cmd]))
    _refusals_and_grading(d, out)
    accepted = [s for s in d.submissions if s.status != "refused"
                and (deadline is None or aware(s.created_at) <= deadline)]  # type: ignore[operator]
    over = d.run.ended_at is not None or (deadline is not None and d.run.status != "running")
    if not accepted and over:
        out.append(Failure(type="no_submission", at_s=d.t(d.run.ended_at),
                           message="no checkpoint was accepted before the deadline",
                           evidence=[Evidence(kind="run", text=(
                               f"{len(d.submissions)} submissions, none accepted; run ended: "
                               f"{d.run.end_reason or d.run.status}"))]))
    return sorted(out, key=lambda f: (f.at_s is None, f.at_s or 0.0))


def _caused(job: Job, log: str, at: float | None, cmd: Evidence, status: Evidence,
            failed: bool) -> list[Failure]:
    """The failures of a job whose end has a stored cause: that cause, with its evidence."""
    cause = Evidence(kind="run", job_id=job.id,
                     text=f"cause {job.end_cause}: {job.end_evidence or 'no evidence kept'}")
    by_itself = job.end_cause in ("exited", "signal", "limit")
    oom_no, oom_line = _line_of(log, OOM_RAISED) if failed and by_itself else (0, "")
    if job.end_cause == "out_of_memory" or oom_line:
        ev = [cause, cmd, status]
        if oom_line:  # the process said so itself (CUDA, a MemoryError)
            ev.insert(0, Evidence(kind="log", job_id=job.id, file=job.log_path, line=oom_no,
                                  text=oom_line))
        why = job.end_evidence if job.end_cause == "out_of_memory" else oom_line
        return [Failure(type="out_of_memory", at_s=at, job_id=job.id, evidence=ev,
                        message=f"out of memory: {why}"[:300])]
    out: list[Failure] = []
    if failed and by_itself and (tb := _traceback(job.id, log, job.log_path)) is not None:
        out.append(Failure(type="runtime_error", at_s=at, job_id=job.id,
                           message=tb.text, evidence=[tb, cmd, status, cause]))
    elif (kind := CAUSE_FAILURES.get(job.end_cause or "")) is not None:
        detail = f": {job.end_evidence}" if job.end_evidence else ""
        out.append(Failure(type=kind[0], at_s=at, job_id=job.id,  # type: ignore[arg-type]
                           message=f"{kind[1]}{detail}"[:300], evidence=[cause, cmd, status]))
    return out


def _guessed(job: Job, log: str, at: float | None, cmd: Evidence, status: Evidence,
             failed: bool, deadline: datetime | None) -> list[Failure]:
    """A job recorded before causes were: read from its exit code and log, said to be so."""
    out: list[Failure] = []
    killed9 = job.exit_code in (137, -9)
    oom_no, oom_line = _line_of(log, OOM)
    if oom_line or killed9:
        ev = [cmd, status]
        if oom_line:
            ev.insert(0, Evidence(kind="log", job_id=job.id, file=job.log_path, line=oom_no,
                                  text=oom_line))
        out.append(Failure(type="out_of_memory", at_s=at, job_id=job.id, evidence=ev,
                           message="out of memory" + (
                               " (guessed: killed by signal 9, and no cause was recorded)"
                               if killed9 and not oom_line else "")))
    elif failed and (tb := _traceback(job.id, log, job.log_path)) is not None:
        out.append(Failure(type="runtime_error", at_s=at, job_id=job.id,
                           message=tb.text, evidence=[tb, cmd, status]))
    ended = aware(job.ended_at)
    late = deadline is not None and ended is not None and \
        ended >= deadline - timedelta(seconds=1)
    if job.state == "timeout" or (job.state in ("killed", "lost") and late):
        out.append(Failure(type="budget_kill", at_s=at, job_id=job.id, evidence=[cmd, status],
                           message=f"job {job.state} at the end of the budget"))
    return out


def _refusals_and_grading(d: RunData, out: list[Failure]) -> None:
    for sub in d.submissions:
        if sub.status == "refused":
            rule = refusal_rule(sub.error)
            out.append(Failure(type="invalid_checkpoint", at_s=d.t(sub.created_at),
                               submission_id=sub.id, message=f"{sub.path}: {rule}",
                               evidence=[Evidence(kind="submission", submission_id=sub.id,
                                                  text=last_lines(sub.error or "refused"))]))
    for ev in d.evaluations:
        if ev.status == "failed":
            error = last_lines(ev.error or "failed")
            out.append(Failure(type="grader_error", at_s=d.t(ev.ended_at or ev.started_at),
                               submission_id=ev.submission_id,
                               message=f"grading on {ev.split} failed: "
                               f"{error.split(' ⏎ ')[-1][:200]}",
                               evidence=[Evidence(kind="evaluation",
                                                  submission_id=ev.submission_id,
                                                  text=error)]))
