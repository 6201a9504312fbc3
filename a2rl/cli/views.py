"""Commands that look at the record: `runs`, `show`, `report`, `compare`, `audit` and the
web `view`. They only read: none of them creates a store (`context.read_store`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from a2rl.cli import context
from a2rl.cli.errors import fail, no_run
from a2rl.cli.options import (
    FORMATS,
    PROFILES,
    RUN_STATUSES,
    AgentFilterOpt,
    JsonFlag,
    RunIdArg,
    TaskFilterOpt,
    choices,
)
from a2rl.cli.output import cell, duration, echo, print_json, score, seconds, when, write
from a2rl.listen import VIEW_PORT, ListenError
from a2rl.store import RunConfig
from a2rl.store.outcome import agent_label
from a2rl.store.queries import count_runs, list_runs, run_details, run_summary


def runs(
    task: TaskFilterOpt = None,
    agent: AgentFilterOpt = None,
    status: Annotated[choices(*RUN_STATUSES) | None, typer.Option(
        help="only runs in this state")] = None,
    limit: Annotated[int, typer.Option(min=0, help="at most this many, newest first (0: all)")
                     ] = 20,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first: task, agent, status, when, how long, calls and scores.
    `--json` gives each run with the same keys as `a2rl show --json`."""
    settings = context.settings()
    store = context.read_store(settings)
    rows = list_runs(store, task=task, agent=agent, status=status, limit=limit or None) \
        if store is not None else []
    if not rows and (task or agent or status):  # the one rule for filters matching nothing
        fail("no runs match the filters given (see a2rl runs)")
    if as_json:
        if rows:  # the paired interval, as `show --json` (the viewer's runs table computes it)
            # the viewer's queries: ~90 ms of start-up that `a2rl runs` without --json skips
            from a2rl.analysis.web.queries import list_runs as table_rows

            paired = {r.run_id: r.improvement for r in table_rows(store)}
            for row in rows:
                found = paired.get(row["id"])
                row["improvement"] = found.model_dump() if found is not None else None
        print_json(rows)
        return
    if not rows:
        echo("no runs yet: try `a2rl demo`")
        return
    echo(f"{'RUN':14} {'TASK':12} {'AGENT':12} {'STATUS':10} {'END':16} "
         f"{'CREATED (UTC)':16} {'DURATION':>9} {'CALLS':>6} {'BASELINE':>8} {'FINAL':>6}")
    for r in rows:  # END: the run's EndKind ("agent crashed"); FINAL "-": no final submission
        end = (r["end_kind"] or "-").replace("_", " ")
        echo(f"{cell(r['id']):14} {cell(r['task_id'])[:12]:12} "
             f"{cell(agent_label(r['agent'], r.get('kind')))[:12]:12} "
             f"{r['status']:10} {end:16} {when(r['created_at']):16} "
             f"{duration(r['started_at'], r['ended_at']):>9} {r['tool_calls']:>6} "
             f"{score(r['baseline_test']):>8} {score(r['final_score']):>6}")
    total = count_runs(store) if store is not None and limit and len(rows) == limit else 0
    if total > len(rows) and not (task or agent or status):
        echo(f"({total - len(rows)} older runs not shown: --limit 0 for all)", err=True)


def show(run_id: RunIdArg, as_json: JsonFlag = False) -> None:
    """Show one run: its settings, counts, jobs, submissions and scores."""
    # a2rl.analysis and a2rl.audit: ~70 ms of every command's start-up, for `show` alone
    from a2rl.analysis import build_report
    from a2rl.analysis.fmt import improvement
    from a2rl.analysis.lineage_view import lineage_json
    from a2rl.audit import load_audit

    settings = context.settings()
    store = context.read_store(settings)
    doc = run_summary(store, run_id) if store is not None else None
    if doc is None:
        no_run(run_id)
    details = run_details(store, run_id)
    rep = build_report(store, run_id)
    summary = rep.summary  # the paired improvement interval
    audit = load_audit(store, run_id)
    cost = rep.ledger
    marks = {"audit": None if audit is None else {
        "flagged": audit.flagged, "high": audit.high, "flags": len(audit.flags)},
        "ledger": cost.model_dump() if cost is not None else None,
        "evaluation_config": summary.evaluation_config,
        "regrades": [r.model_dump() for r in summary.regrades]}
    if as_json:
        print_json({**doc, **details, "improvement": summary.improvement.model_dump()
                    if summary.improvement else None,
                    "improvement_note": summary.improvement_note, **marks,
                    "lineage": lineage_json(store, run_id),
                    "attribution": rep.attribution.model_dump(mode="json")
                    if rep.attribution else None})
        return
    _print_show({**doc, **marks}, details, improvement(summary))
    _print_lineage(rep.lineage)
    _print_attribution(rep.attribution)
    echo(f"report: a2rl report {doc['id']}")


