"""`compare(store, task, agent, profile, run_ids)`: one row per run, grouped means with spread
across repeats of (task, profile, agent, driver), and a leaderboard per task and profile:
scores of the `a2rl` and `paper` evaluation profiles are not comparable, so they are never
averaged or ranked together. CSV and JSON renderers.

Only results count in the means and the leaderboard (`a2rl.store.outcome.is_result`: ended by
the agent or the budget, finalized, with a baseline); the other runs are listed apart and
counted per group by why ("not counted: 3 interrupted, 1 agent crashed"), since an interrupted
or crashed run says nothing about what the agent can do. `include_unfinished` counts every
run; `exclude_flagged` leaves out the runs whose audit has a high flag standing (marked
either way)."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import Counter, defaultdict

from pydantic import BaseModel, Field
from sqlmodel import col, select

from a2rl.audit import flagged_run_ids
from a2rl.store import Run, RunKind, Store
from a2rl.store.outcome import agent_label, end_kind, is_result, not_result_reason

from .attribution import route_gains
from .fmt import ROUTE_LABELS
from .ledger_view import gain_per, gpu_hours
from .published import published_line
from .report import build_report
from .schema import PublishedBeside


class RunRow(BaseModel):
    run_id: str
    task: str
    agent: str | None
    driver: str | None
    seed: int | None
    status: str
    baseline: float | None
    final: float | None
    improvement: float | None
    improvement_low: float | None = None
    improvement_high: float | None = None
    within_noise: bool | None
    improvement_note: str | None = None
    best_route: str | None
    submissions: int
    valid_submissions: int
    budget_s: float
    budget_used_s: float | None
    #: the evaluation profile (last: the CSV's earlier columns keep their places)
    profile: str = "a2rl"
    #: why the run ended (an EndKind), whether it is a result, and whether this comparison's
    #: aggregates count it (with the reason when not); after profile, for the CSV's sake
    end_kind: str | None = None
    result: bool = False
    counted: bool = False
    not_counted: str | None = None
    #: the audit has a high-severity flag standing on the run (`a2rl audit RUN`)
    flagged: bool = False
    #: the scores are a regrade's (`a2rl regrade`), not those graded when the run ended
    regraded: bool = False
    #: the gains of the final checkpoint's stages on the feedback split, summed by route
    #: (stage attribution, `a2rl.analysis.attribution`); {} without a lineage
    route_gains: dict[str, float] = Field(default_factory=dict)
    final_note: str | None = None
    #: the cost ledger (`a2rl.store.ledger`): the driver model's cost in USD and how it is
    #: known, the jobs' GPU-hours, and the improvement per GPU-hour and per dollar of driver
    #: cost; None where not known (no ledger, no GPU measured, no cost, no improvement)
    cost_usd: float | None = None
    cost_basis: str | None = None
    gpu_hours: float | None = None
    gain_per_gpu_hour: float | None = None
    gain_per_dollar: float | None = None
    #: the paper's and its harness's figures beside the run's (a paper-profile run with the
    #: figures' base model only; `analysis.published`); not a CSV column
    published: list[PublishedBeside] = Field(default_factory=list)
    #: submissions refused before grading (`submissions` counts every one, `valid_submissions`
    #: the graded), and why the agent failed or stopped at its own limit (`Run.agent_error`)
    refused_submissions: int = 0
    agent_error: str | None = None


class Group(BaseModel):
    task: str
    profile: str = "a2rl"
    agent: str | None
    driver: str | None
    runs: int
    final_mean: float | None
    final_std: float | None
    improvement_mean: float | None
    improvement_std: float | None
    routes: dict[str, int]
    #: per route, the mean over the group's counted runs of the gain its stages earned on the
    #: feedback split (a run without that route counts 0): where the improvement came from
    route_gains: dict[str, float] = Field(default_factory=dict)
    #: runs of the group left out of the aggregates, by why (`runs` counts the others)
    not_counted: dict[str, int] = Field(default_factory=dict)
    #: counted runs the audit flagged, and counted runs without a final score (no submission)
    flagged: int = 0
    without_final: int = 0


class Comparison(BaseModel):
    rows: list[RunRow]
    groups: list[Group]
    #: keyed by task, or `task (profile)` for a profile other than a2rl (`board_key`)
    leaderboard: dict[str, list[Group]]
    #: which runs the aggregates count: results only (the default), or every run
    include_unfinished: bool = False
    exclude_flagged: bool = False


def run_row(store: Store, run_id: str) -> RunRow:
    rep = build_report(store, run_id)
    s, cost = rep.summary, rep.ledger
    route_of = {r.submission_id: r.route for r in rep.routes}
    # The best submission's route; a run with none graded shows its last attempt's.
    best = s.final_submission_id or s.best_submission_id or (
        rep.routes[-1].submission_id if rep.routes else None)
    gain = s.improvement.estimate if s.improvement else (
        s.final_test - s.baseline_test
        if s.final_test is not None and s.baseline_test is not None else None)
    usd = cost.cost_usd if cost is not None else None
    return RunRow(run_id=s.run_id, task=s.task, profile=s.profile, agent=s.agent,
                  driver=s.driver_model,
                  seed=None, status=s.status, baseline=s.baseline_test, final=s.final_test,
                  improvement=gain,
                  improvement_low=s.improvement.low if s.improvement else None,
                  improvement_high=s.improvement.high if s.improvement else None,
                  within_noise=s.improvement.within_noise if s.improvement else None,
                  improvement_note=s.improvement_note,
                  best_route=route_of.get(best) if best else None,
                  submissions=s.submissions_total, valid_submissions=s.submissions_valid,
                  refused_submissions=s.submissions_refused, agent_error=s.agent_error,
                  budget_s=s.budget_s, budget_used_s=s.budget_used_s, end_kind=s.end_kind,
                  result=bool(s.result), final_note=s.final_note, published=s.published,
                  regraded=any(g.current for g in s.regrades),
                  route_gains=route_gains(rep.attribution),
                  cost_usd=usd, cost_basis=cost.cost_basis if cost is not None else None,
                  gpu_hours=gpu_hours(cost), gain_per_gpu_hour=gain_per(gain, gpu_hours(cost)),
                  gain_per_dollar=gain_per(gain, usd))


def _mean_std(xs: list[float | None]) -> tuple[float | None, float | None]:
    vals = [x for x in xs if x is not None]
    if not vals:
        return None, None
    # One run has no spread to show: None, not a misleading 0.000.
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None


def group_rows(rows: list[RunRow]) -> list[Group]:
    """Groups of every row's (task, profile, agent, driver); the means over its counted rows,
    the others tallied by why."""
    by: dict[tuple[str, str, str | None, str | None], list[RunRow]] = defaultdict(list)
    for r in rows:
        by[(r.task, r.profile, r.agent, r.driver)].append(r)
    out = []
    for (task, profile, agent, driver), every in sorted(by.items(), key=lambda kv: tuple(
            str(x) for x in kv[0])):
        rs = [r for r in every if r.counted]
        left = Counter(r.not_counted or "not counted" for r in every if not r.counted)
        fm, fs = _mean_std([r.final for r in rs])
        im, is_ = _mean_std([r.improvement for r in rs])
        routes: dict[str, int] = defaultdict(int)
        for r in rs:
            routes[r.best_route or "none"] += 1
        named = sorted({route for r in rs for route in r.route_gains})
        gains = {route: statistics.fmean(r.route_gains.get(route, 0.0) for r in rs)
                 for route in named} if rs else {}
        out.append(Group(task=task, profile=profile, agent=agent, driver=driver, runs=len(rs),
                         final_mean=fm,
                         final_std=fs, improvement_mean=im, improvement_std=is_,
                         routes=dict(routes), route_gains=gains,
                         not_counted=dict(left.most_common()),
                         flagged=sum(r.flagged for r in rs),
                         without_final=sum(r.final is None for r in rs)))
    return out


def board_key(task: str, profile: str) -> str:
    """A leaderboard's name: the task, with its profile unless it is the default `a2rl`."""
    return task if profile == "a2rl" else f"{task} ({profile})"


