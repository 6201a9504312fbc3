"""An optional short narrative of a run, written by an LLM over the computed report.

`a2rl report RUN --narrative` builds the report first, then asks an OpenAI-compatible chat
completions endpoint for prose over a condensed copy of it (no per-call timeline, no diffs, so
that a 10,000-call run still fits a prompt). The computed fields never depend on the answer:
`add_narrative` only sets `Report.narrative`, which records the model and endpoint and is shown
as generated in every format. Any failure (not configured, transport error, HTTP error, an
empty answer) becomes a `Narrative` without text and a one-line reason instead of an exception.
The request goes through the one client `a2rl.llm.ChatClient`, under its retry policy (here one
retry by default: a report should not wait long for prose).

Endpoint: `narrative.base_url`, `narrative.model` and `narrative.api_key_env`, each falling back
to the judge's setting (`judge.base_url`, ...). With `narrative.base_url` set, a missing key
sends no Authorization header (local servers); falling back to the judge's endpoint (a hosted
API by default) without its key counts as not configured, so nothing is sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from a2rl.llm import ChatClient, Endpoint, Reply, RequestFailure, RetryPolicy
from a2rl.settings import Settings

from .schema import Narrative, Report

PROMPT_VERSION = "narrative.1"
MAX_INPUT_CHARS = 60_000
SYSTEM_PROMPT = (
    "You summarize one run of an LLM agent that was asked to post-train a small base model "
    "within a time budget. You are given the run's computed report as JSON. Write a short "
    "narrative (at most 200 words, plain prose, no headings) for a researcher: what the agent "
    "tried and in what order, which training route it took, where it failed and why, and how "
    "the final score compares with the baseline (say when the improvement is within noise). "
    "Use only facts in the JSON; cite its numbers as given; do not speculate."
)


def narrative_endpoint(settings: Settings) -> Endpoint:
    """`narrative_*`, each falling back to the judge's setting."""
    return Endpoint(base_url=settings.narrative.base_url or settings.judge.base_url,
                    model=settings.narrative.model or settings.judge.model,
                    api_key_env=settings.narrative.api_key_env or settings.judge.api_key_env)


def condensed(report: Report) -> dict[str, Any]:
    """The report without what is bulky and adds little to prose: per-call events, diffs."""
    doc = report.model_dump(mode="json", exclude={"narrative", "generated_at"})
    t = doc.pop("timeline")
    doc["timeline"] = {"tool_calls": len(t["tool_calls"]), "jobs": t["jobs"][:50],
                       "submissions": t["submissions"], "idle_gaps": t["idle_gaps"][:20],
                       "grading_s": t["grading_s"], "idle_s": t["idle_s"], "end_s": t["end_s"]}
    doc["code_history"] = [{"submission_id": c["submission_id"],
                            "changes": [f"{x['change']}: {x['path']}" for x in c["changes"]]}
                           for c in doc["code_history"]]
    for section in ("routes", "failures"):
        for item in doc[section]:
            item["evidence"] = item["evidence"][:5]
    return doc


def _prompt(report: Report) -> str:
    text = json.dumps(condensed(report), separators=(",", ":"))
    if len(text) > MAX_INPUT_CHARS:
        text = text[:MAX_INPUT_CHARS] + " ...(cut)"
    return f"The run's report:\n{text}"


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def write_narrative(report: Report, settings: Settings, environ: Mapping[str, str] | None = None,
                    retries: int = 1, backoff_s: float = 1.0) -> Narrative:
    """Ask the configured endpoint for a narrative of `report`; never raises for its failures."""
    ep = narrative_endpoint(settings)
    base = {"model": ep.model or None, "endpoint": ep.origin if ep.base_url else None,
            "prompt_version": PROMPT_VERSION}
    key = ep.api_key(environ)
    if not ep.base_url or not ep.model:
        return Narrative(status="not_configured", **base,
                         reason="no endpoint or model: set narrative_base_url and "
                                "narrative_model (or the judge's)")
    if not key and not settings.narrative.base_url:
        # The judge's endpoint (by default a hosted API) without its key: don't even try.
        return Narrative(status="not_configured", **base,
                         reason=f"no key in ${ep.api_key_env} for the judge's endpoint "
                                f"{ep.origin}; set it, or narrative_base_url for a local server")
    body = {"model": ep.model, "temperature": 0.2, "max_tokens": 600,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": _prompt(report)}]}
    policy = RetryPolicy(max_retries=retries, backoff_s=backoff_s,
                         timeout_s=settings.narrative.timeout_s)
    client = ChatClient(ep, policy, api_key=key)
    try:
        outcome = client.complete(body)
    finally:
        client.close()
    if outcome.value is None:
        assert outcome.failure is not None
        return Narrative(status="failed", **base, reason=_one_line(_why(outcome.failure, ep)))
    return _from_reply(outcome.value, ep, base)


def _why(failure: RequestFailure, ep: Endpoint) -> str:
    if failure.kind == "http":
        hint = f" (is {ep.api_key_env} set?)" if failure.status in (401, 403) else ""
        return f"HTTP {failure.status} from {ep.origin}{hint}: {failure.detail}"
    if failure.kind == "transport":  # "ConnectError from http://host:port: ..."
        name, _, message = failure.detail.partition(": ")
        return f"{name} from {ep.origin}: {message}"
    return f"{ep.origin} answered no chat completion: {failure.detail}"


def _from_reply(reply: Reply, ep: Endpoint, base: dict[str, Any]) -> Narrative:
    text = reply.text.strip()
    if not text:
        return Narrative(status="failed", **base, reason=f"{ep.origin} answered no text")
    model = reply.data.get("model")
    return Narrative(status="generated",
                     **{**base, "model": model if isinstance(model, str) and model else ep.model},
                     text=text, generated_at=datetime.now(UTC).isoformat())


def add_narrative(report: Report, settings: Settings,
                  environ: Mapping[str, str] | None = None) -> Report:
    """A copy of `report` with its `narrative` set; the computed fields are left as they are."""
    return report.model_copy(update={"narrative": write_narrative(report, settings, environ)})