def _print_attribution(attribution: Any) -> None:
    """`a2rl show`'s attribution block: each stage's score and gain, oldest first."""
    from a2rl.analysis.fmt import attribution_rows  # a2rl.analysis: see `show`

    if attribution is None:
        return

    echo(f"attribution ({attribution.split}, the final checkpoint's stages, oldest first)")
    for checkpoint, route, job, value, gain, source in attribution_rows(attribution):
        echo(f"  {cell(checkpoint)[:24]:24} {route:8} {cell(job):12} {value:>6}  {gain:28} "
             f"{cell(source)}")


def _print_lineage(section: Any) -> None:
    """`a2rl show`'s lineage block: the final submission's chain (else the last one's)."""
    from a2rl.analysis.lineage_view import lineage_lines  # a2rl.analysis: see `show`

    if section is None:
        return
    which = "final" if section.shown_submission_id == section.final_submission_id else "last"
    echo(f"lineage of {section.shown_submission_id} ({which}, "
               f"{cell(section.shown.checkpoint)}), newest first")
    for text in lineage_lines(section.shown):
        echo(f"  {text}")


def _print_show(doc: dict[str, Any], details: dict[str, list[dict[str, Any]]],
                improvement: str) -> None:
    """`a2rl show`: a few labelled blocks a person reads top to bottom. Each value is one
    line (`cell`), whatever the agent put in it."""
    # a2rl.analysis: see `show`
    from a2rl.analysis.fmt import evaluation_config
    from a2rl.analysis.ledger_view import ledger_rows, size
    from a2rl.analysis.lineage_view import visible
    from a2rl.analysis.schema import LedgerSection

    def line(label: str, value: Any) -> None:
        echo(f"  {label:16} {cell(value)}")

    echo(f"run {doc['id']}  {doc['status']}"
         + (f" ({cell(doc['end_reason'])})" if doc.get("end_reason") else ""))
    if doc.get("end_kind"):  # how it ended, and whether compare and fleet summaries count it
        line("end", doc["end_kind"].replace("_", " ")
             + ("" if doc["result"] else "; not counted as a result by compare"))
    audit = doc.get("audit")
    line("audit", "not audited" if audit is None else
         f"FLAGGED: {audit['high']} high-severity flags (a2rl audit {doc['id']})"
         if audit["flagged"] else f"no high-severity flag ({audit['flags']} flags)")
    line("task", doc["task_id"])
    agent = " ".join(str(x) for x in (doc["agent"], doc["agent_version"], doc["driver_model"])
                     if x) or f"{agent_label(None, doc.get('kind'))} (made with a2rl create)"
    line("agent", agent + (f" [{doc['agent_status']}]" if doc.get("agent_status") else ""))
    if doc.get("agent_error"):  # why it failed, or the limit it stopped at (stored one line)
        line("agent error", doc["agent_error"])
    line("base model", doc["base_model"] or "-")
    line("created", f"{when(doc['created_at'])} UTC")
    line("ran", f"{when(doc['started_at'])} to {when(doc['ended_at'])} "
         f"({duration(doc['started_at'], doc['ended_at'])} of a {seconds(doc['budget_s'])} "
         "budget)"
         if doc["started_at"] else "not started (the clock starts at the first tool call)")
    echo("settings")
    config = RunConfig.from_stored(doc.get("config"))
    fixed = config.setup.sandbox  # what the backend fixed when the run was made
    line("backend", doc["backend"] + (f" (image {fixed.get('image')}, GPUs "
                                      f"{','.join(fixed.get('gpus') or []) or 'none'})"
                                      if fixed.get("image") else ""))
    line("network", "bridge" if config.network else "none")
    line("protocol", doc["protocol"])
    line("profile", doc.get("profile") or "a2rl")
    line("grading clock", doc["grading_clock"])
    line("max submissions", doc["max_submissions"] or "unlimited")
    line("seed", doc["seed"] if doc["seed"] is not None else "-")
    line("evaluation", evaluation_config(doc.get("evaluation_config")))
    if doc.get("fleet_id"):
        line("fleet", f"{doc['fleet_id']} repeat {doc['fleet_repeat']} on {doc['fleet_node']}")
    line("workspace", doc["workspace"])
    echo("counts")
    line("tool calls", f"{doc['tool_calls']} ({doc['tool_errors']} errors)")
    line("jobs", doc["jobs"])
    recorded = [j.get("files_recorded") for j in details["job_list"]]
    if any(recorded):  # the kernel's record of the files they opened (None: older rows)
        whole = sum(r == "complete" for r in recorded)
        why = sorted({r for r in recorded if r and r != "complete"})
        line("file accesses", f"recorded whole for {whole} of {len(recorded)} jobs"
             + (f"; {visible(why[0])}" if why else "")
             + (f" (and {len(why) - 1} other reasons)" if len(why) > 1 else ""))
    line("submissions", doc["submissions"])
    line("code revisions", doc["revisions"])
    echo("scores")
    line("baseline", f"dev {score(doc['baseline_dev'])}  test {score(doc['baseline_test'])}")
    line("final (test)", score(doc["final_score"])
         + (f" from {doc['final_submission_id']}" if doc.get("final_submission_id") else
            f" ({doc['final_note']})" if doc.get("final_note") else ""))
    line("improvement", improvement)
    for r in doc.get("regrades") or []:  # each regrade, the current one's scores shown above
        line("regraded" if r["current"] else "second reading",
             f"{r['at'][:16].replace('T', ' ')} UTC, {r['reason']}: final {score(r['old_final'])}"
             f" -> {score(r['new_final'])}, baseline {score(r['old_baseline'])} -> "
             f"{score(r['new_baseline'])}, {r['changed_items']} items changed verdict"
             + (f" ({r['error']})" if r.get("error") else ""))
    echo("cost ledger")
    cost = doc.get("ledger")
    for label, value in ledger_rows(LedgerSection(**cost) if cost is not None else None):
        line(label, value)
    jobs, subs = details["job_list"], details["submission_list"]
    if jobs:
        echo("jobs")
        for j in jobs:
            code = "" if j["exit_code"] is None else f" exit {j['exit_code']}"
            took = duration(j["started_at"], j["ended_at"])
            cpu = "-" if j.get("cpu_s") is None else f"{j['cpu_s']:.1f}s"
            peak = size(j.get("memory_peak_bytes"))
            echo(f"  {j['id']:12} {j['state'] + code:14} {took:>8}  cpu {cpu:>7}  "
                 f"peak {peak:>9}  {cell(j['command'])[:60]}")
    if subs:
        echo("submissions")
        for x in subs:
            scores = "  ".join(f"{k} {score(v)}" for k, v in sorted(x["scores"].items()))
            why = f"  {cell(x['error'].splitlines()[-1])[:60]}" if x["error"] else ""
            echo(f"  {x['id']:12} {x['status']:8} {cell(x['path'])[:30]:30} {scores}{why}")