def leaderboard(groups: list[Group]) -> dict[str, list[Group]]:
    """One ranking per task and profile, of the groups with a counted run."""
    out: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        if g.runs:
            out[board_key(g.task, g.profile)].append(g)
    return {t: sorted(gs, key=lambda g: -(g.improvement_mean if g.improvement_mean is not None
                                          else float("-inf")))
            for t, gs in sorted(out.items())}


def compare(store: Store, task: str | None = None, agent: str | None = None,
            fleet: str | None = None, profile: str | None = None,
            run_ids: list[str] | None = None, include_unfinished: bool = False,
            exclude_flagged: bool = False) -> Comparison:
    """Every run matching the filters that started (its clock ran: a run made and never
    used has nothing to compare), or the runs named by `run_ids` (with the filters, those of
    them that match), compared; raises KeyError naming the ids the store does not have.

    Every matching run is a row; the aggregates count the results only (see the module's
    doc): a fleet's run lost with its node is marked failed and replaced when the fleet
    resumes, so it shows apart as an infrastructure failure, never as a repeat.
    """
    with store.session() as s:
        q = select(Run).order_by(col(Run.created_at))
        if run_ids:
            q = q.where(col(Run.id).in_(run_ids))
        else:
            q = q.where(col(Run.started_at).is_not(None))
        if fleet:
            q = q.where(Run.fleet_id == fleet)
        if task:
            q = q.where(Run.task_id == task)
        if agent:
            q = q.where(Run.agent == agent)
        if profile:
            q = q.where(Run.profile == profile)
        runs = list(s.exec(q).all())
        if run_ids:
            have = set(s.exec(select(Run.id).where(col(Run.id).in_(run_ids))).all())
            if missing := [r for r in dict.fromkeys(run_ids) if r not in have]:
                raise KeyError(f"no run {', '.join(map(repr, missing))} in the store "
                               "(see a2rl runs)")
    flagged = flagged_run_ids(store, [r.id for r in runs]) if runs else set()
    rows = []
    for run in runs:
        row = run_row(store, run.id)
        row.seed = run.seed
        row.flagged = run.id in flagged
        if (run.kind or RunKind.agent) == RunKind.replay:  # never an agent's result
            row.not_counted = f"replay of {run.replay_of} (a2rl replay)"
        elif not (row.result or include_unfinished):
            row.not_counted = not_result_reason(run)
        elif row.flagged and exclude_flagged:
            row.not_counted = "flagged by the audit"
        row.counted = row.not_counted is None
        rows.append(row)
    groups = group_rows(rows)
    return Comparison(rows=rows, groups=groups, leaderboard=leaderboard(groups),
                      include_unfinished=include_unfinished, exclude_flagged=exclude_flagged)


