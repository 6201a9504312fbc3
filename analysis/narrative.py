"""An optional short narrative of a run, written by an LLM over the computed report.

`a2rl report RUN --narrative` builds the report first, then asks an OpenAI-compatible chat
completions endpoint for prose over a condensed copy of it (no per-call timeline, no diffs, so
that a 10,000-call run still fits a prompt). The computed fields never depend on the answer:
`add_narrative` only sets `Report.narrative`, which records the model and endpoint and is shown
as generated in every format. Any failure (not configured, transport error, HTTP error, an
empty answer) becomes a `Narrative` without text and a one-line reason instead of an exception.

Endpoint: `narrative_base_url`, `narrative_model` and `narrative_api_key_env`, each falling back
to the judge's setting (`judge_base_url`, ...). With `narrative_base_url` set, a missing key
sends no Authorization header (local servers); falling back to the judge's endpoint (a hosted
API by default) without its key counts as not configured, so nothing is sent.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from a2rl.settings import Settings

from .schema import Narrative, Report

PROMPT_VERSION = "narrative.1"
MAX_INPUT_CHARS = 60_000
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
SYSTEM_PROMPT = (
    "You summarize one run of an LLM agent that was asked to post-train a small base model "
    "within a time budget. You are given the run's computed report as JSON. Write a short "
    "narrative (at most 200 words, plain prose, no headings) for a researcher: what the agent "
    "tried and in what order, which training route it took, where it failed and why, and how "
    "the final score compares with the baseline (say when the improvement is within noise). "
    "Use only facts in the JSON; cite its numbers as given; do not speculate."
)


class _Message(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _Message


class _ChatResponse(BaseModel):
    model: str | None = None
    choices: list[_Choice]


class Endpoint(BaseModel):
    base_url: str
    model: str
    api_key_env: str
    timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoint:
        return cls(base_url=settings.narrative_base_url or settings.judge_base_url,
                   model=settings.narrative_model or settings.judge_model,
                   api_key_env=settings.narrative_api_key_env or settings.judge_api_key_env,
                   timeout_s=settings.narrative_timeout_s)

    @property
    def origin(self) -> str:
        """scheme://host[:port]: what the report records (never a path, query or credential)."""
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.hostname or ''}" + (
            f":{parts.port}" if parts.port else "")


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
    ep = Endpoint.from_settings(settings)
    base = {"model": ep.model or None, "endpoint": ep.origin if ep.base_url else None,
            "prompt_version": PROMPT_VERSION}
    env = os.environ if environ is None else environ
    key = env.get(ep.api_key_env, "")
    if not ep.base_url or not ep.model:
        return Narrative(status="not_configured", **base,
                         reason="no endpoint or model: set narrative_base_url and "
                                "narrative_model (or the judge's)")
    if not key and not settings.narrative_base_url:
        # The judge's endpoint (by default a hosted API) without its key: don't even try.
        return Narrative(status="not_configured", **base,
                         reason=f"no key in ${ep.api_key_env} for the judge's endpoint "
                                f"{ep.origin}; set it, or narrative_base_url for a local server")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": ep.model, "temperature": 0.2, "max_tokens": 600,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": _prompt(report)}]}
    url = ep.base_url.rstrip("/") + "/chat/completions"
    why = ""
    for attempt in range(retries + 1):
        try:
            resp = httpx.post(url, json=body, headers=headers, timeout=ep.timeout_s)
        except httpx.HTTPError as exc:
            why = f"{type(exc).__name__} from {ep.origin}: {exc}"
        else:
            if resp.status_code == 200:
                return _from_response(resp, ep, base)
            hint = f" (is {ep.api_key_env} set?)" if resp.status_code in (401, 403) else ""
            why = f"HTTP {resp.status_code} from {ep.origin}{hint}: {resp.text}"
            if resp.status_code not in RETRY_STATUSES:
                break
        if attempt < retries:
            time.sleep(backoff_s * 2 ** attempt)
    return Narrative(status="failed", **base, reason=_one_line(why))


def _from_response(resp: httpx.Response, ep: Endpoint, base: dict[str, Any]) -> Narrative:
    try:
        answer = _ChatResponse.model_validate(resp.json())
    except (ValueError, ValidationError) as exc:
        return Narrative(status="failed", **base,
                         reason=_one_line(f"{ep.origin} answered no chat completion: {exc}"))
    text = (answer.choices[0].message.content or "").strip() if answer.choices else ""
    if not text:
        return Narrative(status="failed", **base, reason=f"{ep.origin} answered no text")
    return Narrative(status="generated", **{**base, "model": answer.model or ep.model},
                     text=text, generated_at=datetime.now(UTC).isoformat())


def add_narrative(report: Report, settings: Settings,
                  environ: Mapping[str, str] | None = None) -> Report:
    """A copy of `report` with its `narrative` set; the computed fields are left as they are."""
    return report.model_copy(update={"narrative": write_narrative(report, settings, environ)})