def audit(
    run_id: Annotated[str | None, typer.Argument(help="a run id")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="every finished run")] = False,
    recompute: Annotated[bool, typer.Option(help="compute again, replacing the stored")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check runs for cheating: print the audit's flags; exit 1 when a high flag stands, 2 when
    the audit is incomplete (a check failed or could not read what it must)."""
    if (run_id is None) == (not all_runs):
        fail("give one run id or --all")
    # the audit's checks: ~7 ms of every command's start-up, for `audit` alone
    from a2rl.audit.cli_view import audits, exit_status, finished_run_ids, format_report

    settings = context.settings()
    store = context.read_store(settings)
    if store is None:
        no_run(run_id or "")
    ids = finished_run_ids(store) if all_runs else [run_id]
    try:
        reports = list(audits(store, settings, ids, recompute=recompute))  # type: ignore[arg-type]
    except KeyError:
        no_run(run_id or "")
    if as_json:
        docs = [{**r.model_dump(mode="json"), "incomplete": r.incomplete} for r in reports]
        print_json(docs if all_runs else docs[0])
    else:
        for report in reports:
            echo(format_report(report))
    raise typer.Exit(exit_status(reports))


def report(
    run_id: RunIdArg,
    fmt: Annotated[choices(*FORMATS), typer.Option("--format", help="the report's format")
                   ] = "md",
    out: Annotated[str | None, typer.Option("--out", help="write here instead of stdout")
                   ] = None,
    idle_threshold: Annotated[float, typer.Option(
        help="seconds with no tool call and no job that count as an idle gap")] = 120.0,
    narrative: Annotated[bool, typer.Option(
        "--narrative", help="add a short LLM-written narrative (narrative_* settings); "
        "best effort: without it the report is still written")] = False,
    require_narrative: Annotated[bool, typer.Option(
        "--require-narrative", help="like --narrative, but exit 1 (after writing the "
        "report) when no narrative could be generated")] = False,
) -> None:
    """A run's report: summary, timeline, scores, code history, training routes, failures."""
    # a2rl.analysis: ~70 ms of every command's start-up (see `show`)
    from a2rl.analysis import build_report, render, training_curves
    from a2rl.analysis.fmt import narrative_note
    from a2rl.analysis.narrative import add_narrative

    settings = context.settings()
    if out and not Path(out).expanduser().parent.is_dir():
        fail(f"--out {out}: the folder {Path(out).expanduser().parent} does not exist")
    store = context.read_store(settings)
    if store is None:
        no_run(run_id)
    try:
        doc = build_report(store, run_id, idle_threshold_s=idle_threshold)
    except KeyError:
        no_run(run_id)
    if narrative or require_narrative:
        doc = add_narrative(doc, settings)
        assert doc.narrative is not None
        if doc.narrative.status != "generated":
            echo(f"a2rl: {narrative_note(doc.narrative)}", err=True)
    text = render(doc, fmt, training_curves(store, run_id) if fmt == "html" else None)
    if out:
        try:
            Path(out).expanduser().write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"--out {out}: {exc.strerror or exc}")
        echo(f"wrote {out}", err=True)
    else:
        write(text)
    if require_narrative and doc.narrative and doc.narrative.status != "generated":
        raise typer.Exit(1)