def counted_note(c: Comparison) -> str:
    """The sentence that says what the aggregates count."""
    which = ("every run (--include-unfinished)" if c.include_unfinished else
             "results only: runs ended by the agent or the budget, finalized, with a baseline "
             "(--include-unfinished counts every run)")
    flagged = "; runs the audit flagged are left out (--exclude-flagged)" \
        if c.exclude_flagged else ""
    return f"counted: {which}{flagged}"


class Tally(BaseModel):
    """A set of runs (a fleet's) counted as `compare` counts them, without their reports: how
    many are results, the others by why, and the ones the audit flagged."""

    results: int
    not_counted: dict[str, int]
    flagged: list[str]
    end_kinds: dict[str, str | None]  # run id -> its EndKind


def tally(store: Store, fleet: str) -> Tally:
    with store.session() as s:
        runs = list(s.exec(select(Run).where(Run.fleet_id == fleet)
                           .order_by(col(Run.created_at))).all())
    flagged = flagged_run_ids(store, [r.id for r in runs]) if runs else set()
    left = Counter(not_result_reason(r) for r in runs if not is_result(r))
    return Tally(results=sum(is_result(r) for r in runs), not_counted=dict(left.most_common()),
                 flagged=sorted(flagged),
                 end_kinds={r.id: (str(k) if (k := end_kind(r)) else None) for r in runs})


def tally_line(t: Tally) -> str:
    """"4 results (1 flagged by the audit); not counted: 2 interrupted, 1 agent crashed"."""
    flagged = f" ({len(t.flagged)} flagged by the audit: a2rl audit RUN)" if t.flagged else ""
    left = "; not counted: " + ", ".join(f"{n} {why}" for why, n in t.not_counted.items()) \
        if t.not_counted else ""
    return f"{t.results} results{flagged}{left}"


def render_json(c: Comparison) -> str:
    return c.model_dump_json(indent=2) + "\n"


def render_csv(c: Comparison) -> str:
    """The per-run rows as CSV (the grouped view and the published figures are in the JSON
    and the text)."""
    buf = io.StringIO()
    nested = {"published", "route_gains"}  # not one value each: the JSON has them
    fields = [f for f in RunRow.model_fields if f not in nested]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in c.rows:
        w.writerow(r.model_dump(exclude=nested))
    return buf.getvalue()


def published_text(rows: list[RunRow]) -> list[str]:
    """The published figures beside each paper-profile run that has some, then each figure's
    source and caveats once."""
    with_figures = [r for r in rows if r.published]
    if not with_figures:
        return []
    out = ["", "published figures beside paper-profile runs of the same base model "
               "(docs/paper-fidelity.md):"]
    sources: dict[str, str] = {}
    for r in with_figures:
        for p in r.published:
            out.append(f"    {r.run_id[:13]:14} {published_line(p)}")
            sources.setdefault(p.label, f"{p.source} ({p.checked})"
                                        + (f"; {p.note}" if p.note else ""))
    return out + [f"    {label}: {text}" for label, text in sources.items()]


