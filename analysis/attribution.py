"""Stage attribution: which stage of the final checkpoint's lineage earned how much.

The final submission's lineage (`a2rl.store.lineage`) is a chain of stages, each a checkpoint
one job made from the one before (SFT on the base model, then GRPO on the SFT checkpoint). Each
stage is scored on the run's feedback split (dev under `heldout`): by the agent's own submission
of that very checkpoint (the same job, the same content) where it made one, else by the
evaluation the run's finish made of the checkpoint it kept (`EvaluationKind.stage`, never seen
by the agent). Each stage's gain is over the stage before it (the base model's score for the
first), with the paired interval over the items both scored; its route is read from the code
its job ran (`a2rl.analysis.routes`). `a2rl compare` sums the gains by route.

A later submission built on top of the final checkpoint that did not beat it (GRPO on the SFT
checkpoint, tied on dev) extends the chain: its stage is shown, marked as not part of the final
checkpoint, and its gain counts for no route.

`attribute` is pure; `attribution_section` reads the store for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import col, select

from a2rl.store import (
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Run,
    SnapshotFile,
    Store,
    Submission,
)
from a2rl.store.lineage import Lineage, LineageStage
from a2rl.store.lineage_query import stored_lineage
from a2rl.store.queries import baseline_evaluation

from .improvement import Scored, paired_improvement
from .routes import classify
from .schema import Attribution, RouteName, StageGain

#: stages a job made (the base model and checkpoints no recorded job made are not stages)
MADE = ("trained", "copied", "edited")


@dataclass(frozen=True)
class StageScore:
    """A stage's evaluation on the feedback split, and where it came from."""

    evaluation: Evaluation
    submission_id: str | None  # the agent's submission of it; None: scored after the run


def stage_key(stage: LineageStage) -> tuple[str | None, str | None]:
    """What names one stage's checkpoint across lineages: its job and its content."""
    return stage.job_id, stage.content_sha256


def made_stages(lineage: Lineage) -> list[LineageStage]:
    """The stages a job made, oldest first (pure)."""
    return [s for s in reversed(lineage.stages) if s.how in MADE]


def extension(final: Lineage, others: list[Lineage]) -> Lineage:
    """The longest of `others` whose chain starts with the final checkpoint's stages (a later
    submission built on top of the final one: GRPO on the SFT checkpoint, which did not beat
    it), else `final` itself (pure)."""
    head = [stage_key(s) for s in made_stages(final)]
    longer = [o for o in others if len(made_stages(o)) > len(head)
              and [stage_key(s) for s in made_stages(o)][:len(head)] == head]
    return max(longer, key=lambda o: len(made_stages(o)), default=final)


def attribute(lineage: Lineage, scores: dict[tuple[str | None, str | None], StageScore],
              baseline: Evaluation | None, routes: dict[str, tuple[RouteName, str]],
              split: str, task_id: str | None, final_stages: int | None = None,
              ) -> Attribution:
    """The stages of `lineage` oldest first, each with its score on `split`, its gain over the
    stage before (the baseline for the first) with the paired interval, and its route; the
    first `final_stages` (default: all) make the final checkpoint, the others were built on
    top of it later and did not replace it."""
    chain = made_stages(lineage)
    final_stages = len(chain) if final_stages is None else final_stages
    out: list[StageGain] = []
    before = baseline
    for i, stage in enumerate(chain):
        found = scores.get(stage_key(stage))
        ev = found.evaluation if found is not None else None
        route, why = routes.get(stage.job_id or "", ("unknown", "no code recorded for its job"))
        gain = interval = None
        note = None
        if ev is None:
            note = ("never submitted, and its checkpoint was not kept at the run's finish "
                    "(overwritten, or past the disk cap): no score")
        elif before is None or before.score is None:
            note = "the stage before it has no score: no gain"
        else:
            assert ev.score is not None
            gain = ev.score - before.score
            interval, note = paired_improvement(
                Scored(ev.score, ev.items, ev.metrics, ev.provenance),
                Scored(before.score, before.items, before.metrics, before.provenance), task_id)
        out.append(StageGain(
            checkpoint=stage.checkpoint, job_id=stage.job_id, how=stage.how, route=route,
            route_evidence=why, command=stage.command, score=ev.score if ev else None,
            evaluation_id=ev.id if ev else None,
            submission_id=found.submission_id if found else None,
            seen_by_agent=bool(found and found.submission_id), gain=gain, interval=interval,
            note=note, in_final=i < final_stages))
        before = ev  # a stage without a score leaves the next one's gain unknown
    final = out[:final_stages]
    return Attribution(split=split, baseline=baseline.score if baseline else None,
                       stages=out, complete=lineage.complete and all(
                           s.score is not None for s in final), note=lineage.note)


