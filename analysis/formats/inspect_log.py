"""A run as an Inspect AI eval log (`inspect_ai.log.EvalLog`), written by inspect_ai's own
writer (`write_eval_log`), so that `inspect view` and Inspect's analysis tools open a2rl runs.

One log per run, holding one sample: the run. Its input is the task prompt a2rl gave the agent,
its messages the conversation (the transcript merged with the server's recorded calls, as in
the ATIF export: each tool call an assistant message carrying the text said before it, its
recorded result a tool message), its score
`final_test`, the test score of the run's final submission (none when no submission was
scored, which Inspect counts as an unscored sample). The run's summary, submissions, score
trajectory and audit are in the sample's metadata, under the keys of a2rl's report.

The log is marked untrusted (`ViewerConfig(trust_content=False)`): what an agent wrote is an
adversary's text here, so the viewer shows it as plain text (no markdown, links or media, and
invisible or direction-changing characters made visible) rather than rendering it.

inspect-ai is an optional extra (`pip install 'a2rl-bench[inspect]'`; `make demo` and
`make test` install it with the `dev` extra): it brings about 45 packages nothing else needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl import __version__

from .record import RunRecord, iso, tool_call_ids

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog
    from inspect_ai.model import ChatMessage

SCORER = "final_test"
INSTALL = "pip install 'a2rl-bench[inspect]'"


class InspectUnavailable(RuntimeError):
    """inspect-ai is not installed; the message says how to install it."""


def _inspect() -> None:
    try:
        import inspect_ai  # noqa: F401
    except ImportError as exc:
        raise InspectUnavailable(f"--format inspect needs inspect-ai, which is not installed: "
                                 f"{INSTALL}") from exc


def _messages(rec: RunRecord) -> tuple[list[ChatMessage], list[dict[str, str]]]:
    """The conversation as Inspect chat messages, and the agent process's own events
    (session info, its final result, errors), which Inspect has no message for."""
    # inspect-ai is an optional extra (see above): imported where a log is made
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )
    from inspect_ai.tool import ToolCall, ToolCallError

    out: list[ChatMessage] = []
    events: list[dict[str, str]] = []
    if rec.prompt and not any(m.role == "user" for m in rec.messages):
        out.append(ChatMessageUser(content=rec.prompt, source="input"))
    said: list[Any] = []  # the agent's text and reasoning since its last tool call

    def assistant(**fields: Any) -> None:
        nonlocal said
        content = said[0].text if len(said) == 1 and isinstance(said[0], ContentText) else said
        out.append(ChatMessageAssistant(content=content or "", model=rec.run.driver_model,
                                        source="generate", **fields))
        said = []

    for m, key in zip(rec.messages, tool_call_ids(rec.messages), strict=True):
        if key is not None:
            arguments = m.arguments if isinstance(m.arguments, dict) else (
                {} if m.arguments is None else {"input": m.arguments})
            assistant(tool_calls=[ToolCall(id=key, function=m.tool or "unknown",
                                           arguments=arguments)])
            out.append(ChatMessageTool(
                content=m.result or "", tool_call_id=key, function=m.tool,
                error=ToolCallError("unknown", m.result or "error") if m.is_error else None,
                metadata={"a2rl_call": m.seq, "recorded": m.call_id is not None,
                          "duration_ms": m.duration_ms}))
        elif m.role == "assistant":
            said.append(ContentText(text=m.text))
        elif m.role == "thinking":
            said.append(ContentReasoning(reasoning=m.text))
        else:
            if said:
                assistant()
            if m.role == "user":
                out.append(ChatMessageUser(content=m.text))
            elif m.role == "system":
                out.append(ChatMessageSystem(content=m.text))
            else:
                events.append({"kind": m.role, "text": m.text})
    if said:
        assistant()
    return out, events


def to_eval_log(rec: RunRecord) -> EvalLog:
    """The run's eval log (pure, given inspect-ai)."""
    _inspect()
    # inspect-ai is an optional extra (see above): imported where a log is made
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalPlan,
        EvalPlanStep,
        EvalResults,
        EvalSample,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ChatMessageAssistant, ModelOutput, ModelUsage
    from inspect_ai.scorer import Score
    from inspect_ai.viewer import ViewerConfig

    run, report, usage = rec.run, rec.report, rec.usage
    summary = report.summary
    model = run.driver_model or f"a2rl/{run.agent or 'unknown-agent'}"
    messages, events = _messages(rec)
    last = next((m for m in reversed(messages) if isinstance(m, ChatMessageAssistant)
                 and m.text.strip()), None)
    model_usage = {model: ModelUsage(
        input_tokens=usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        input_tokens_cache_read=usage.cached_tokens or None,
        input_tokens_cache_write=usage.cache_write_tokens or None,
        total_cost=usage.cost_usd)} if usage else {}
    final = summary.final_test
    imp = summary.improvement
    scores = None if final is None else {SCORER: Score(
        value=final, answer=summary.final_submission_id,
        explanation=(f"test score of the final submission {summary.final_submission_id}; "
                     f"the base model's {summary.baseline_test}" + (
                         f"; improvement {imp.estimate:+.4f} (95% interval {imp.low:+.4f} to "
                         f"{imp.high:+.4f})" if imp else "")),
        metadata={"baseline_test": summary.baseline_test, "best_dev": summary.best_dev,
                  "improvement": imp.model_dump(mode="json") if imp else None})}
    started, ended = iso(run.started_at or run.created_at), iso(run.ended_at)
    sample = EvalSample(
        id=run.id, epoch=1, input=rec.prompt or f"a2rl run of task {run.task_id}",
        target="", messages=messages,
        output=ModelOutput.from_content(model, last.text if last else ""),
        scores=scores, model_usage=model_usage, started_at=started, completed_at=ended,
        total_time=summary.budget_used_s, uuid=run.id,
        metadata={"summary": summary.model_dump(mode="json"),
                  "submissions": [s.model_dump(mode="json") for s in rec.submissions],
                  "score_trajectory": report.trajectory.model_dump(mode="json"),
                  "audit": report.audit.model_dump(mode="json") if report.audit else None,
                  "agent_events": events, "transcript_format": rec.transcript_format,
                  "usage_source": usage.source if usage else None})
    results = EvalResults(
        total_samples=1, completed_samples=1,
        scores=[] if final is None else [EvalScore(
            name=SCORER, scorer=SCORER, scored_samples=1, unscored_samples=0,
            metrics={"mean": EvalMetric(name="mean", value=final)})])
    plan_params: dict[str, Any] = {"budget_s": run.budget_s, "protocol": run.protocol,
                                   "profile": run.profile}
    return EvalLog(
        status="success",
        eval=EvalSpec(
            eval_id=run.id, run_id=run.id, created=iso(run.created_at) or "",
            task=f"a2rl/{run.task_id}", task_id=run.task_id, task_args=run.task_options,
            solver=run.agent, dataset=EvalDataset(name=run.task_id, samples=1,
                                                  sample_ids=[run.id]),
            model=model, config=EvalConfig(), packages={"a2rl": __version__},
            viewer=ViewerConfig(trust_content=False),
            metadata={"a2rl_run": run.id, "agent": run.agent,
                      "agent_version": run.agent_version, "base_model": run.base_model,
                      "exported_by": f"a2rl {__version__}"}),
        plan=EvalPlan(steps=[EvalPlanStep(solver=run.agent or "unknown", params=plan_params)]),
        results=results,
        stats=EvalStats(started_at=started or "", completed_at=ended or "",
                        model_usage=model_usage),
        samples=[sample])


def write_inspect(rec: RunRecord, path: Path) -> dict[str, int]:
    """Write the eval log with inspect_ai's writer (`.eval`, or `.json` by the name)."""
    log = to_eval_log(rec)  # first: without inspect-ai, InspectUnavailable says how to get it
    from inspect_ai.log import write_eval_log  # the optional extra (see above)

    write_eval_log(log, str(path))
    sample = (log.samples or [])[0]
    return {"messages": len(sample.messages),
            "tool_calls": sum(len(getattr(m, "tool_calls", None) or []) for m in sample.messages),
            "submissions": len(rec.submissions)}
