"""A run as an ATIF trajectory: Harbor's Agent Trajectory Interchange Format (RFC 0001,
`docs/rfcs/0001-trajectory-format.md` in harbor-framework/harbor), version ATIF-v1.7.

The models below are the part of the format a2rl writes, field for field as Harbor's own
pydantic models (`harbor.models.trajectories`) declare it, unknown fields forbidden like
theirs. Our own rather than Harbor's: Harbor needs Python 3.12 and brings a large dependency
tree; the tests validate what this module writes with Harbor's validator
(`python -m harbor.utils.trajectory_validator`, run from its published wheel). v1.7 because it
is the first version with `extra` on tool calls and observation results.

The mapping: one agent step per tool call, with the server's recorded result as its
observation and the text and reasoning the agent produced before it as its message (a parsed
transcript does not say which calls one model response made, so two calls of one response are
two steps); text no call follows (the agent's last words) is an agent step of its own; the
user's and the system's messages are their own steps, and so are the agent process's events
(session start, its result, errors: `system` steps, `extra.a2rl_kind` saying which); the task
prompt a2rl gave the agent is the first step when the transcript does not carry it. Token counts are
the transcript's totals (`usage.py`) in `final_metrics`. Submissions, scores, the score
trajectory and the cheating audit go in the trajectory's `extra`, under keys named as in
a2rl's report (analysis/report.schema.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from a2rl import __version__

from ..web.transcripts import Message
from .record import RunRecord, iso, tool_call_ids

SCHEMA_VERSION = "ATIF-v1.7"


class _Atif(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifAgent(_Atif):
    name: str
    version: str
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class AtifToolCall(_Atif):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class AtifObservationResult(_Atif):
    source_call_id: str | None = None
    content: str | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Atif):
    results: list[AtifObservationResult]


class AtifStep(_Atif):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    message: str
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class AtifTrajectory(_Atif):
    schema_version: Literal["ATIF-v1.7"] = SCHEMA_VERSION
    session_id: str
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    extra: dict[str, Any] | None = None


NOTES = ("Exported by a2rl from one run. Agent steps follow the agent's transcript where it has "
         "one; every tool call is the a2rl server's record of it (arguments as received, the "
         "result's first 2,000 characters); calls the transcript does not show are placed where "
         "they fall. Token counts are the transcript's totals. extra.summary, "
         "extra.submissions, extra.score_trajectory and extra.audit follow a2rl's report schema.")


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


class _Steps:
    """Builds the step list: the agent's text and reasoning wait for its next tool call, whose
    step they become; what no call follows is a step of its own."""

    def __init__(self, rec: RunRecord) -> None:
        self.rec, self.steps = rec, list[AtifStep]()
        self.text: list[str] = []
        self.reasoning: list[str] = []

    def add(self, **fields: Any) -> AtifStep:
        step = AtifStep(step_id=len(self.steps) + 1, **fields)
        self.steps.append(step)
        return step

    def said(self) -> dict[str, Any]:
        out = {"message": "\n\n".join(self.text),
               "reasoning_content": "\n\n".join(self.reasoning) or None}
        self.text, self.reasoning = [], []
        return out

    def flush(self) -> None:
        if self.text or self.reasoning:
            self.add(source="agent", **self.said())

    def tool(self, m: Message, key: str) -> None:
        row = self.rec.calls.get(m.call_id) if m.call_id is not None else None
        self.add(source="agent", **self.said(),
                 timestamp=iso(row.started_at) if row is not None else None,
                 tool_calls=[AtifToolCall(
                     tool_call_id=key, function_name=m.tool or "unknown",
                     arguments=_arguments(m.arguments),
                     extra={"recorded": row is not None, "seq": m.seq,
                            "duration_ms": m.duration_ms})],
                 observation=AtifObservation(results=[AtifObservationResult(
                     source_call_id=key, content=m.result or "",
                     extra={"is_error": m.is_error})]))

    def other(self, m: Message) -> None:
        if m.role == "assistant":
            self.text.append(m.text)
        elif m.role == "thinking":
            self.reasoning.append(m.text)
        else:
            self.flush()
            if m.role in ("user", "system"):
                self.add(source=m.role, message=m.text)
            else:  # the agent process's own events: session info, its final result, errors
                self.add(source="system", message=m.text, extra={"a2rl_kind": m.role})


def build_steps(rec: RunRecord) -> list[AtifStep]:
    b = _Steps(rec)
    if rec.prompt and not any(m.role == "user" for m in rec.messages):
        b.add(source="user", message=rec.prompt,
              extra={"a2rl_kind": "task_prompt", "note": "the prompt a2rl gave the agent; its "
                     "transcript does not carry it"})
    for m, key in zip(rec.messages, tool_call_ids(rec.messages), strict=True):
        if key is not None:
            b.tool(m, key)
        else:
            b.other(m)
    b.flush()
    if not b.steps:
        b.add(source="system", message="The agent made no tool call and left no transcript.",
              extra={"a2rl_kind": "empty"})
    return b.steps


def to_atif(rec: RunRecord) -> AtifTrajectory:
    """The run's trajectory (pure)."""
    run, report, usage = rec.run, rec.report, rec.usage
    steps = build_steps(rec)
    calls = [c for s in steps for c in s.tool_calls or []]
    return AtifTrajectory(
        session_id=run.id,
        agent=AtifAgent(name=run.agent or "unknown", version=run.agent_version or "unknown",
                        model_name=run.driver_model,
                        extra={"agent_status": run.agent_status,
                               "agent_exit_code": run.agent_exit_code,
                               "transcript_format": rec.transcript_format}),
        steps=steps, notes=NOTES,
        final_metrics=AtifFinalMetrics(
            total_prompt_tokens=usage.prompt_tokens if usage else None,
            total_completion_tokens=usage.completion_tokens if usage else None,
            total_cached_tokens=usage.cached_tokens if usage else None,
            total_cost_usd=usage.cost_usd if usage else None,
            total_steps=len(steps),
            extra={"tool_calls": len(calls), "recorded_tool_calls": len(rec.calls),
                   "usage_source": usage.source if usage else None}),
        extra={"exported_by": f"a2rl {__version__}",
               "report_schema_version": report.schema_version,
               "summary": report.summary.model_dump(mode="json"),
               "submissions": [s.model_dump(mode="json") for s in rec.submissions],
               "score_trajectory": report.trajectory.model_dump(mode="json"),
               "audit": report.audit.model_dump(mode="json") if report.audit else None,
               "metrics": report.metrics.model_dump(mode="json")})


def write_atif(rec: RunRecord, path: Path) -> dict[str, int]:
    """Write the trajectory as JSON to `path`; what it holds, counted."""
    traj = to_atif(rec)
    path.write_text(json.dumps(traj.model_dump(mode="json", exclude_none=True), indent=2) + "\n")
    return {"steps": len(traj.steps),
            "tool_calls": sum(len(s.tool_calls or []) for s in traj.steps),
            "submissions": len(rec.submissions)}
