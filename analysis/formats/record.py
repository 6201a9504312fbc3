"""One finished run as the format writers read it: the run, its report, its conversation and
the driver model's token counts. Read once from the store; the writers are pure functions of it.

The conversation is the agent's transcript parsed and merged with the server's recorded tool
calls (`conversation`, the one place this package reads a transcript), or the recorded calls
alone for an agent without one (the scripted reference agent, an agent that connected by
itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from a2rl.clients.prompt import task_prompt
from a2rl.store import Run, Store, ToolCall, aware

from ..report import build_report
from ..schema import Report
from ..web import queries
from ..web.transcripts import Message, attach_calls, from_call, parse
from .usage import Usage, transcript_usage


class NotFinishedError(RuntimeError):
    """The run is still going: its record would change under the export."""


@dataclass
class RunRecord:
    run: Run
    report: Report
    #: the transcript's format (claude-code, codex, gemini-cli, llm, text) or "none"
    transcript_format: str
    messages: list[Message]
    #: the server's calls by store id, for what a `Message` does not carry (its start time)
    calls: dict[int, ToolCall]
    usage: Usage | None
    submissions: list[queries.SubmissionView]
    #: what the orchestrator told the agent (`task_prompt`, rebuilt from the run row); None for
    #: a run whose agent no orchestrator launched (it connected by itself: `a2rl new`)
    prompt: str | None

    @property
    def run_id(self) -> str:
        return self.run.id


def conversation(transcript: bytes | None, calls: list[ToolCall],
                 agent: str | None = None) -> tuple[str, list[Message]]:
    """(format, messages): the transcript's messages with the recorded calls attached, or the
    recorded calls alone. The run's `agent` parses it first (its connector owns the format)."""
    if not transcript:
        return "none", [from_call(c) for c in calls]
    fmt, msgs = parse(transcript, agent)
    return fmt, attach_calls(msgs, calls)


def tool_call_ids(messages: list[Message]) -> list[str | None]:
    """An id for each tool message, unique within the run (None for other messages): the
    agent's own id for the call where the transcript gives one, else the server's number."""
    out: list[str | None] = []
    used: set[str] = set()
    for m in messages:
        if m.role != "tool":
            out.append(None)
            continue
        base = m.call_key or f"a2rl-call-{m.seq or m.call_id or len(used) + 1}"
        key, n = base, 1
        while key in used:
            n += 1
            key = f"{base}-{n}"
        used.add(key)
        out.append(key)
    return out


def iso(dt: datetime | None) -> str | None:
    """A stored time as an ISO 8601 string with its UTC offset."""
    dt = aware(dt)
    return dt.isoformat() if dt is not None else None


def read_record(store: Store, run_id: str) -> RunRecord:
    """The record of a finished run. Raises KeyError for an unknown run and NotFinishedError
    for one that has not finished."""
    run = queries.get_run(store, run_id)
    if run is None:
        raise KeyError(f"run {run_id!r} does not exist")
    if run.status != "finished":
        raise NotFinishedError(f"run {run_id} is {run.status}, not finished: end it first "
                               f"(a2rl finish {run_id})")
    calls = queries.calls(store, run_id)
    transcript = queries.blob(store, run.agent_transcript_sha)
    fmt, messages = conversation(transcript, calls, run.agent)
    return RunRecord(
        run=run, report=build_report(store, run_id), transcript_format=fmt, messages=messages,
        calls={c.id: c for c in calls if c.id is not None},
        usage=transcript_usage(transcript, fmt) if transcript else None,
        submissions=queries.submissions(store, run),
        prompt=task_prompt(run) if run.agent_status is not None else None)