def view(
    host: Annotated[str, typer.Option(help="address to bind; off loopback a token is required"
                                      )] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port to listen on (a2rl "
                                      "serve --http has 8765)")] = VIEW_PORT,
    fleet: Annotated[str | None, typer.Option(help="open on this fleet's runs")] = None,
    token: Annotated[str | None, typer.Option(
        help="required on every request (generated and printed when binding off loopback)")
    ] = None,
) -> None:
    """Browse the store in a local web app: runs, a run's conversation, compare, live runs."""
    # the viewer (Starlette, uvicorn, a2rl.analysis): ~100 ms of every command's start-up
    from a2rl.analysis.web import StoreOpenError, serve

    settings = context.settings()
    if (store := context.read_store(settings)) is not None:  # overdue runs finalized first
        store.close()
    try:
        serve(settings.database_url, host=host, port=port, fleet=fleet, token=token,
              say=lambda m: echo(m, err=True))
    except (StoreOpenError, ListenError) as exc:
        fail(str(exc))


def compare(
    run_ids: Annotated[list[str] | None, typer.Argument(
        metavar="[RUN]...", help="compare these runs (with the filters: those that match)",
        show_default=False)] = None,
    task: TaskFilterOpt = None,
    agent: AgentFilterOpt = None,
    fleet: Annotated[str | None, typer.Option(help="only the finished runs of this fleet")
                     ] = None,
    profile: Annotated[choices(*PROFILES) | None, typer.Option(
        help="only runs evaluated under this profile (a2rl or paper); either way the profiles "
             "are grouped and ranked apart")] = None,
    include_unfinished: Annotated[bool, typer.Option(
        help="count every run in the means, not only results (runs ended by the agent or "
             "the budget)")] = False,
    exclude_flagged: Annotated[bool, typer.Option(
        help="leave the runs the audit flagged out of the means")] = False,
    as_json: JsonFlag = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="the per-run rows as CSV")] = False,
) -> None:
    """Compare runs: one row per run, means and spread over repeats, a leaderboard per task
    and evaluation profile. The means count results only (runs ended by the agent or the
    budget); the others are listed apart, with why."""
    # a2rl.analysis: ~70 ms of every command's start-up (see `show`)
    from a2rl.analysis import compare as compare_runs
    from a2rl.analysis import render_csv, render_json, render_text
    from a2rl.analysis.compare import Comparison

    settings = context.settings()
    store = context.read_store(settings)
    if store is None and run_ids:
        no_run(run_ids[0])
    try:
        result = compare_runs(store, task=task, agent=agent, fleet=fleet, profile=profile,
                              run_ids=run_ids, include_unfinished=include_unfinished,
                              exclude_flagged=exclude_flagged) if store is not None \
            else Comparison(rows=[], groups=[], leaderboard={})
    except KeyError as exc:
        fail(str(exc.args[0]))
    if not result.rows and (run_ids or task or agent or fleet or profile):
        fail("no runs match the filters given (see a2rl runs)")
    if as_json:
        print_json(json.loads(render_json(result)))
    elif as_csv:
        sys.stdout.write(render_csv(result))
    elif not result.rows:
        echo("no runs match: try `a2rl demo`")
    else:
        write(render_text(result))
