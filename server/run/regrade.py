"""`a2rl regrade`: a finished run's final checkpoint and its base model scored again on the
test split with today's grader code, under the run's frozen evaluation config (or under
another profile, a second reading); both records kept.

Why: when a grader is fixed, every earlier run keeps the score the old code gave it. A regrade
re-scores the kept copy of the final submission and the base model, in grader processes as
every evaluation is (untrusted weights load only there), and stores the new evaluations beside
the old ones with a `Regrade` row saying when, why, under which grader, and which items
changed verdict. Under the run's own config the new evaluations become current: the replaced
final evaluation names its successor, the run's final score, baseline and baseline pointer
follow, and every view (show, report, compare) reads the current ones and says they were
re-graded. A second reading under another profile is stored and shown, never current.

What cannot be regraded says so in one line and changes nothing: a run still live, a run with
no final submission, a final copy that was removed (`a2rl gc`), a base model that is not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import a2rl
from a2rl.grading import device_lock
from a2rl.grading.evaluate import GRADER_VERSION
from a2rl.grading.frozen import CannotHonour, honour, of_run
from a2rl.grading.queue import run_worker, spec_for
from a2rl.grading.recorded import scores_of
from a2rl.settings import Settings
from a2rl.store import (
    Evaluation,
    EvaluationKind,
    Regrade,
    Run,
    Store,
    Submission,
    utcnow,
)
from a2rl.store.queries import (
    NotFinished,
    baseline_evaluation,
    current_final_evaluation,
    finished_final,
)
from a2rl.store.records import evaluations, runs
from a2rl.store.records.evaluations import NewEvaluation

#: how long one evaluation of a regrade may take before its grader process is killed
TIMEOUT_S = 1800.0


class CannotRegrade(RuntimeError):
    """This run cannot be regraded (one line: why); nothing was changed."""


@dataclass(frozen=True)
class RegradeOutcome:
    """A regrade done: its row, and the old and new evaluations of the final checkpoint and
    of the base model (the CLI prints them and pairs them into intervals)."""

    regrade: Regrade
    old_final: Evaluation
    new_final: Evaluation
    old_baseline: Evaluation | None
    new_baseline: Evaluation


def changed_verdicts(which: str, old: list[dict[str, Any]], new: list[dict[str, Any]],
                     ) -> list[dict[str, Any]]:
    """The items of `new` whose verdict (`correct`) differs from `old`'s by id, and the items
    only one of them scored (pure)."""
    before = {str(it.get("id")): bool(it.get("correct")) for it in old}
    after = {str(it.get("id")): bool(it.get("correct")) for it in new}
    return [{"evaluation": which, "id": i, "old": before.get(i), "new": after.get(i)}
            for i in sorted(set(before) | set(after)) if before.get(i) != after.get(i)]


def _checked(store: Store, run_id: str) -> tuple[Run, Submission, Evaluation]:
    """The run, its final submission and that submission's current test evaluation, or
    `CannotRegrade` saying why not."""
    with store.session() as s:
        try:
            run, sub = finished_final(s, run_id, "regrade it",
                                      "its score is the baseline's, nothing to regrade")
        except NotFinished as exc:
            raise CannotRegrade(str(exc)) from None
        old = current_final_evaluation(s, run)
    if old is None:
        raise CannotRegrade(f"run {run_id}: its final submission's test evaluation is not in "
                            "the store")
    if not sub.checkpoint_dir or not Path(sub.checkpoint_dir).is_dir():
        raise CannotRegrade(f"run {run_id}: the stored copy of its final submission "
                            f"{sub.id} was removed, so it cannot be scored again")
    return run, sub, old


def regrade_run(settings: Settings, store: Store, run_id: str, *, profile: str | None = None,
                base_dir: Path, reason: str = "") -> RegradeOutcome:
    """Score run `run_id`'s final checkpoint copy and base model (`base_dir`) on test again,
    store both beside the old evaluations, and make them current unless `profile` asks for a
    second reading under another profile. `CannotRegrade` (nothing changed) when the run
    cannot be."""
    run, sub, old_final = _checked(store, run_id)
    if not base_dir.is_dir():
        raise CannotRegrade(f"run {run_id}: its base model is not on this machine ({base_dir})")
    reading = profile is not None and profile != run.profile
    with store.session() as s:
        frozen = of_run(s, run)
        old_base = baseline_evaluation(s, run, "test")
    graded = settings
    if frozen is not None:
        try:
            graded = honour(settings, frozen, regrade=True)
        except CannotHonour as exc:
            raise CannotRegrade(f"run {run_id}: {exc}") from None
    assert sub.checkpoint_dir is not None
    kinds = (EvaluationKind.reading, EvaluationKind.reading) if reading else (
        EvaluationKind.submission, EvaluationKind.baseline)
    new: list[NewEvaluation] = []
    with device_lock(graded):
        for checkpoint, kind, sub_id in ((sub.checkpoint_dir, kinds[0], sub.id),
                                         (str(base_dir), kinds[1], None)):
            spec = spec_for(run, checkpoint, "test", graded, frozen, regrade=True,
                            profile=profile)
            started = utcnow()
            result, error, elapsed = run_worker(spec, TIMEOUT_S)
            new.append(NewEvaluation(
                run_id=run.id, submission_id=sub_id, kind=kind, split="test",
                started_at=started, ended_at=utcnow(), error=error,
                scores=scores_of(result, elapsed) if result is not None else None))
    final, base = new
    failed = [ev.error for ev in new if ev.scores is None]
    why = reason or (f"a second reading under the {profile} profile" if reading else
                     f"today's grader (version {GRADER_VERSION}, a2rl {a2rl.__version__}) "
                     "under the run's frozen evaluation config")
    final_items = final.scores.items if final.scores else []
    with store.session() as s:
        row, new_final, new_base = evaluations.record_regrade(
            s, final, base, replaces=old_final.id,
            run_id=run.id, reason=why, profile=profile or run.profile,
            current=not reading and not failed, a2rl_version=a2rl.__version__,
            grader_version=GRADER_VERSION, old_final_id=old_final.id,
            old_baseline_id=old_base.id if old_base else None,
            old_final=old_final.score, new_final=final.scores.score if final.scores else None,
            old_baseline=old_base.score if old_base else None,
            new_baseline=base.scores.score if base.scores else None,
            changed=changed_verdicts("final", old_final.items, final_items)
            + (changed_verdicts("baseline", old_base.items,
                                base.scores.items if base.scores else [])
               if old_base is not None else []),
            error="; ".join(e or "failed" for e in failed) or None)
        if row.current:
            runs.regraded(s, run.id, new_final, new_base)
    return RegradeOutcome(regrade=row, old_final=old_final, new_final=new_final,
                          old_baseline=old_base, new_baseline=new_base)