def render_text(c: Comparison) -> str:
    def f(x: float | None, sign: str = "") -> str:
        return "–" if x is None else f"{x:{sign}.3f}"
    def usd(x: float | None, basis: str | None) -> str:
        return "–" if x is None else f"{x:.2f}" + ("*" if basis == "computed" else "")
    def ci(r: RunRow) -> str:
        if r.improvement_low is None or r.improvement_high is None:
            return "–"
        return f"[{r.improvement_low:+.3f},{r.improvement_high:+.3f}]{'~' * bool(r.within_noise)}"
    def line(r: RunRow) -> str:
        run = r.run_id[:13] + ("!" if r.flagged else "")
        final = f(r.final) + ("^" if r.regraded else "")
        return (f"{run:14} {r.task:10} {r.profile:7} {agent_label(r.agent)[:12]:12} "
                f"{(r.driver or '–')[:16]:16} {f(r.baseline):>8} {final:>8} "
                f"{f(r.improvement, '+'):>8} {ci(r):17} {r.best_route or '–':14} "
                f"{r.valid_submissions:>6} {r.refused_submissions:>7} "
                f"{usd(r.cost_usd, r.cost_basis):>9} "
                f"{f(r.gain_per_gpu_hour, '+'):>9} {f(r.gain_per_dollar, '+'):>9}")
    head = (f"{'run':14} {'task':10} {'profile':7} {'agent':12} {'driver':16} {'baseline':>8} "
            f"{'final':>8} {'improve':>8} {'paired 95% CI':17} {'route':14} graded refused "
            f"{'cost $':>9} {'gain/GPUh':>9} {'gain/$':>9}")
    counted = [r for r in c.rows if r.counted]
    apart = [r for r in c.rows if not r.counted]
    out = [head] + [line(r) for r in counted]
    if apart:
        out += ["", f"not counted ({len(apart)}):"] + [
            f"{line(r)}  ({r.not_counted}" + (f": {r.agent_error}" if r.agent_error else "")
            + ")" for r in apart]
    notes = [counted_note(c)]
    if any(r.within_noise for r in c.rows):
        notes.append("~: the paired 95% interval of the improvement contains 0 (within noise)")
    if any(r.flagged for r in c.rows):
        notes.append("!: the audit flagged the run (a2rl audit RUN)"
                     + ("" if c.exclude_flagged else "; --exclude-flagged leaves such runs out"))
    if any(r.regraded for r in c.rows):
        notes.append("final ^: re-graded (a2rl regrade): the current evaluation, the one "
                     "graded when the run ended kept beside it (a2rl show RUN)")
    if any(r.cost_basis == "computed" and r.cost_usd is not None for r in c.rows):
        notes.append("cost $*: the driver's tokens priced by the price table (prices), "
                     "not reported by the agent")
    if c.rows:
        notes.append("gain/GPUh, gain/$: the improvement per GPU-hour of the jobs and per "
                     "dollar of the driver model; – where not measured or not known")
    if any(r.counted and r.final is None for r in c.rows):
        notes.append("final –: no final submission; such a run counts with no improvement")
    out += ["", *notes]
    out += published_text(c.rows)
    for task, groups in c.leaderboard.items():
        out += ["", f"leaderboard {task}: mean improvement ± std over repeats"]
        for i, g in enumerate(groups, 1):
            extra = "".join(f"; {n} {what}" for n, what in (
                (g.without_final, "without a final score"), (g.flagged, "flagged")) if n)
            out.append(f"{i:2}. {agent_label(g.agent):12} {g.driver or '–':16} n={g.runs:<3} "
                       f"{f(g.improvement_mean, '+')}"
                       f"{'' if g.improvement_std is None else ' ± ' + f(g.improvement_std)}"
                       "  final "
                       f"{f(g.final_mean)}  routes {json.dumps(g.routes)}{extra}")
            if g.route_gains:  # stage attribution: where the improvement came from
                out.append("      gain by route (feedback split, mean over runs): " + ", ".join(
                    f"{ROUTE_LABELS.get(r, r)} {v:+.3f}" for r, v in g.route_gains.items()))
    left = [g for g in c.groups if g.not_counted]
    if left:
        out += ["", "runs not counted, per group:"]
        out += [f"    {board_key(g.task, g.profile)} {agent_label(g.agent)} {g.driver or '–'}: "
                "not counted: " + ", ".join(f"{n} {why}" for why, n in g.not_counted.items())
                for g in left]
    return "\n".join(out) + "\n"