def route_gains(a: Attribution | None) -> dict[str, float]:
    """The gains of a run's stages summed by route (pure): what `compare` averages."""
    out: dict[str, float] = {}
    for st in a.stages if a else []:
        if st.gain is not None and st.in_final:  # the final checkpoint's own stages
            out[st.route] = out.get(st.route, 0.0) + st.gain
    return out


def _current(evs: list[Evaluation]) -> Evaluation | None:
    done = [e for e in evs if e.status == EvaluationStatus.done and e.superseded_by is None
            and e.score is not None]
    return done[-1] if done else None


def attribution_section(store: Store, run_id: str) -> Attribution | None:
    """The run's attribution, from its final submission's lineage; None without one."""
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None or not run.final_submission_id:
            return None
        subs = list(s.exec(select(Submission).where(Submission.run_id == run_id)
                           .order_by(col(Submission.created_at))).all())
        final = next((x for x in subs if x.id == run.final_submission_id), None)
        final_lineage = stored_lineage(final) if final is not None else None
        if final_lineage is None:
            return None
        lineage = extension(final_lineage, [lin for x in subs if x.id != final.id  # type: ignore[union-attr]
                                            and (lin := stored_lineage(x)) is not None])
        split = run.config.feedback_split
        evals = list(s.exec(select(Evaluation).where(
            Evaluation.run_id == run_id, Evaluation.split == split,
            col(Evaluation.kind).in_([EvaluationKind.submission, EvaluationKind.stage]))
            .order_by(col(Evaluation.id))).all())
        baseline = baseline_evaluation(s, run, split)
        snapshots = {st.snapshot_id for st in lineage.stages if st.snapshot_id is not None}
        files = list(s.exec(select(SnapshotFile).where(
            col(SnapshotFile.snapshot_id).in_(sorted(snapshots))))) if snapshots else []
    scores: dict[tuple[str | None, str | None], StageScore] = {}
    by_sub: dict[str, list[Evaluation]] = {}
    for ev in evals:
        if ev.kind == EvaluationKind.stage:
            key = (ev.metrics.get("stage_job"), ev.metrics.get("stage_content"))
            if (cur := _current([ev])) is not None:
                scores.setdefault(key, StageScore(cur, None))
        elif ev.submission_id:
            by_sub.setdefault(ev.submission_id, []).append(ev)
    for sub in subs:  # the agent's own submission of a stage wins over a later scoring
        lin = stored_lineage(sub)
        if lin is None or not lin.stages or (cur := _current(by_sub.get(sub.id, []))) is None:
            continue
        scores[stage_key(lin.stages[0])] = StageScore(cur, sub.id)
    texts: dict[int, dict[str, str | None]] = {}
    for f in files:
        texts.setdefault(f.snapshot_id, {})[f.path] = _text(store, f.blob_sha)
    routes: dict[str, tuple[RouteName, str]] = {}
    for st in lineage.stages:
        if st.job_id and st.how in MADE:
            route, _also, ev = classify(st.checkpoint, None, False, None,
                                        texts.get(st.snapshot_id or -1, {}),
                                        [(st.job_id, st.command or "")])
            routes[st.job_id] = (route, ev[0].text[:200] if ev else "no evidence")
    return attribute(lineage, scores, baseline, routes, split, run.task_id,
                     final_stages=len(made_stages(final_lineage)))


def _text(store: Store, sha: str) -> str | None:
    try:
        data = store.get_blob(sha)
    except Exception:  # noqa: BLE001 - a missing blob is code not read
        return None
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")

