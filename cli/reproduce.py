"""Commands that check a run's numbers against its record: `regrade` scores a finished run's
kept final checkpoint and its base model again with today's grader under the run's frozen
evaluation config (or another profile, a second reading); `replay` re-runs the recipe behind
its final submission without its agent, in fresh runs of their own, and sets the agent's score
beside the replicas'."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Annotated, Any

import typer
from sqlmodel import col, select

from a2rl.cli import context
from a2rl.cli.errors import fail, say_error
from a2rl.cli.options import PROFILES, JsonFlag, choices
from a2rl.cli.output import echo, print_json
from a2rl.registry import RegistryError
from a2rl.settings import Settings
from a2rl.stats import T_METHOD, mean_interval
from a2rl.store import Run, RunConfig, RunConfigError, RunKind, RunStatus, Store
from a2rl.tasks import get_task

if TYPE_CHECKING:  # the server is imported by the commands that use it (see `regrade`)
    from a2rl.server.run.regrade import RegradeOutcome


def _targets(store: Store, run_ids: list[str], task: str | None, every: bool) -> list[str]:
    """The runs named, or every finished run with a final submission (of `task`), oldest
    first; an unknown id refuses the whole command before anything is graded."""
    with store.session() as s:
        if run_ids:
            known = set(s.exec(select(Run.id).where(col(Run.id).in_(run_ids))).all())
            unknown = [r for r in run_ids if r not in known]
            if unknown:
                fail(f"run {unknown[0]!r} does not exist (see a2rl runs)")
            return list(dict.fromkeys(run_ids))
        q = select(Run.id).where(Run.status == RunStatus.finished,
                                 col(Run.final_submission_id).is_not(None))
        if task:
            q = q.where(Run.task_id == task)
        found = list(s.exec(q.order_by(col(Run.created_at))).all())
    if not found:
        fail("no finished run with a final submission" + (f" of task {task!r}" if task else ""))
    return found


def _regrade_one(settings: Settings, store: Store, run_id: str, profile: str | None,
                 reason: str) -> RegradeOutcome:
    from a2rl.server.run.regrade import CannotRegrade, regrade_run  # see `regrade`

    with store.session() as s:
        run = s.get(Run, run_id)
    assert run is not None
    try:
        task = get_task(run.task_id, run.profile).with_recorded_options(run.task_options)
        base_dir = task.base_model_dir(settings)
    except (RegistryError, ValueError, OSError) as exc:
        raise CannotRegrade(f"run {run_id}: its task cannot be loaded here ({exc})") from None
    return regrade_run(settings, store, run_id, profile=profile, base_dir=base_dir,
                       reason=reason)


def outcome_doc(out: RegradeOutcome) -> dict[str, Any]:
    """A regrade as `--json` prints it and as it is shown: old and new scores, the paired
    interval of the new final score over the old, the improvement before and after, and the
    items whose verdict changed."""
    # a2rl.analysis: ~70 ms of every command's start-up
    from a2rl.analysis.improvement import Scored, paired_improvement

    def scored(ev: Any) -> Scored:
        return Scored(ev.score or 0.0, ev.items, ev.metrics, ev.provenance)

    r, task = out.regrade, out.new_final.provenance.get("task_id")
    doc: dict[str, Any] = {"run_id": r.run_id, "regrade_id": r.id, "current": r.current,
                           "reason": r.reason, "profile": r.profile,
                           "grader_version": r.grader_version, "error": r.error,
                           "final": {"submission_id": out.new_final.submission_id,
                                     "old": r.old_final, "new": r.new_final,
                                     "old_evaluation": r.old_final_id,
                                     "new_evaluation": r.new_final_id},
                           "baseline": {"old": r.old_baseline, "new": r.new_baseline,
                                        "old_evaluation": r.old_baseline_id,
                                        "new_evaluation": r.new_baseline_id},
                           "changed": r.changed}
    done = out.new_final.score is not None and out.new_baseline.score is not None
    if done:
        diff, note = paired_improvement(scored(out.new_final), scored(out.old_final), task,
                                        same_settings=False)
        doc["difference"] = diff.model_dump() if diff else None
        doc["difference_note"] = note
        new_iv, new_note = paired_improvement(scored(out.new_final), scored(out.new_baseline),
                                              task)
        doc["improvement"] = {"old": (r.old_final - r.old_baseline)
                              if r.old_final is not None and r.old_baseline is not None
                              else None, "new": new_iv.model_dump() if new_iv else None,
                              "note": new_note}
    return doc


def _points(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} pts"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _show(doc: dict[str, Any]) -> None:
    def line(label: str, value: str) -> None:
        echo(f"  {label:18} {value}")

    kind = "regraded" if doc["current"] else "read again"
    echo(f"run {doc['run_id']}: {kind} (regrade {doc['regrade_id']}): {doc['reason']}")
    if doc["error"]:
        line("failed", f"{doc['error']} (the run's scores are unchanged)")
    final, base = doc["final"], doc["baseline"]
    line("final (test)", f"{final['submission_id']}: old {_pct(final['old'])}, new "
         f"{_pct(final['new'])}")
    diff = doc.get("difference")
    if diff:
        line("difference", f"{_points(diff['estimate'])}, 95% CI [{_points(diff['low'])}, "
             f"{_points(diff['high'])}] paired over {diff['n_paired']} items")
    elif doc.get("difference_note"):
        line("difference", doc["difference_note"])
    line("baseline (test)", f"old {_pct(base['old'])}, new {_pct(base['new'])}")
    imp = doc.get("improvement")
    if imp:
        new = imp["new"]
        line("improvement", f"old {_points(imp['old'])}, new "
             + (f"{_points(new['estimate'])} [{_points(new['low'])}, {_points(new['high'])}]"
                if new else f"- ({imp['note']})"))
    changed = doc["changed"]
    line("changed verdict", "none" if not changed else f"{len(changed)} items: " + ", ".join(
        f"{c['evaluation']} {c['id']} ({_verdict(c['old'])} -> {_verdict(c['new'])})"
        for c in changed[:10]) + (f", and {len(changed) - 10} more" if len(changed) > 10
                                  else ""))
    if doc["current"]:
        line("current", f"the new evaluations (kept beside the old: evaluations "
             f"{final['old_evaluation']}, {base['old_evaluation']})")


def _verdict(value: bool | None) -> str:
    return "not scored" if value is None else "correct" if value else "wrong"


def regrade(
    run_ids: Annotated[list[str] | None, typer.Argument(help="finished runs")] = None,
    task: Annotated[str | None, typer.Option(help="every finished run of this task")] = None,
    every: Annotated[bool, typer.Option("--all", help="every finished run")] = False,
    profile: Annotated[choices(*PROFILES) | None, typer.Option(
        help="a second reading under this profile, kept beside the run's scores (default: "
        "the run's own, under its frozen evaluation config)")] = None,
    reason: Annotated[str, typer.Option(help="why, as the record keeps it (default: the "
                                        "grader version and the config)")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Score finished runs' final checkpoints and base models again with today's grader."""
    # the server: the MCP SDK among its imports, ~0.4 s of every command's start-up
    from a2rl.server.run.regrade import CannotRegrade

    if run_ids and (task or every):
        fail("name runs, or --task TASK, or --all: not both")
    if not run_ids and not (task or every):
        fail("name the runs to regrade, or --task TASK, or --all")
    settings = context.settings()
    store = context.read_store(settings)
    if store is None:
        fail(f"run {run_ids[0]!r} does not exist (see a2rl runs)" if run_ids else
             "no runs yet: this store is empty")
    targets = _targets(store, run_ids or [], task, every)
    say = context.progress()
    docs: list[dict[str, Any]] = []
    refused = 0
    for run_id in targets:
        say(f"regrading {run_id}")
        try:
            out = _regrade_one(settings, store, run_id, profile, reason)
        except CannotRegrade as exc:
            refused += 1
            docs.append({"run_id": run_id, "refused": str(exc)})
            if not as_json:
                echo(f"run {run_id}: not regraded: {exc}")
            continue
        doc = outcome_doc(out)
        docs.append(doc)
        refused += bool(doc["error"])
        if not as_json:
            _show(doc)
    if as_json:
        print_json(docs)
    if refused:
        raise typer.Exit(1)


