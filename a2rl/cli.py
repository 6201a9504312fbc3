"""The `a2rl` command line. Thin: each command resolves settings and calls the library.

`--json` prints exactly one JSON document on stdout and nothing else there; progress and
warnings go to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Annotated, Any

import typer

from a2rl.settings import Settings, load_settings

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="a2rl: can LLM agents engineer post-training? An MCP benchmark harness.")
config_app = typer.Typer(help="Settings.", no_args_is_help=True)
app.add_typer(config_app, name="config")
alfworld_app = typer.Typer(help="ALFWorld's game files (task alfworld).", no_args_is_help=True)
app.add_typer(alfworld_app, name="alfworld")

JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON document")]
GpusOpt = Annotated[str | None, typer.Option(
    help="GPUs for the run's container, e.g. 0 or 0,1 (docker backend)")]
NetworkOpt = Annotated[str, typer.Option(help="none (default) or bridge")]
KeepOpt = Annotated[bool, typer.Option(help="keep the run's container when it ends")]


def _sandbox_options(gpus: str | None, network: str, keep_container: bool) -> dict[str, Any]:
    if network not in ("none", "bridge"):
        _fail(f"--network must be none or bridge, not {network!r}")
    ids = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    if any(not g.isdigit() for g in ids):
        _fail(f"--gpus takes device numbers such as 0 or 0,1, not {gpus!r}")
    return {"gpus": ids, "network": network == "bridge", "keep_container": keep_container}


def _settings(**overrides: Any) -> Settings:
    try:
        return load_settings(overrides)[0]
    except Exception as exc:  # a broken config file or variable: say which, don't trace
        _fail(f"bad settings: {exc}")
        raise


def _store(settings: Settings):  # type: ignore[no-untyped-def]
    from a2rl.store import Store

    settings.home_dir.mkdir(parents=True, exist_ok=True)
    return Store(settings.database_url)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"a2rl: {message}", err=True)
    raise typer.Exit(code)


def _progress() -> Any:
    """Progress lines on stderr, stamped with the seconds since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        typer.echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    return say


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


@config_app.command("show")
def config_show(as_json: JsonFlag = False) -> None:
    """Show every setting, its value and where it came from (default, file, env, cli)."""
    settings, sources = load_settings()
    rows = {name: {"value": getattr(settings, name), "source": sources[name],
                   "description": field.description}
            for name, field in Settings.model_fields.items()}
    rows["db_url"]["value"] = settings.database_url
    if as_json:
        _print_json({k: {"value": v["value"], "source": v["source"]} for k, v in rows.items()})
        return
    for name, row in rows.items():
        typer.echo(f"{name:20} = {row['value']!s:50} [{row['source']}]  # {row['description']}")


@alfworld_app.command("download")
def alfworld_download(
    force: Annotated[bool, typer.Option(help="download and unpack again")] = False,
) -> None:
    """Fetch ALFWorld's games once (needs the network) into alfworld_dir (default
    $A2RL_HOME/data/alfworld), then compute the task's expert demonstrations (cached)."""
    from a2rl.tasks.alfworld.download import download, target_dir
    from a2rl.tasks.alfworld.task import demo_rows

    settings = _settings()
    typer.echo(f"ALFWorld games -> {target_dir(settings)}", err=True)
    try:
        folder = download(settings, force=force)
    except RuntimeError as exc:
        _fail(str(exc), code=1)
    typer.echo("expert demonstrations (once, a few minutes)...", err=True)
    typer.echo(f"ALFWorld games in {folder}; {len(demo_rows(folder, settings))} demo steps")


