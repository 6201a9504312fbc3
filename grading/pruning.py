"""Deleting checkpoint copies that can no longer become a run's best.

Under `heldout` a graded submission whose dev score is below the best so far (or equal to it
but later: ties go to the earliest) can never be the best-dev submission, so its copy is not
needed for the final test evaluation. Under `paper` the same holds on test. Ungraded copies
are always kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlmodel import select

from a2rl.store import Run, Store, Submission, SubmissionStatus
from a2rl.store.queries import best_submission


def prune_copies(store: Store, run_id: str, keep: str | None = None,
                 final: bool = False) -> list[str]:
    """Remove losing copies; with `final`, every copy but `keep`. Returns the removed ids."""
    with store.session() as s:
        run = s.get(Run, run_id)
        subs = s.exec(select(Submission).where(Submission.run_id == run_id)).all()
    if run is None:
        return []
    if not final:
        best = best_submission(store, run_id, run.config.feedback_split)
        keep = best[0].id if best else None
    removed = []
    for sub in subs:
        if sub.id == keep or not sub.checkpoint_dir or not Path(sub.checkpoint_dir).exists():
            continue
        if final or sub.status in (SubmissionStatus.graded, SubmissionStatus.failed):
            shutil.rmtree(sub.checkpoint_dir, ignore_errors=True)
            removed.append(sub.id)
    return removed
