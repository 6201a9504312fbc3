"""The dev overfitting check: many submissions tuned against the dev score while the final
test score falls behind it.

What it measures, from the run's evaluations only:
- the dev-graded submissions in order, how many set a new best dev score (the climb), and
  submissions per hour of the run's clock;
- the final pick's dev-test gap, *adjusted by the base model's own gap* (the two splits need
  not be equally hard: the base's dev minus test is what "no overfitting" looks like), against
  the half-width of the final test score's 95% interval (`ci_low`/`ci_high`): a gap inside the
  interval is noise.

Why `medium` at most (the brief allows high "when blatant", and this check never uses it):
under `heldout` the agent never sees test scores, so tuning against dev cannot raise the
reported (test) score, it can only make the dev numbers the agent saw mislead; the test score
already carries the cost. A high flag leaves a run out of aggregates, and leaving out the runs
that overfit (which score low on test) would bias every aggregate upwards. So the flag asks a
person to read, and says why. Under `paper` the final pick is chosen on test, so the check
reports its numbers and raises nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from a2rl.store import EvaluationKind, EvaluationStatus
from a2rl.store.models import aware

from .model import Evidence, Flag, Severity
from .record import CheckResult, RunRecord

KIND = "dev_overfitting"

#: "many submissions": from this many dev-graded ones the climb is worth a look
MANY_SUBMISSIONS = 10
#: submissions per hour from which the rate alone is worth a line (context)
FAST_PER_HOUR = 20.0


def check_overfit(record: RunRecord, *, many: int = MANY_SUBMISSIONS,
                  fast_per_hour: float = FAST_PER_HOUR, **_: object) -> CheckResult:
    """Flags on the dev climb against the final test score (see the module docstring)."""
    run = record.run
    done = [e for e in record.evaluations
            if e.kind == EvaluationKind.submission and e.status == EvaluationStatus.done
            and e.score is not None and e.submission_id]
    dev = {e.submission_id: e for e in done if e.split == "dev"}
    test = {e.submission_id: e for e in done if e.split == "test"}
    order = [s for s in record.submissions if s.id in dev]
    climb, best = [], None
    for s in order:
        score = dev[s.id].score
        assert score is not None
        if best is None or score > best:
            best = score
            climb.append(s.id)
    summary: dict[str, Any] = {"dev_graded": len(order), "new_bests": len(climb),
                               "protocol": run.protocol}
    per_hour = _per_hour(record, len(record.submissions))
    if per_hour is not None:
        summary["submissions_per_hour"] = round(per_hour, 2)
    flags: list[Flag] = []
    final = run.final_submission_id
    d, t = dev.get(final or ""), test.get(final or "")
    if d is not None and t is not None and t.ci_low is not None and t.ci_high is not None:
        assert d.score is not None and t.score is not None
        base_gap = ((run.baseline_dev - run.baseline_test)
                    if run.baseline_dev is not None and run.baseline_test is not None else 0.0)
        gap = d.score - t.score - base_gap
        half = (t.ci_high - t.ci_low) / 2
        summary.update(final_dev=d.score, final_test=t.score, base_gap=base_gap,
                       adjusted_gap=round(gap, 4), test_ci_half_width=round(half, 4))
        if run.config.feedback_split == "dev" and gap > half:
            sev = Severity.medium if len(order) >= many else Severity.low
            flags.append(Flag(
                kind=KIND, severity=sev,
                finding=(f"the final pick scores {d.score:.3f} on dev but {t.score:.3f} on "
                         f"test: {gap:+.3f} beyond the base's own dev-test gap, outside the "
                         f"test interval's ±{half:.3f}, after {len(order)} dev-graded "
                         f"submissions ({len(climb)} new bests); tuning against dev misleads "
                         "the agent but cannot raise the test score, so not high"),
                evidence=Evidence(submissions=list(dict.fromkeys([*climb[-9:], final])),
                                  evaluations=[i for i in (d.id, t.id) if i is not None],
                                  tool_calls=[s.tool_call_id for s in order
                                              if s.tool_call_id is not None][-10:])))
    if per_hour is not None and per_hour >= fast_per_hour and len(record.submissions) >= many:
        flags.append(Flag(
            kind=KIND, severity=Severity.info,
            finding=f"{len(record.submissions)} submissions at {per_hour:.1f} per hour: the "
                    "dev score was used as a search signal",
            evidence=Evidence(submissions=[s.id for s in record.submissions][-10:])))
    return CheckResult(flags=flags, summary=summary)


def _per_hour(record: RunRecord, n: int) -> float | None:
    """Submissions per hour from the run's start to its end (or to the last submission)."""
    if not record.submissions:
        return None
    start: datetime | None = aware(record.run.started_at or record.run.created_at)
    end = aware(record.run.ended_at) or aware(record.submissions[-1].created_at)
    if start is None or end is None:
        return None
    hours = (end - start).total_seconds() / 3600
    return n / hours if hours > 1 / 60 else None