@app.command()
def create(
    task: Annotated[str, typer.Option(help="task id (see a2rl tasks)")] = "arith",
    budget: Annotated[str | None, typer.Option(help="e.g. 30m, 2h; default: the task's")] = None,
    backend: Annotated[str | None, typer.Option(help="local or docker")] = None,
    max_submissions: Annotated[int | None, typer.Option(help="default: unlimited")] = None,
    protocol: Annotated[str, typer.Option(
        help="heldout: dev scores during the run, test at the end; paper: test every time")
    ] = "heldout",
    grading_clock: Annotated[str, typer.Option(
        help="counted: grading time uses the budget; paused: the deadline moves by it")
    ] = "counted",
    unsafe_local: Annotated[bool, typer.Option(
        help="allow the local backend without bubblewrap for any task")] = False,
    gpus: GpusOpt = None,
    network: NetworkOpt = "none",
    keep_container: KeepOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Make a run for an agent you start yourself; prints its id and HTTP token (shown once)."""
    from a2rl.server import create_run
    from a2rl.tools.sandbox.base import SandboxError

    settings = _settings(backend=backend)
    store = _store(settings)
    try:
        created = create_run(settings, store, task_id=task, budget=budget,
                             max_submissions=max_submissions, unsafe_local=unsafe_local or None,
                             protocol=protocol, grading_clock=grading_clock,
                             **_sandbox_options(gpus, network, keep_container))
    except (KeyError, ValueError, SandboxError) as exc:
        _fail(str(exc).strip("'\""))
        return
    run = created.run
    doc = {"run_id": run.id, "token": created.token, "task": run.task_id,
           "workspace": run.workspace, "budget_s": run.budget_s,
           "mcp_url": f"http://{settings.http_host}:{settings.http_port}/mcp"}
    if as_json:
        _print_json(doc)
        return
    typer.echo(f"run {run.id} created (task {run.task_id}, budget {run.budget_s:.0f} s)")
    typer.echo(f"token (shown once): {created.token}")
    typer.echo(f"stdio:  a2rl serve --run {run.id}")
    typer.echo(f"http:   a2rl serve --http   then connect to {doc['mcp_url']} with the token")


@app.command()
def finish(run_id: Annotated[str, typer.Argument(help="the run to end")],
           as_json: JsonFlag = False) -> None:
    """End a run: stop its jobs and sandbox and close its record."""
    from a2rl.server import finish_run

    settings = _settings()
    try:
        run = finish_run(settings, _store(settings), run_id, reason="finished by a2rl finish")
    except KeyError as exc:
        _fail(str(exc).strip("'\""))
        return
    if as_json:
        _print_json(run.model_dump(mode="json", exclude={"token_hash"}))
    else:
        typer.echo(f"run {run.id} finished ({run.end_reason})")


@app.command()
def serve(
    run: Annotated[str | None, typer.Option("--run", help="serve this run over stdio")] = None,
    http: Annotated[bool, typer.Option(
        "--http", help="serve all runs over streamable HTTP")] = False,
    host: Annotated[str | None, typer.Option(help="HTTP address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port")] = None,
    allow_remote: Annotated[bool, typer.Option(
        help="allow listening on a non-loopback address")] = False,
) -> None:
    """Serve MCP: one run over stdio (--run RUN_ID), or every run over HTTP (--http)."""
    from a2rl.server.transports import serve_http, serve_stdio

    settings = _settings(http_host=host, http_port=port)
    if http == (run is not None):
        _fail("give exactly one of --run RUN_ID (stdio) or --http")
    if http:
        if settings.http_host not in {"127.0.0.1", "localhost", "::1"} and not allow_remote:
            _fail(f"refusing to listen on {settings.http_host}: runs' tools execute commands; "
                  "pass --allow-remote to listen beyond loopback")
        serve_http(settings, _store(settings))
    else:
        assert run is not None
        serve_stdio(settings, _store(settings), run)


@app.command()
def runs(as_json: JsonFlag = False) -> None:
    """List runs, newest first."""
    from a2rl.store.queries import list_runs

    settings = _settings()
    rows = list_runs(_store(settings))
    if as_json:
        _print_json(rows)
        return
    if not rows:
        typer.echo("no runs yet: try `a2rl demo`")
    for r in rows:
        typer.echo(f"{r['run_id']}  {r['task']:10} {r['status']:10} {r['created_at']:25} "
                   f"calls={r['tool_calls']:<5} final={r['final_score']}")


@app.command()
def show(run_id: Annotated[str, typer.Argument(help="a run id")],
         as_json: JsonFlag = False) -> None:
    """Show one run: its settings, counts, jobs and scores."""
    from a2rl.store.queries import run_summary

    settings = _settings()
    doc = run_summary(_store(settings), run_id)
    if doc is None:
        _fail(f"run {run_id!r} does not exist (see a2rl runs)")
    if as_json:
        _print_json(doc)
        return
    for key, value in (doc or {}).items():
        typer.echo(f"{key:18} {value}")


@app.command("run")
def run_cmd(
    task: Annotated[str, typer.Option(help="task id (see a2rl tasks)")] = "arith",
    agent: Annotated[str, typer.Option(help="agent system (see a2rl agents)")] = "reference",
    model: Annotated[str | None, typer.Option(help="the driver model of the agent")] = None,
    budget: Annotated[str | None, typer.Option(help="e.g. 20m, 2h; default: the task's")] = None,
    backend: Annotated[str | None, typer.Option(help="local or docker")] = None,
    gpus: GpusOpt = None,
    network: NetworkOpt = "none",
    keep_container: KeepOpt = False,
    protocol: Annotated[str, typer.Option(help="heldout or paper")] = "heldout",
    max_submissions: Annotated[int | None, typer.Option(help="default: unlimited")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the first run")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="runs one after another, seeds S, S+1..")
                       ] = 1,
    llm_base_url: Annotated[str | None, typer.Option(
        help="--agent llm: an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")] = None,
    llm_api_key_env: Annotated[str, typer.Option(
        help="--agent llm: the variable holding the endpoint's key")] = "OPENAI_API_KEY",
    agent_option: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE passed to the connector, e.g. anthropic_base_url=http://...")] = None,
    fleet: Annotated[str | None, typer.Option(hidden=True, help="set by a2rl fleet")] = None,
    fleet_repeat: Annotated[int | None, typer.Option(hidden=True)] = None,
    fleet_node: Annotated[str | None, typer.Option(hidden=True)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run an agent on a task: create, serve MCP, launch headless, budget, finalize, report."""
    from a2rl.clients.orchestrator import Orchestrator, RunOptions

    settings = _settings(backend=backend)
    store = _store(settings)
    say = _progress()

    agent_options = {"llm_api_key_env": llm_api_key_env}
    if llm_base_url:
        agent_options["llm_base_url"] = llm_base_url
    for item in agent_option or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--agent-option takes KEY=VALUE, not {item!r}")
        agent_options[key] = value
    summaries = []
    for i in range(repeats):
        opts = RunOptions(task=task, agent=agent, model=model, budget=budget, backend=backend,
                          protocol=protocol, max_submissions=max_submissions,
                          seed=None if seed is None else seed + i, agent_options=agent_options,
                          sandbox=_sandbox_options(gpus, network, keep_container),
                          fleet_id=fleet, fleet_node=fleet_node,
                          fleet_repeat=None if fleet is None else (fleet_repeat or 0) + i)
        try:
            summaries.append(Orchestrator(settings, store, say).run(opts))
        except (KeyError, ValueError, RuntimeError) as exc:
            _fail(str(exc).strip("'\""))
    if as_json:
        docs = [s.model_dump() for s in summaries]
        _print_json(docs[0] if repeats == 1 else docs)
        _exit_on_grading_failure(*summaries)
        return
    for summary in summaries:
        _print_summary(summary)
    _exit_on_grading_failure(*summaries)


@app.command()
def agents(as_json: JsonFlag = False) -> None:
    """List the agent systems and whether each is installed."""
    from a2rl.clients.registry import list_connectors

    rows = list_connectors()
    if as_json:
        _print_json(rows)
        return
    for r in rows:
        state = f"installed {r['version'] or ''}" if r["installed"] else "not installed"
        flag = " (experimental)" if r["experimental"] else ""
        typer.echo(f"{r['name']:12} {r['kind']:9} {state:24} {r['title']}{flag}")


@app.command()
def gc(
    include_final: Annotated[bool, typer.Option(
        help="also remove the final checkpoint copies of finished runs")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove what finished runs no longer need (checkpoint copies, sandbox leftovers)."""
    from a2rl.server.gc import collect_garbage

    settings = _settings()
    result = collect_garbage(settings, _store(settings), include_final=include_final)
    if as_json:
        _print_json(result)
        return
    typer.echo(f"removed {len(result['removed'])} items, {result['bytes_freed']} bytes freed")


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="a run id")],
    fmt: Annotated[str, typer.Option("--format", help="md, html or json")] = "md",
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
    from pathlib import Path

    from a2rl.analysis import build_report, render

    if fmt not in ("md", "html", "json"):
        _fail(f"--format must be md, html or json, not {fmt!r}")
    settings = _settings()
    try:
        doc = build_report(_store(settings), run_id, idle_threshold_s=idle_threshold)
    except KeyError:
        _fail(f"run {run_id!r} does not exist (see a2rl runs)")
        raise
    if narrative or require_narrative:
        from a2rl.analysis.fmt import narrative_note
        from a2rl.analysis.narrative import add_narrative

        doc = add_narrative(doc, settings)
        assert doc.narrative is not None
        if doc.narrative.status != "generated":
            typer.echo(f"a2rl: {narrative_note(doc.narrative)}", err=True)
    text = render(doc, fmt)
    if out:
        Path(out).write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}", err=True)
    else:
        sys.stdout.write(text)
    if require_narrative and doc.narrative and doc.narrative.status != "generated":
        raise typer.Exit(1)


@app.command()
def compare(
    task: Annotated[str | None, typer.Option(help="only runs of this task")] = None,
    agent: Annotated[str | None, typer.Option(help="only runs of this agent")] = None,
    fleet: Annotated[str | None, typer.Option(help="only the finished runs of this fleet")
                     ] = None,
    as_json: JsonFlag = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="the per-run rows as CSV")] = False,
) -> None:
    """Compare runs: one row per run, means and spread over repeats, a leaderboard per task."""
    from a2rl.analysis import compare as compare_runs
    from a2rl.analysis import render_csv, render_json, render_text

    settings = _settings()
    result = compare_runs(_store(settings), task=task, agent=agent, fleet=fleet)
    if as_json:
        sys.stdout.write(render_json(result))
    elif as_csv:
        sys.stdout.write(render_csv(result))
    elif not result.rows:
        typer.echo("no runs match: try `a2rl demo`")
    else:
        sys.stdout.write(render_text(result))


@app.command()
def fleet(
    plan_file: Annotated[str | None, typer.Option(
        "--plan", help="a TOML plan (see the README); flags given override it")] = None,
    name: Annotated[str | None, typer.Option(
        help="the fleet's name; running it again resumes it")] = None,
    task: Annotated[list[str] | None, typer.Option(help="a task id (repeatable)")] = None,
    agent: Annotated[list[str] | None, typer.Option(
        help="NAME or NAME:MODEL (repeatable)")] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="runs per task, agent and model")
                       ] = None,
    budget: Annotated[str | None, typer.Option(help="per run, e.g. 2h")] = None,
    gpus_per_run: Annotated[float | None, typer.Option(help="GPUs each run asks Ray for")
                            ] = None,
    resource: Annotated[str | None, typer.Option(
        help="a custom Ray resource each run takes one unit of (nodes without GPUs)")] = None,
    backend: Annotated[str | None, typer.Option(help="local or docker, on every node")] = None,
    seed: Annotated[int | None, typer.Option(help="repeat i runs with seed + i")] = None,
    agent_option: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE passed to every agent's connector")] = None,
    address: Annotated[str | None, typer.Option(
        help="auto, ray://HOST:10001 or HOST:6379; default: a local Ray instance")] = None,
    slots: Annotated[int, typer.Option(
        help="units of --resource a local Ray instance offers")] = 1,
    as_json: JsonFlag = False,
) -> None:
    """Run a plan (tasks x agents x models x repeats) on a Ray cluster, into one store."""
    from pathlib import Path

    from pydantic import ValidationError

    from a2rl.fleet import FleetRunner, load_plan, plan_from_flags

    options: dict[str, str] = {}
    for item in agent_option or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--agent-option takes KEY=VALUE, not {item!r}")
        options[key] = value
    fields = {"budget": budget, "gpus_per_run": gpus_per_run, "resource": resource,
              "backend": backend, "seed": seed}
    try:
        if plan_file:
            plan = load_plan(Path(plan_file), name=name, repeats=repeats, tasks=task, **fields)
        else:
            if not (name and task and agent):
                _fail("give --plan FILE, or --name, --task and --agent")
            plan = plan_from_flags(name or "", task or [], agent or [], repeats or 1, options,
                                   **fields)
    except (OSError, ValueError, ValidationError) as exc:
        _fail(f"bad plan: {exc}")
        raise
    if options and plan_file:
        for a in plan.agents:
            a.options.update(options)
    settings = _settings()
    store = _store(settings)
    if address and store.dialect == "sqlite":
        typer.echo("a2rl: warning: the store is a SQLite file, which nodes on other machines "
                   "cannot reach; set A2RL_DB_URL to a PostgreSQL URL", err=True)
    runner = FleetRunner(plan, store, settings.database_url, say=_progress(), address=address,
                         local_resources={plan.resource: slots} if plan.resource else None)
    try:
        result = runner.run()
    except RuntimeError as exc:
        _fail(str(exc))
        raise
    if as_json:
        _print_json({**result.model_dump(), "counts": result.counts})
    else:
        for r in result.runs:
            typer.echo(f"{r.label:40} {r.state:12} {r.run_id or '-':14} {r.host or ''}")
        typer.echo(f"fleet {result.fleet}: {result.planned} planned, {result.already_done} "
                   f"already finished; this time {result.counts or 'nothing to run'}")
        typer.echo(f"compare them: a2rl compare --fleet {result.fleet}")
    if result.stopped or any(r.state == "failed" for r in result.runs):
        raise typer.Exit(1)


@app.command("export")
def export_cmd(
    run_id: Annotated[str, typer.Argument(help="a finished run")],
    out: Annotated[str | None, typer.Option(
        "--out", help="archive path (default: a2rl-RUN.tar.gz here)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write one archive with a finished run's rows, blobs, report and a manifest of hashes."""
    from pathlib import Path

    from a2rl.analysis.archive import ArchiveError, export_run

    settings = _settings()
    try:
        result = export_run(_store(settings), run_id, Path(out) if out else None)
    except KeyError:
        _fail(f"run {run_id!r} does not exist (see a2rl runs)")
        raise
    except (ArchiveError, OSError) as exc:
        _fail(str(exc))
        raise
    if as_json:
        _print_json(result.model_dump())
        return
    typer.echo(f"wrote {result.path} ({result.bytes} bytes: {result.counts['toolcall']} tool "
               f"calls, {result.counts['submission']} submissions, {result.counts['blob']} blobs)")


@app.command("import")
def import_cmd(
    archive: Annotated[str, typer.Argument(help="an archive written by a2rl export")],
    as_json: JsonFlag = False,
) -> None:
    """Load a run archive into this installation's store (a run already present is skipped)."""
    from pathlib import Path

    from a2rl.analysis.archive import ArchiveError, import_run

    settings = _settings()
    try:
        result = import_run(_store(settings), Path(archive))
    except ArchiveError as exc:
        _fail(str(exc))
        raise
    if as_json:
        _print_json(result.model_dump())
        return
    typer.echo(f"run {result.run_id}: {result.detail}")


@app.command()
def tasks(as_json: JsonFlag = False) -> None:
    """List the tasks with their levels."""
    from a2rl.tasks import list_tasks

    rows = [{"id": t.spec.id, "level": t.spec.level, "title": t.spec.title,
             "default_budget": t.spec.default_budget} for t in list_tasks()]
    if as_json:
        _print_json(rows)
        return
    for r in rows:
        typer.echo(f"{r['id']:12} level {r['level']}  {r['title']}")


@app.command()
def demo(
    task: Annotated[str, typer.Option(help="task id")] = "arith",
    backend: Annotated[str | None, typer.Option(help="local or docker")] = None,
    gpus: GpusOpt = None,
    keep_container: KeepOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """The main job: the reference agent post-trains the tiny model on a toy task, recorded."""
    from a2rl.demo import DEMO_FIELDS, run_demo

    settings = _settings(backend=backend)
    store = _store(settings)
    say = _progress()

    options = _sandbox_options(gpus, "none", keep_container)
    try:
        summary = run_demo(settings, store, task=task, backend=backend, say=say, **options)
    except (KeyError, ValueError, RuntimeError) as exc:
        _fail(str(exc).strip("'\""))
        return
    if as_json:
        _print_json(summary.model_dump(include=set(DEMO_FIELDS)))
    else:
        _print_summary(summary)
    _exit_on_grading_failure(summary)


def _print_summary(summary: Any) -> None:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    agent = f", agent {summary.agent}: {summary.agent_status}" if summary.agent else ""
    typer.echo(f"\nrun {summary.run_id} ({summary.task}{agent}) in {summary.seconds:.0f} s")
    typer.echo(f"  baseline (test) {pct(summary.baseline_score)} -> best dev "
               f"{pct(summary.best_score)} -> final test {pct(summary.final_score)}")
    typer.echo(f"  {summary.submissions} submissions, {summary.tool_calls} tool calls, "
               f"{summary.revisions} code revisions recorded")
    typer.echo(f"  inspect it: a2rl show {summary.run_id}")


def _exit_on_grading_failure(*summaries: Any) -> None:
    """A run that produced no score is a failure (exit 1), shown with the grader's reasons."""
    failed = False
    for summary in summaries:
        for error in summary.grading_errors:
            typer.echo(f"a2rl: run {summary.run_id}: grading failed: {error}", err=True)
        if summary.final_score is None:
            failed = True
            typer.echo(f"a2rl: run {summary.run_id} produced no score"
                       + (f" ({summary.submissions_failed} submissions failed grading)"
                          if summary.submissions_failed else ""), err=True)
    if failed:
        raise typer.Exit(1)


def main() -> None:
    # Library progress bars would drown the demo's own progress lines.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    app()


if __name__ == "__main__":
    main()