def replica_config(source: Any, seed: int) -> Any:
    """A replica's config: the source run's task, options, profile, protocol, budget and
    sandbox, made by `a2rl replay` with `seed`; none of the agent's knobs."""
    c = source.config
    return RunConfig.build(
        task_id=source.task_id, profile=c.profile, protocol=c.protocol,
        grading_clock=c.grading_clock, max_submissions=c.max_submissions,
        budget=f"{source.budget_s:g}s", backend=c.backend, unsafe_local=c.unsafe_local,
        network=c.network, gpus=c.gpus, share_gpus=c.share_gpus,
        task_options=c.task_options, seed=seed, agent="replay", kind=RunKind.replay,
        replay_of=source.id)


def replay_doc(source: Any, replicas: list[Any], note: str) -> dict[str, Any]:
    """The agent's score beside its replicas': their mean, spread and 95% interval (pure)."""
    scores = [r.final_score for r in replicas if r.final_score is not None]
    doc: dict[str, Any] = {
        "run_id": source.id, "agent_final": source.final_score, "note": note,
        "replicas": [{"run_id": r.run_id, "seed": r.seed, "final": r.final_score,
                      "status": r.agent_status, "error": r.error} for r in replicas],
        "mean": statistics.fmean(scores) if scores else None,
        "std": statistics.stdev(scores) if len(scores) > 1 else None,
        "min": min(scores, default=None), "max": max(scores, default=None),
        "interval": None, "method": T_METHOD, "agent_within": None}
    if (iv := mean_interval(scores)) is not None:  # cut to a score's range, [0, 1]
        doc["interval"] = [max(iv[1], 0.0), min(iv[2], 1.0)]
        if source.final_score is not None:
            doc["agent_within"] = iv[1] <= source.final_score <= iv[2]
    return doc


