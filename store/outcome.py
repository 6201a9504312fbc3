"""What a run's row says about how it ended and what it scored, derived once for every view.

`end_kind`: the run's `EndKind`, as stored when it closed (schema v6) or, for a row closed
before, derived from what the row holds (its status, end reason, agent status and times), so
old stores read the same way. `is_result`: whether the run counts in comparisons and fleet
summaries by default. `shown_final`: the final score a view shows, None with the reason for a
run that has no final submission. Pure functions over `Run` rows: no queries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .models import Run, aware
from .status import END_KIND_WORDS, RESULT_KINDS, AgentStatus, EndKind, RunKind, RunStatus

#: Words of an `end_reason` that name its kind, most specific first: the orchestrator writes
#: "agent finished", "budget exhausted", "agent crashed (exit N)", "interrupted"; signal
#: handling writes the signal's name; a fleet writes why its node was lost. A crash at the
#: deadline is a crash, an interrupt past it an interrupt: hence the order.
_REASON_WORDS: tuple[tuple[tuple[str, ...], EndKind], ...] = (
    (("interrupt", "sigint", "sigterm", "sighup", "signal"), EndKind.interrupted),
    (("crash",), EndKind.agent_crashed),
    (("budget", "deadline"), EndKind.budget_exhausted),
    (("lost", "abandon", "infrastructure"), EndKind.infrastructure),
    (("agent finished",), EndKind.agent_finished),
)

_BY_AGENT = {AgentStatus.finished: EndKind.agent_finished,
             AgentStatus.budget: EndKind.budget_exhausted,
             AgentStatus.crashed: EndKind.agent_crashed,
             AgentStatus.interrupted: EndKind.interrupted}


def derive_end_kind(run: Run) -> EndKind | None:
    """The kind of `run`'s end from its row, ignoring a stored `end_kind` (what `RunClock.close`
    stores, and what a row closed before v6 reads as); None while the run has not ended."""
    if run.ended_at is None and run.status not in (RunStatus.finished, RunStatus.failed):
        return None
    if run.status == RunStatus.failed:  # closed by a fleet that lost the run's node
        return EndKind.infrastructure
    reason = (run.end_reason or "").lower()
    for words, kind in _REASON_WORDS:
        if any(w in reason for w in words):
            return kind
    if run.agent_status in _BY_AGENT:
        return _BY_AGENT[AgentStatus(run.agent_status)]
    # `a2rl finish` on a run made with `a2rl create`: its agent runs outside a2rl and only
    # its operator sees it stop; closed at or past the deadline, the budget ended it.
    deadline, ended = aware(run.deadline), aware(run.ended_at)
    if deadline is not None and ended is not None and ended >= deadline:
        return EndKind.budget_exhausted
    return EndKind.agent_finished


def end_kind(run: Run) -> EndKind | None:
    """The stored kind, or the derived one for a row that has none."""
    if run.end_kind:
        try:
            return EndKind(run.end_kind)
        except ValueError:  # a kind a newer a2rl wrote: read what the row says instead
            pass
    return derive_end_kind(run)


def is_result(run: Run) -> bool:
    """Whether `run` is a result: it ended as a result kind (the agent's own end or the
    budget's), was finalized, and has a baseline test score to measure its final one against.
    A run without a submission is a result (the agent had its chance and made none): it counts
    with no final score and no improvement. A replay (`a2rl replay`) is never an agent's
    result: it is counted apart, everywhere."""
    return (end_kind(run) in RESULT_KINDS and run.status == RunStatus.finished
            and run.baseline_test is not None and (run.kind or RunKind.agent) == RunKind.agent)


def not_result_reason(run: Run) -> str:
    """Why `run` is not a result, in a few words ("interrupted", "no baseline")."""
    if (run.kind or RunKind.agent) == RunKind.replay:
        return "replay (a2rl replay)"
    kind = end_kind(run)
    if kind is None:
        return "still running"
    if kind not in RESULT_KINDS:
        return END_KIND_WORDS[kind]
    if run.status != RunStatus.finished:
        return "not finalized"
    return "no baseline"


def not_counted_line(runs: Iterable[Run]) -> str | None:
    """"not counted: 3 interrupted, 1 agent crashed" for the runs given (those left out of a
    comparison), most frequent first; None when there are none."""
    counts = Counter(not_result_reason(r) for r in runs)
    if not counts:
        return None
    return "not counted: " + ", ".join(f"{n} {why}" for why, n in counts.most_common())


def shown_final(run: Run, submissions: int) -> tuple[float | None, str | None]:
    """(final test score, None), or (None, why there is none).

    The store's `final_score` of a run without a final submission holds the baseline's test
    score (the model it ended with, `server.run.finalize`); no view shows that as the run's
    final score: with no submission there is no final score and no improvement (the rule of
    PostTrainBench's harness)."""
    if run.final_submission_id is not None:
        return run.final_score, None
    if run.status != RunStatus.finished:
        return None, "not finalized"
    if not submissions:
        return None, "no submission"
    return None, "no graded submission"


#: How a view names the agent of a run made with `a2rl create`: an agent that connected by
#: itself, which a2rl neither started nor knows the name of.
EXTERNAL_AGENT = "external"


def agent_label(agent: str | None, kind: str | None = "agent") -> str:
    """The agent a table shows for a run: its name, "external" for a run made with `a2rl
    create`, "replay" for a replay of another run's recipe (`Run.kind`)."""
    if agent:
        return agent
    return "replay" if kind == "replay" else EXTERNAL_AGENT


def end_kind_words(kind: EndKind | str | None) -> str:
    """A kind as a few words for a table ("agent crashed"); "-" for none."""
    return END_KIND_WORDS.get(EndKind(kind), str(kind)) if kind else "-"
