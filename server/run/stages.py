"""Stages the agent trained but never submitted, scored when the run finishes.

Stage attribution (`a2rl.analysis.attribution`) scores each stage of the final checkpoint's
lineage on the feedback split. Most stages were submitted by the agent; for one that was not
(SFT trained, GRPO on top submitted), its checkpoint folder is copied out of the workspace
before the workspace goes (`finish_run`), kept only if its content is the stage's own (every
file is one the lineage recorded for it, unchanged: a folder overwritten since is not that
checkpoint), validated as a submission is, and graded in a grader process under the run's
frozen evaluation config. The evaluation is of kind `stage`, never seen by the agent. Copies
are kept (`$A2RL_HOME/checkpoints/<run>/stage-<job>`) within `recording.stage_keep_bytes` per
run, so a regrade or a second look can use them; past the cap a stage is left unscored, and says so.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from sqlmodel import select

from a2rl import grading
from a2rl.grading.frozen import CannotHonour, honour, of_run
from a2rl.grading.queue import run_worker, spec_for
from a2rl.grading.recorded import scores_of
from a2rl.layout import BASE_MODEL
from a2rl.settings import Settings, parse_size
from a2rl.store import (
    EvaluationKind,
    Run,
    Store,
    Submission,
    utcnow,
)
from a2rl.store.lineage import Lineage, LineageStage
from a2rl.store.lineage_query import stored_lineage
from a2rl.store.records import evaluations
from a2rl.store.records.evaluations import NewEvaluation
from a2rl.tools.checkpoint_copy import CopyCaps, CopyRefused, copy_checkpoint

log = logging.getLogger(__name__)
MADE = ("trained", "copied", "edited")
TIMEOUT_S = 1800.0


def unsubmitted_stages(final: Lineage, submitted: list[Lineage]) -> list[LineageStage]:
    """The stages of `final` (oldest first) that no submission was of: no submitted lineage's
    top stage has the same job and content (pure)."""
    seen = {(lin.stages[0].job_id, lin.stages[0].content_sha256) for lin in submitted
            if lin.stages}
    return [st for st in reversed(final.stages) if st.how in MADE and st.job_id
            and (st.job_id, st.content_sha256) not in seen]


def score_unsubmitted_stages(settings: Settings, store: Store, run_id: str) -> int:
    """Keep and score the final lineage's stages the agent never submitted; how many were
    scored. Never fails a finish: what cannot be scored is logged and left unscored."""
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None or not run.final_submission_id:
            return 0
        subs = list(s.exec(select(Submission).where(Submission.run_id == run_id)).all())
        frozen = of_run(s, run)
    lineages = {x.id: lin for x in subs if (lin := stored_lineage(x)) is not None}
    final = lineages.get(run.final_submission_id)
    if final is None:
        return 0
    todo = unsubmitted_stages(final, list(lineages.values()))
    if not todo:
        return 0
    graded = settings
    if frozen is not None:
        try:
            graded = honour(settings, frozen)
        except CannotHonour as exc:
            log.warning("run %s: its stages are not scored: %s", run_id, exc)
            return 0
    cap = parse_size(settings.recording.stage_keep_bytes)
    kept = 0
    workspace = Path(run.workspace)
    scored = 0
    for stage in todo:
        dest = settings.home_dir / "checkpoints" / run_id / f"stage-{stage.job_id}"
        why = _keep(workspace, stage, dest, cap - kept if cap else None)
        if why is not None:
            log.info("run %s: stage %s (%s) not scored: %s", run_id, stage.checkpoint,
                     stage.job_id, why)
            continue
        kept += sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
        check = grading.validate_copy(dest, workspace / BASE_MODEL, stage.checkpoint)
        if not check.ok:
            log.info("run %s: stage %s is no checkpoint the grader takes: %s", run_id,
                     stage.checkpoint, check.error)
            shutil.rmtree(dest, ignore_errors=True)
            continue
        started = utcnow()
        split = run.config.feedback_split
        result, error, elapsed = run_worker(spec_for(run, str(dest), split, graded, frozen),
                                            TIMEOUT_S)
        with store.session() as s:
            evaluations.record(s, NewEvaluation(
                run_id=run_id, kind=EvaluationKind.stage, split=split, started_at=started,
                ended_at=utcnow(), error=error,
                scores=scores_of(result, elapsed) if result is not None else None,
                metrics={"stage_job": stage.job_id, "stage_content": stage.content_sha256,
                         "checkpoint": stage.checkpoint}))
        scored += result is not None
    return scored


def _keep(workspace: Path, stage: LineageStage, dest: Path, room: int | None) -> str | None:
    """Copy the stage's folder to `dest` if it still holds the stage's checkpoint (every file
    copied is one of the stage's, unchanged; files deleted since, such as a trainer's
    intermediate checkpoints, may be missing) and fits in `room` bytes (None: no cap); None
    when kept, else why not (nothing is left at `dest`)."""
    if not stage.files:
        return "its files were not hashed when the next stage read them"
    if room is not None and room <= 0:
        return "the run's recording.stage_keep_bytes are used up"
    parts = tuple(p for p in stage.checkpoint.split("/") if p)
    caps = CopyCaps(max_total_bytes=room) if room is not None else CopyCaps()
    try:
        hashes = copy_checkpoint(workspace, dest, parts=parts, caps=caps,
                                 shown=stage.checkpoint)
    except (CopyRefused, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        return f"not copied ({exc})"
    changed = [path for path, sha in hashes.items() if stage.files.get(path) != sha]
    if changed:
        shutil.rmtree(dest, ignore_errors=True)
        return f"the folder changed since the next stage read it ({changed[0]})"
    return None