def _show_replay(doc: dict[str, Any]) -> None:
    def line(label: str, value: str) -> None:
        echo(f"  {label:24} {value}")

    echo(f"replay of run {doc['run_id']}: {len(doc['replicas'])} replicas; "
               f"{doc['note']}")
    line("agent's final (test)", _pct(doc["agent_final"]))
    for r in doc["replicas"]:
        line(f"replica {r['run_id']}", f"{_pct(r['final'])} (seed {r['seed']})"
             + (f": {r['error']}" if r["error"] else ""))
    if doc["mean"] is not None:
        spread = f", std {100 * doc['std']:.1f} pts" if doc["std"] is not None else ""
        iv = doc["interval"]
        line("replicas", f"mean {_pct(doc['mean'])}{spread}, range {_pct(doc['min'])} to "
             f"{_pct(doc['max'])}" + (f", 95% CI [{_pct(iv[0])}, {_pct(iv[1])}] (Student's t)"
                                      if iv else ""))
    if doc["agent_within"] is not None:
        line("reproduces", "yes: the agent's score is inside the replicas' interval"
             if doc["agent_within"] else "no: the agent's score is outside the replicas' "
             "interval (a lucky or unlucky run, or a recipe that does not transfer)")


class _Replica:
    def __init__(self, run_id: str, seed: int, final: float | None, status: str | None,
                 error: str | None) -> None:
        self.run_id, self.seed, self.final_score = run_id, seed, final
        self.agent_status, self.error = status, error


def replay(
    run_id: Annotated[str, typer.Argument(help="a finished run with a final submission")],
    repeats: Annotated[int, typer.Option(min=1, max=100, help="replicas, one after another")
                       ] = 1,
    seed: Annotated[int | None, typer.Option(
        help="the first replica's seed (then +1 each); default: the run's own seed + 1")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Re-run a finished run's recipe without its agent and compare the replicas' scores."""
    # the orchestrator and the replay connector: the MCP SDK among their imports, ~0.4 s of
    # every command's start-up
    from a2rl.analysis.replay_plan import CannotReplay, plan_replay, seed_note
    from a2rl.clients.orchestrator import Orchestrator
    from a2rl.clients.replay import ReplayConnector

    settings = context.settings()
    store = context.read_store(settings)
    if store is None:
        fail(f"run {run_id!r} does not exist (see a2rl runs)")
    try:
        plan = plan_replay(store, run_id)
    except CannotReplay as exc:
        fail(str(exc))
    with store.session() as s:
        source = s.get(Run, run_id)
    assert source is not None
    note = seed_note(plan.stages)
    say = context.progress()
    say(f"replaying run {run_id}: {len(plan.stages)} jobs "
        f"({', '.join(st.job_id for st in plan.stages)}), then {plan.submit_path} submitted; "
        f"{note}")
    first = seed if seed is not None else source.config.job_seed() + 1
    replicas: list[_Replica] = []
    for i in range(repeats):
        try:
            opts = replica_config(source, first + i)
        except RunConfigError as exc:
            fail(f"run {run_id}: its config cannot make a replica ({exc})")
        summary = Orchestrator(settings, store, say=say, warn=say_error).run(
            opts, connector=ReplayConnector(plan))
        with store.session() as s:
            made = s.get(Run, summary.run_id)
        replicas.append(_Replica(summary.run_id, first + i, summary.final_score
                                 if made is not None and made.final_submission_id else None,
                                 summary.agent_status,
                                 made.agent_error if made is not None else None))
    doc = replay_doc(source, replicas, note)
    if as_json:
        print_json(doc)
    else:
        _show_replay(doc)
    if any(r.final_score is None for r in replicas):
        raise typer.Exit(1)
