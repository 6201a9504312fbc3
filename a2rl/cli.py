"""The `a2rl` command line. Thin: each command resolves settings and calls the library.

`--json` prints exactly one JSON document on stdout and nothing else there; progress and
warnings go to stderr. Every error a user can cause is one line on stderr starting `a2rl:`
and a non-zero exit, never a traceback (`_A2rlGroup`), and commands that only read never
create a store (`_read_store`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NoReturn, get_args

import typer
from typer.core import TyperGroup, TyperOption

import a2rl
from a2rl import interrupt
from a2rl.listen import VIEW_PORT
from a2rl.settings import Settings, SettingsError, load_settings


class _A2rlGroup(TyperGroup):
    """Turns what a user can get wrong (a bad flag, bad settings, an unusable store) into one
    `a2rl: ...` line on stderr with exit code 2; genuine bugs still show their traceback."""

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        from sqlalchemy.exc import DBAPIError

        # typer >= 0.29 carries its own copy of click; its exceptions live here.
        from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

        from a2rl.store import StoreError

        code: Any = 0
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # `a2rl` alone: the help, as click shows it
            exc.show()
            code = exc.exit_code
        except ClickException as exc:
            where = exc.ctx.command_path if isinstance(exc, UsageError) and exc.ctx else "a2rl"
            hint = f" (see {where} -h)" if isinstance(exc, UsageError) else ""
            _say_error(f"{exc.format_message()}{hint}")
            code = exc.exit_code
        except (SettingsError, StoreError) as exc:
            _say_error(str(exc))
            code = 2
        except DBAPIError as exc:  # the store broke after it opened (disk full, server gone)
            from a2rl.store.db import _reason

            _say_error(f"the store failed: {_reason(exc)}")
            code = 2
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        """Ctrl-C, SIGTERM or SIGHUP (`a2rl.interrupt`) ending a command: one line and the
        exit a shell reports for that signal (130, 143, 129), never a traceback. Caught here,
        before typer turns every interrupt into a silent 130."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            signum = interrupt.cause()
            _say_error(f"interrupted ({interrupt.name(signum)})")
            raise typer.Exit(interrupt.exit_code(signum)) from None


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """Help's type column: a flag takes no value, so none is shown (typer shows `<bool>`)."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

app = typer.Typer(
    cls=_A2rlGroup, add_completion=True, no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Locals would print the run's token and API keys along with a bug's traceback.
    pretty_exceptions_show_locals=False,
    help="a2rl: can LLM agents engineer post-training? An MCP benchmark harness.")
config_app = typer.Typer(help="Settings.", no_args_is_help=True)
app.add_typer(config_app, name="config")
alfworld_app = typer.Typer(help="ALFWorld's game files (task alfworld).", no_args_is_help=True)
app.add_typer(alfworld_app, name="alfworld")


def choices(*values: str) -> Any:
    """A choice type for an option: help shows `[a|b|c]`, shell completion offers the values
    and anything else is refused with the list. Values known only at run time work the same:
    `Annotated[choices(*names()) | None, typer.Option(help=...)]`."""
    return Literal[values]  # type: ignore[valid-type]


BACKENDS = get_args(Settings.model_fields["backend"].annotation)
PROTOCOLS = ("heldout", "paper")
PROFILES = ("a2rl", "paper")  # a2rl.tasks.profiles.PROFILES, without importing the tasks
NETWORKS = ("none", "bridge")
FORMATS = ("md", "html", "json")
# the values of a2rl.store.RunStatus and GradingClock (a test holds them equal), spelled out:
# the CLI starts without importing the store
RUN_STATUSES = ("created", "running", "finalizing", "finished", "failed")
GRADING_CLOCKS = ("counted", "paused")
LOG_LEVELS = ("debug", "info", "warning", "error")

JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON document")]
GpusOpt = Annotated[str | None, typer.Option(
    help="GPUs for the run's container, e.g. 0 or 0,1 (docker backend)")]
NetworkOpt = Annotated[choices(*NETWORKS), typer.Option(
    help="the sandbox's network: none, or bridge (internet)")]
KeepOpt = Annotated[bool, typer.Option(help="keep the run's container when it ends")]
BackendOpt = Annotated[choices(*BACKENDS) | None, typer.Option(
    help="sandbox backend; default: the backend setting")]
ProtocolOpt = Annotated[choices(*PROTOCOLS), typer.Option(
    help="heldout: dev scores during the run, test at the end; paper: test every time")]
GradingClockOpt = Annotated[choices(*GRADING_CLOCKS), typer.Option(
    help="counted: grading time uses the budget; paused: the deadline moves by it")]
UnsafeLocalOpt = Annotated[bool, typer.Option(
    help="allow the local backend without bubblewrap for any task")]
ProfileOpt = Annotated[choices(*PROFILES), typer.Option(
    help="evaluation profile: a2rl (ours) or paper (the reference harness's; "
    "docs/paper-fidelity.md)")]
MaxSubmissionsOpt = Annotated[int | None, typer.Option(min=1, help="default: unlimited")]
TaskOptionOpt = Annotated[list[str] | None, typer.Option(
    "-T", "--task-option", metavar="KEY=VALUE",
    help="a task option (repeatable; see a2rl tasks <id>), over \\[tasks.<id>] in config.toml")]

_quiet = False  # --quiet: no progress lines


def _say_error(message: str) -> None:
    typer.echo(f"a2rl: {message}", err=True)


def _configure_logging(level: str) -> None:
    """One stderr handler for every library, at `level`. Installed before any server is
    built, so that the MCP library's own setup (a handler at INFO) does not apply and its
    per-request lines stay out of the progress lines. Child `a2rl serve` processes inherit
    the level through A2RL_LOG_LEVEL."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name("a2rl")
        handler.setFormatter(logging.Formatter("a2rl: %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    for handler in root.handlers:
        if handler.get_name() == "a2rl":  # loggers with their own level propagate here too
            handler.setLevel(level.upper())
    root.setLevel(level.upper())
    os.environ["A2RL_LOG_LEVEL"] = level


def _version(value: bool) -> None:
    if value:
        typer.echo(f"a2rl {a2rl.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="no progress lines; only warnings and errors")] = False,
    log_level: Annotated[choices(*LOG_LEVELS), typer.Option(
        envvar="A2RL_LOG_LEVEL", help="libraries' log lines shown on stderr (the MCP "
        "server's per-request lines are info)")] = "warning",
) -> None:
    """a2rl: can LLM agents engineer post-training? An MCP benchmark harness."""
    global _quiet
    _quiet = quiet
    _configure_logging("error" if quiet else log_level)


def _message(exc: BaseException) -> str:
    """An exception's message as written (KeyError's str() adds quotes)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _sandbox_options(gpus: str | None, network: str, keep_container: bool) -> dict[str, Any]:
    ids = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    if any(not g.isdigit() for g in ids):
        _fail(f"--gpus takes device numbers such as 0 or 0,1, not {gpus!r}")
    return {"gpus": ids, "network": network == "bridge", "keep_container": keep_container}


def _check_run_options(task: str | None = None, budget: str | None = None) -> None:
    """Refuse a bad task or budget before anything is created or printed."""
    from a2rl.settings import parse_duration

    if budget is not None:
        try:
            parse_duration(budget)
        except ValueError as exc:
            _fail(f"--budget: {exc}")
    if task is not None:
        from a2rl.tasks import get_task

        try:
            get_task(task)
        except KeyError as exc:
            _fail(_message(exc))


def _task_options(task: str, pairs: list[str] | None, settings: Settings,
                  profile: str = "a2rl") -> dict[str, str]:
    """`-T key=value` pairs for `task`, checked against its options now: a bad key or value
    is one line naming the task, the key and what is allowed, before anything is made."""
    from a2rl.tasks import OptionsError, get_task, parse_assignments

    try:
        given = parse_assignments(pairs or [])
        get_task(task, profile).with_options(given).options(settings)
    except OptionsError as exc:
        _fail(str(exc))
    except (KeyError, ValueError) as exc:
        _fail(_message(exc))
    return given


def _settings(**overrides: Any) -> Settings:
    try:
        return load_settings(overrides)[0]
    except SettingsError as exc:  # a broken config file or variable: say which, don't trace
        _fail(str(exc))


def _store(settings: Settings):  # type: ignore[no-untyped-def]
    """The store, created on first use (commands that make runs)."""
    from a2rl.store import Store

    settings.home_dir.mkdir(parents=True, exist_ok=True)
    return _finalize_overdue(settings, Store(settings.database_url))


def _read_store(settings: Settings):  # type: ignore[no-untyped-def]
    """The store for a command that only looks: None when none exists yet, and none is made
    (`a2rl show r-typo` on a fresh installation leaves it empty)."""
    from a2rl.store import Store, StoreMissing

    try:
        return _finalize_overdue(settings, Store(settings.database_url, create=False))
    except StoreMissing:
        return None


def _finalize_overdue(settings: Settings, store: Any) -> Any:
    """Any command that opens the store first finalizes this machine's runs that are past
    their deadline with no live process holding them (`a2rl.server.run.owner`); said on
    stderr, so `--json` output stays one document."""
    from a2rl.store.owners import overdue_runs

    if overdue_runs(settings.runs_dir, store):  # the server's code only when one is due
        from a2rl.server.run.owner import finalize_overdue

        finalize_overdue(settings, store, say=lambda m: None if _quiet else _say_error(m))
    return store


def _no_run(run_id: str) -> NoReturn:
    _fail(f"run {run_id!r} does not exist (see a2rl runs)")


def _fail(message: str, code: int = 2) -> NoReturn:
    _say_error(message)
    raise typer.Exit(code)


def _key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """Repeated `flag KEY=VALUE` options as a dict (`a2rl.tasks.parse_assignments`, the one
    parser); a malformed one fails the command with a one-line message naming `flag`."""
    from a2rl.tasks import OptionsError, parse_assignments

    try:
        return parse_assignments(items or [], flag)
    except OptionsError as exc:
        _fail(str(exc))


def _progress() -> Any:
    """Progress lines on stderr, stamped with the seconds since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        if not _quiet:
            typer.echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    return say


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(_with_ids(doc), indent=2, default=str) + "\n")


def _with_ids(doc: Any) -> Any:
    """Every `--json` document names a run `run_id` and a task `task_id`. Older keys stay one
    release as aliases beside them (`task` here; a run's `id` in `store.queries`, a task's
    `id` in `tasks --json`), since scripts read them; the aliases go in the next release."""
    if isinstance(doc, list):
        return [_with_ids(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: _with_ids(v) for k, v in doc.items()}
    if isinstance(out.get("task"), str) and "task_id" not in out:
        out = {"task_id": out["task"], **out}
    return out


def _utc(iso: str) -> datetime:
    """A stored time (UTC; SQLite gives it back without its zone)."""
    at = datetime.fromisoformat(iso)
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)


def _when(iso: str | None) -> str:
    """'2026-12-02 13:05' (UTC, as the store keeps every time)."""
    return _utc(iso).strftime("%Y-%m-%d %H:%M") if iso else "-"


def _duration(start: str | None, end: str | None) -> str:
    """'1h 05m', '3m 20s', '45s'; to now for a run still going."""
    if not start:
        return "-"
    b = _utc(end) if end else datetime.now(UTC)
    return _seconds((b - _utc(start)).total_seconds())


def _seconds(seconds: float) -> str:
    """'8h 00m', '3m 20s', '45s'."""
    secs = max(0, int(seconds))
    h, m, sec = secs // 3600, secs % 3600 // 60, secs % 60
    return f"{h}h {m:02d}m" if h else f"{m}m {sec:02d}s" if m else f"{sec}s"


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


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
    backend: BackendOpt = None,
    max_submissions: MaxSubmissionsOpt = None,
    protocol: ProtocolOpt = "heldout",
    profile: ProfileOpt = "a2rl",
    grading_clock: GradingClockOpt = "counted",
    unsafe_local: UnsafeLocalOpt = False,
    gpus: GpusOpt = None,
    network: NetworkOpt = "none",
    keep_container: KeepOpt = False,
    task_option: TaskOptionOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Make a run for an agent you start yourself; prints its id and HTTP token (shown once)."""
    from a2rl.server import create_run
    from a2rl.tasks.hub import BaseModelUnavailable
    from a2rl.tools.sandbox.base import SandboxError

    settings = _settings(backend=backend)
    options = _sandbox_options(gpus, network, keep_container)
    _check_run_options(task, budget)
    task_options = _task_options(task, task_option, settings, profile)
    store = _store(settings)
    say = _progress()
    say(f"creating a run of '{task}' and scoring the base model (the baseline; cached after "
        "the first time)")
    try:
        created = create_run(settings, store, task_id=task, budget=budget,
                             max_submissions=max_submissions, unsafe_local=unsafe_local or None,
                             protocol=protocol, grading_clock=grading_clock, profile=profile,
                             task_options=task_options, **options)
    except (KeyError, ValueError, SandboxError, BaseModelUnavailable) as exc:
        _fail(_message(exc))  # no hub for the base model: one line, as `a2rl run` says it
    run = created.run
    say(f"run {run.id}: baseline dev {_score(run.baseline_dev)}, "
        f"test {_score(run.baseline_test)}")
    doc = {"run_id": run.id, "token": created.token, "task": run.task_id,
           "profile": run.profile,
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
    store = _read_store(settings)
    if store is None:
        _no_run(run_id)
    try:
        run = finish_run(settings, store, run_id, reason="finished by a2rl finish")
    except KeyError:
        _no_run(run_id)
        return
    from a2rl.store.outcome import end_kind_words
    from a2rl.store.queries import run_summary

    # as `a2rl show` gives it: a run without a submission has no final score (the stored
    # final_score holds the baseline's)
    doc = run_summary(store, run.id) or {}
    if as_json:
        _print_json(doc)
        return
    final = (f"final test {_score(doc['final_score'])}" if doc.get("final_score") is not None
             else f"no final score ({doc.get('final_note') or 'none recorded'})")
    typer.echo(f"run {run.id} finished ({run.end_reason}; {end_kind_words(doc.get('end_kind'))})"
               f": {final}, baseline test {_score(run.baseline_test)}")


@app.command()
def serve(
    run: Annotated[str | None, typer.Option("--run", help="serve this run over stdio")] = None,
    http: Annotated[bool, typer.Option(
        "--http", help="serve all runs over streamable HTTP")] = False,
    host: Annotated[str | None, typer.Option(help="HTTP address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="HTTP port (default: the "
                                             "http_port setting, 8765)")] = None,
    allow_remote: Annotated[bool, typer.Option(
        help="allow listening on a non-loopback address")] = False,
) -> None:
    """Serve MCP: one run over stdio (--run RUN_ID), or every run over HTTP (--http)."""
    from a2rl.server.transports import serve_http, serve_stdio
    from a2rl.store.queries import run_summary

    settings = _settings(http_host=host, http_port=port)
    if http == (run is not None):
        _fail("give exactly one of --run RUN_ID (stdio) or --http")
    if http:
        if settings.http_host not in {"127.0.0.1", "localhost", "::1"} and not allow_remote:
            _fail(f"refusing to listen on {settings.http_host}: runs' tools execute commands; "
                  "pass --allow-remote to listen beyond loopback")
        _check_port(settings.http_host, settings.http_port)
        store = _store(settings)
        if not _quiet:  # where to connect: the address is free (checked above)
            host = f"[{settings.http_host}]" if ":" in settings.http_host else settings.http_host
            url = f"http://{host}:{settings.http_port}/mcp"
            typer.echo(f"serving every run's MCP tools at {url}; connect with the header "
                       "'Authorization: Bearer TOKEN' (the token a2rl create printed); "
                       "Ctrl-C stops", err=True)
        serve_http(settings, store)
    else:
        assert run is not None
        store = _read_store(settings)
        row = run_summary(store, run) if store is not None else None
        if row is None:
            _no_run(run)
        elif row["ended_at"] is not None:
            # Serving it would append calls to a closed record and change its report.
            from a2rl.server.auth import ended_message

            _fail(ended_message(run, row["end_reason"] or row["status"]))
        serve_stdio(settings, store, run)


def _check_port(host: str, port: int) -> None:
    """Say in one line that the address is taken, before the server starts and fails."""
    from a2rl.listen import ListenError, check_listen

    try:
        check_listen(host, port)
    except ListenError as exc:
        _fail(str(exc))


@app.command()
def runs(
    task: Annotated[str | None, typer.Option(help="only runs of this task")] = None,
    agent: Annotated[str | None, typer.Option(help="only runs of this agent")] = None,
    status: Annotated[choices(*RUN_STATUSES) | None, typer.Option(
        help="only runs in this state")] = None,
    limit: Annotated[int, typer.Option(min=0, help="at most this many, newest first (0: all)")
                     ] = 20,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first: task, agent, status, when, how long, calls and scores.
    `--json` gives each run with the same keys as `a2rl show --json`."""
    from a2rl.store.queries import count_runs, list_runs

    settings = _settings()
    store = _read_store(settings)
    rows = list_runs(store, task=task, agent=agent, status=status, limit=limit or None) \
        if store is not None else []
    if as_json:
        if rows:  # the paired interval, as `show --json` (the viewer's runs table computes it)
            from a2rl.analysis.web.queries import list_runs as table_rows

            paired = {r.run_id: r.improvement for r in table_rows(store)}
            for row in rows:
                found = paired.get(row["id"])
                row["improvement"] = found.model_dump() if found is not None else None
        _print_json(rows)
        return
    if not rows:
        filtered = task or agent or status
        typer.echo("no runs match" if filtered else "no runs yet: try `a2rl demo`")
        return
    typer.echo(f"{'RUN':14} {'TASK':12} {'AGENT':12} {'STATUS':10} {'END':16} "
               f"{'CREATED (UTC)':16} {'DURATION':>9} {'CALLS':>6} {'BASELINE':>8} {'FINAL':>6}")
    for r in rows:  # END: the run's EndKind ("agent crashed"); FINAL "-": no final submission
        end = (r["end_kind"] or "-").replace("_", " ")
        typer.echo(f"{r['id']:14} {r['task_id'][:12]:12} {(r['agent'] or '-')[:12]:12} "
                   f"{r['status']:10} {end:16} {_when(r['created_at']):16} "
                   f"{_duration(r['started_at'], r['ended_at']):>9} {r['tool_calls']:>6} "
                   f"{_score(r['baseline_test']):>8} {_score(r['final_score']):>6}")
    total = count_runs(store) if store is not None and limit and len(rows) == limit else 0
    if total > len(rows) and not (task or agent or status):
        typer.echo(f"({total - len(rows)} older runs not shown: --limit 0 for all)", err=True)


@app.command()
def show(run_id: Annotated[str, typer.Argument(help="a run id")],
         as_json: JsonFlag = False) -> None:
    """Show one run: its settings, counts, jobs, submissions and scores."""
    from a2rl.store.queries import run_details, run_summary

    settings = _settings()
    store = _read_store(settings)
    doc = run_summary(store, run_id) if store is not None else None
    if doc is None:
        _no_run(run_id)
        return
    details = run_details(store, run_id)
    from a2rl.analysis import build_report
    from a2rl.analysis.fmt import improvement
    from a2rl.audit import load_audit

    summary = build_report(store, run_id).summary  # the paired improvement interval
    audit = load_audit(store, run_id)
    marks = {"audit": None if audit is None else {
        "flagged": audit.flagged, "high": audit.high, "flags": len(audit.flags)}}
    if as_json:
        _print_json({**doc, **details, "improvement": summary.improvement.model_dump()
                     if summary.improvement else None,
                     "improvement_note": summary.improvement_note, **marks})
        return
    _print_show({**doc, **marks}, details, improvement(summary))


def _print_show(doc: dict[str, Any], details: dict[str, list[dict[str, Any]]],
                improvement: str) -> None:
    """`a2rl show`: a few labelled blocks a person reads top to bottom."""
    def line(label: str, value: Any) -> None:
        typer.echo(f"  {label:16} {value}")

    typer.echo(f"run {doc['id']}  {doc['status']}"
               + (f" ({doc['end_reason']})" if doc.get("end_reason") else ""))
    if doc.get("end_kind"):  # how it ended, and whether compare and fleet summaries count it
        line("end", doc["end_kind"].replace("_", " ")
             + ("" if doc["result"] else "; not counted as a result by compare"))
    audit = doc.get("audit")
    line("audit", "not audited" if audit is None else
         f"FLAGGED: {audit['high']} high-severity flags (a2rl audit {doc['id']})"
         if audit["flagged"] else f"no high-severity flag ({audit['flags']} flags)")
    line("task", doc["task_id"])
    agent = " ".join(str(x) for x in (doc["agent"], doc["agent_version"], doc["driver_model"])
                     if x) or "-"
    line("agent", agent + (f" [{doc['agent_status']}]" if doc.get("agent_status") else ""))
    line("base model", doc["base_model"] or "-")
    line("created", f"{_when(doc['created_at'])} UTC")
    line("ran", f"{_when(doc['started_at'])} to {_when(doc['ended_at'])} "
         f"({_duration(doc['started_at'], doc['ended_at'])} of a {_seconds(doc['budget_s'])} "
         "budget)"
         if doc["started_at"] else "not started (the clock starts at the first tool call)")
    typer.echo("settings")
    config = doc.get("config") or {}
    container = config.get("container") or {}
    line("backend", doc["backend"] + (f" (image {container.get('image')}, GPUs "
                                      f"{','.join(container.get('gpus') or []) or 'none'})"
                                      if container else ""))
    line("network", "bridge" if config.get("network") else "none")
    line("protocol", doc["protocol"])
    line("profile", doc.get("profile") or "a2rl")
    line("grading clock", doc["grading_clock"])
    line("max submissions", doc["max_submissions"] or "unlimited")
    line("seed", doc["seed"] if doc["seed"] is not None else "-")
    if doc.get("fleet_id"):
        line("fleet", f"{doc['fleet_id']} repeat {doc['fleet_repeat']} on {doc['fleet_node']}")
    line("workspace", doc["workspace"])
    typer.echo("counts")
    line("tool calls", f"{doc['tool_calls']} ({doc['tool_errors']} errors)")
    line("jobs", doc["jobs"])
    line("submissions", doc["submissions"])
    line("code revisions", doc["revisions"])
    typer.echo("scores")
    line("baseline", f"dev {_score(doc['baseline_dev'])}  test {_score(doc['baseline_test'])}")
    line("final (test)", _score(doc["final_score"])
         + (f" from {doc['final_submission_id']}" if doc.get("final_submission_id") else
            f" ({doc['final_note']})" if doc.get("final_note") else ""))
    line("improvement", improvement)
    jobs, subs = details["job_list"], details["submission_list"]
    if jobs:
        typer.echo("jobs")
        for j in jobs:
            code = "" if j["exit_code"] is None else f" exit {j['exit_code']}"
            took = _duration(j["started_at"], j["ended_at"])
            typer.echo(f"  {j['id']:12} {j['state'] + code:14} {took:>8}  {j['command'][:60]}")
    if subs:
        typer.echo("submissions")
        for x in subs:
            scores = "  ".join(f"{k} {_score(v)}" for k, v in sorted(x["scores"].items()))
            why = f"  {x['error'].splitlines()[-1][:60]}" if x["error"] else ""
            typer.echo(f"  {x['id']:12} {x['status']:8} {x['path'][:30]:30} {scores}{why}")
    typer.echo(f"report: a2rl report {doc['id']}")


@app.command("audit")
def audit_cmd(
    run_id: Annotated[str | None, typer.Argument(help="a run id")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="every finished run")] = False,
    recompute: Annotated[bool, typer.Option(help="compute again, replacing the stored")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check runs for cheating: print the audit's flags; exit 1 when a high flag stands."""
    if (run_id is None) == (not all_runs):
        _fail("give one run id or --all")
    from a2rl.audit.cli_view import audits, finished_run_ids, format_report

    settings = _settings()
    store = _read_store(settings)
    if store is None:
        _no_run(run_id or "")
    ids = finished_run_ids(store) if all_runs else [run_id]
    try:
        reports = list(audits(store, settings, ids, recompute=recompute))  # type: ignore[arg-type]
    except KeyError:
        _no_run(run_id or "")
    if as_json:
        _print_json([r.model_dump(mode="json") for r in reports] if all_runs
                    else reports[0].model_dump(mode="json"))
    else:
        for report in reports:
            typer.echo(format_report(report))
    raise typer.Exit(1 if any(r.flagged for r in reports) else 0)


@app.command("run")
def run_cmd(
    task: Annotated[str, typer.Option(help="task id (see a2rl tasks)")] = "arith",
    agent: Annotated[str, typer.Option(help="agent system (see a2rl agents)")] = "reference",
    model: Annotated[str | None, typer.Option(help="the driver model of the agent")] = None,
    budget: Annotated[str | None, typer.Option(help="e.g. 20m, 2h; default: the task's")] = None,
    backend: BackendOpt = None,
    gpus: GpusOpt = None,
    network: NetworkOpt = "none",
    keep_container: KeepOpt = False,
    protocol: ProtocolOpt = "heldout",
    profile: ProfileOpt = "a2rl",
    grading_clock: GradingClockOpt = "counted",
    unsafe_local: UnsafeLocalOpt = False,
    max_submissions: MaxSubmissionsOpt = None,
    seed: Annotated[int | None, typer.Option(help="seed of the first run")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="runs one after another, seeds S, S+1..")
                       ] = 1,
    llm_base_url: Annotated[str | None, typer.Option(
        help="--agent llm: an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")] = None,
    llm_api_key_env: Annotated[str, typer.Option(
        help="--agent llm: the variable holding the endpoint's key")] = "OPENAI_API_KEY",
    agent_option: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE passed to the connector, e.g. anthropic_base_url=http://...")] = None,
    task_option: TaskOptionOpt = None,
    fleet: Annotated[str | None, typer.Option(hidden=True, help="set by a2rl fleet")] = None,
    fleet_repeat: Annotated[int | None, typer.Option(hidden=True)] = None,
    fleet_node: Annotated[str | None, typer.Option(hidden=True)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run an agent on a task: create, serve MCP, launch headless, budget, finalize, report."""
    from a2rl.clients.orchestrator import Orchestrator, RunOptions, check_options

    settings = _settings(backend=backend)
    sandbox = _sandbox_options(gpus, network, keep_container)
    agent_options = {"llm_api_key_env": llm_api_key_env}
    if llm_base_url:
        agent_options["llm_base_url"] = llm_base_url
    agent_options.update(_key_values(agent_option, "--agent-option"))
    _check_run_options(task, budget)
    task_options = _task_options(task, task_option, settings, profile)
    try:
        check_options(RunOptions(task=task, agent=agent, model=model, budget=budget,
                                 agent_options=agent_options))
    except (KeyError, ValueError, RuntimeError) as exc:
        _fail(_message(exc))
    store = _store(settings)
    say = _progress()
    summaries = []
    for i in range(repeats):
        opts = RunOptions(task=task, agent=agent, model=model, budget=budget, backend=backend,
                          protocol=protocol, profile=profile, max_submissions=max_submissions,
                          grading_clock=grading_clock, unsafe_local=unsafe_local or None,
                          seed=None if seed is None else seed + i, agent_options=agent_options,
                          sandbox=sandbox, task_options=task_options,
                          fleet_id=fleet, fleet_node=fleet_node,
                          fleet_repeat=None if fleet is None else (fleet_repeat or 0) + i)
        try:
            summaries.append(Orchestrator(settings, store, say, warn=_say_error).run(opts))
        except (KeyError, ValueError, RuntimeError) as exc:
            _fail(_message(exc))
        if summaries[-1].interrupted_by:
            break  # the repeats left are not started
    if as_json:
        docs = [s.model_dump() for s in summaries]
        _print_json(docs[0] if repeats == 1 else docs)
    else:
        for summary in summaries:
            _print_summary(summary)
    _exit_if_interrupted(summaries[-1])
    _exit_on_grading_failure(*summaries)


@app.command()
def agents(as_json: JsonFlag = False) -> None:
    """List the agent systems and whether each is installed."""
    from a2rl.clients.registry import agent_lines, list_connectors

    rows = list_connectors()
    if as_json:
        _print_json(rows)
        return
    for line in agent_lines(rows):
        typer.echo(line)


@app.command()
def gc(
    include_final: Annotated[bool, typer.Option(
        help="also remove the final checkpoint copies of finished runs")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove what finished runs no longer need (checkpoint copies, sandbox leftovers)."""
    from a2rl.server.gc import collect_garbage

    settings = _settings()
    store = _read_store(settings)
    result = collect_garbage(settings, store, include_final=include_final) if store is not None \
        else {"removed": [], "bytes_freed": 0, "volumes_detached": []}  # no store: none known
    if as_json:
        _print_json(result)
        return
    freed = result["bytes_freed"]  # the blocks given back to the disk (server.gc)
    typer.echo(f"removed {len(result['removed'])} items, {freed / 1e6:.1f} MB freed "
               f"({freed} bytes), "
               f"{len(result['volumes_detached'])} workspace volumes detached")


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="a run id")],
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
    from pathlib import Path

    from a2rl.analysis import build_report, render, training_curves

    settings = _settings()
    if out and not Path(out).expanduser().parent.is_dir():
        _fail(f"--out {out}: the folder {Path(out).expanduser().parent} does not exist")
    store = _read_store(settings)
    if store is None:
        _no_run(run_id)
    try:
        doc = build_report(store, run_id, idle_threshold_s=idle_threshold)
    except KeyError:
        _no_run(run_id)
        raise
    if narrative or require_narrative:
        from a2rl.analysis.fmt import narrative_note
        from a2rl.analysis.narrative import add_narrative

        doc = add_narrative(doc, settings)
        assert doc.narrative is not None
        if doc.narrative.status != "generated":
            typer.echo(f"a2rl: {narrative_note(doc.narrative)}", err=True)
    text = render(doc, fmt, training_curves(store, run_id) if fmt == "html" else None)
    if out:
        try:
            Path(out).expanduser().write_text(text, encoding="utf-8")
        except OSError as exc:
            _fail(f"--out {out}: {exc.strerror or exc}")
        typer.echo(f"wrote {out}", err=True)
    else:
        sys.stdout.write(text)
    if require_narrative and doc.narrative and doc.narrative.status != "generated":
        raise typer.Exit(1)


@app.command()
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
    from a2rl.analysis.web import StoreOpenError, serve
    from a2rl.listen import ListenError

    settings = _settings()
    if (store := _read_store(settings)) is not None:  # overdue runs finalized first
        store.close()
    try:
        serve(settings.database_url, host=host, port=port, fleet=fleet, token=token,
              say=lambda m: typer.echo(m, err=True))
    except (StoreOpenError, ListenError) as exc:
        _fail(str(exc))


@app.command()
def compare(
    run_ids: Annotated[list[str] | None, typer.Argument(
        metavar="[RUN]...", help="compare these runs (with the filters: those that match)",
        show_default=False)] = None,
    task: Annotated[str | None, typer.Option(help="only runs of this task")] = None,
    agent: Annotated[str | None, typer.Option(help="only runs of this agent")] = None,
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
    from a2rl.analysis import compare as compare_runs
    from a2rl.analysis import render_csv, render_json, render_text
    from a2rl.analysis.compare import Comparison

    settings = _settings()
    store = _read_store(settings)
    if store is None and run_ids:
        _no_run(run_ids[0])
    try:
        result = compare_runs(store, task=task, agent=agent, fleet=fleet, profile=profile,
                              run_ids=run_ids, include_unfinished=include_unfinished,
                              exclude_flagged=exclude_flagged) if store is not None \
            else Comparison(rows=[], groups=[], leaderboard={})
    except KeyError as exc:
        _fail(str(exc.args[0]))
    if not result.rows and (run_ids or task or agent or fleet or profile):
        _fail("no runs match the filters given (see a2rl runs)")
    if as_json:
        _print_json(json.loads(render_json(result)))
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
    backend: Annotated[choices(*BACKENDS) | None, typer.Option(
        help="sandbox backend on every node")] = None,
    seed: Annotated[int | None, typer.Option(help="repeat i runs with seed + i")] = None,
    profile: Annotated[choices(*PROFILES) | None, typer.Option(
        help="evaluation profile: a2rl (ours) or paper (docs/paper-fidelity.md)")] = None,
    agent_option: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE passed to every agent's connector")] = None,
    task_option: Annotated[list[str] | None, typer.Option(
        "-T", "--task-option", metavar="[TASK.]KEY=VALUE",
        help="a task option for every task of the plan, or for TASK only (repeatable)")] = None,
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

    options = _key_values(agent_option, "--agent-option")
    fields = {"budget": budget, "gpus_per_run": gpus_per_run, "resource": resource,
              "backend": backend, "seed": seed, "profile": profile}
    try:
        if plan_file:
            plan = load_plan(Path(plan_file), name=name, repeats=repeats, tasks=task, **fields)
        else:
            if not (name and task and agent):
                _fail("give --plan FILE, or --name, --task and --agent")
            plan = plan_from_flags(name or "", task or [], agent or [], repeats or 1, options,
                                   **fields)
    except ValidationError as exc:
        _fail(f"bad plan{f' {plan_file}' if plan_file else ''}: " + "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'plan'}: {e['msg']}"
            for e in exc.errors(include_url=False)))
    except OSError as exc:
        _fail(f"--plan {plan_file}: {exc.strerror or exc}")
    except ValueError as exc:
        _fail(f"bad plan{f' {plan_file}' if plan_file else ''}: {exc}")
    if options and plan_file:
        for a in plan.agents:
            a.options.update(options)
    settings = _settings()
    plan.task_options = _fleet_task_options(plan.tasks, plan.task_options, task_option,
                                            settings, plan.profile)
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
    from a2rl.analysis.compare import tally, tally_line

    counted = tally(store, result.fleet)  # the fleet's runs as compare counts them
    if as_json:
        _print_json({**result.model_dump(), "counts": result.counts,
                     "results": counted.model_dump()})
    else:
        for r in result.runs:  # !: the audit flagged it; its end kind ("agent crashed")
            end = (counted.end_kinds.get(r.run_id or "") or "").replace("_", " ")
            mark = "!" if r.run_id in counted.flagged else ""
            typer.echo(f"{r.label:40} {r.state:12} {(r.run_id or '-') + mark:15} {end:16} "
                       f"{r.host or ''}")
        typer.echo(f"fleet {result.fleet}: {result.planned} planned, {result.already_done} "
                   f"already finished; this time {result.counts or 'nothing to run'}")
        typer.echo(f"in the store: {tally_line(counted)}")
        typer.echo(f"compare them: a2rl compare --fleet {result.fleet}")
    if result.stopped or any(r.state == "failed" for r in result.runs):
        raise typer.Exit(1)


def _fleet_task_options(tasks: list[str], planned: dict[str, dict[str, Any]],
                        pairs: list[str] | None, settings: Settings,
                        profile: str) -> dict[str, dict[str, str]]:
    """Each task's options: the plan's `[task_options.<id>]`, then `-T TASK.KEY=VALUE` for
    one task and `-T KEY=VALUE` for all; each checked against its task before Ray starts."""
    from a2rl.tasks import OptionsError, parse_assignments

    try:
        given = parse_assignments(pairs or [])
    except OptionsError as exc:
        _fail(str(exc))
    unknown = sorted({k.rpartition(".")[0] for k in given if "." in k} - set(tasks))
    if unknown:
        _fail(f"-T {unknown[0]}.KEY=VALUE: {unknown[0]!r} is not a task of this plan")
    out: dict[str, dict[str, str]] = {}
    for task in tasks:
        mine = {k: str(v) for k, v in planned.get(task, {}).items()}
        for key, value in given.items():
            target, dot, name = key.rpartition(".")
            if not dot:
                mine[key] = value
            elif target == task:
                mine[name] = value
        pairs_of_task = [f"{k}={v}" for k, v in mine.items()]
        out[task] = _task_options(task, pairs_of_task, settings, profile)
    return {task: opts for task, opts in out.items() if opts}


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
    store = _read_store(settings)
    if store is None:
        _no_run(run_id)
    try:
        result = export_run(store, run_id, Path(out) if out else None)
    except KeyError:
        _no_run(run_id)
        raise
    except (ArchiveError, OSError) as exc:
        _fail(str(exc))
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
    if not Path(archive).is_file():
        _fail(f"{archive}: no such file")
    try:
        result = import_run(_store(settings), Path(archive))
    except ArchiveError as exc:
        _fail(str(exc))
    if as_json:
        _print_json(result.model_dump())
        return
    typer.echo(f"run {result.run_id}: {result.detail}")


@app.command()
def tasks(
    task_id: Annotated[str | None, typer.Argument(
        metavar="[TASK]", help="one task: its options (set with -T key=value)")] = None,
    profile: Annotated[choices(*PROFILES) | None, typer.Option(
        help="show the evaluation settings in force under this profile (a2rl or paper)")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the tasks with their levels; with --profile, each task's evaluation settings;
    with a task id, its options."""
    from a2rl.tasks import list_tasks, task_load_errors

    if task_id is not None:
        _print_task_options(task_id, as_json, profile)
        return

    try:
        found = list_tasks(profile)
    except ValueError as exc:
        _fail(str(exc))
    for reason in task_load_errors().values():  # a broken plugin: said once, the rest listed
        typer.echo(f"warning: {reason}", err=True)
    if profile is not None:
        docs = [t.profile_settings(_settings()) for t in found]
        if as_json:
            _print_json([{**d, "task": d["task_id"]} for d in docs])  # "task": the old alias
            return
        for doc in docs:
            typer.echo(f"{doc.pop('task_id')} ({doc.pop('profile')} profile)")
            _print_profile_settings(doc)
        return
    rows = [{"task_id": t.spec.id, "id": t.spec.id, "level": t.spec.level, "title": t.spec.title,
             "default_budget": t.spec.default_budget,
             "splits": {name: info.n_items for name, info in t.spec.splits.items()}}
            for t in found]
    if as_json:
        _print_json(rows)
        return
    for r in rows:
        splits = ", ".join(f"{name} {n}" for name, n in r["splits"].items())
        typer.echo(f"{r['task_id']:12} level {r['level']}  {r['title']}  [{splits}]")


def _print_profile_settings(doc: dict[str, Any]) -> None:
    """A task's evaluation settings under a profile (`Task.profile_settings`), a line each."""
    for key, value in doc.items():
        if key == "splits":
            value = "; ".join(
                f"{name} {s['n_items']} ({'visible' if s['visible'] else 'hidden'}, "
                f"{s['source']})" for name, s in value.items())
        typer.echo(f"  {key:16} {value}")


def _print_task_options(task_id: str, as_json: bool, profile: str | None = None) -> None:
    """`a2rl tasks <id>`: the task's options (name, type, default, description) and the
    values now in force from config.toml and the deprecated settings; with --profile, first
    the evaluation settings in force under that profile."""
    from a2rl.tasks import OptionsError, get_task

    try:
        task = get_task(task_id, profile or "a2rl")
    except KeyError as exc:
        _fail(_message(exc))
    evaluation = task.profile_settings(_settings()) if profile is not None else None
    rows = task.options_model.describe()
    try:
        current = task.options_record(_settings())
    except OptionsError as exc:
        _fail(str(exc))
    for row in rows:
        row["value"] = current.get(row["name"])
    if as_json:
        _print_json({"task_id": task.spec.id, "id": task.spec.id, "title": task.spec.title,
                     "options": rows}
                    | ({"evaluation": evaluation} if evaluation is not None else {}))
        return
    typer.echo(f"{task.spec.id}: {task.spec.title} (level {task.spec.level})")
    if evaluation is not None:
        typer.echo(f"evaluation ({evaluation.pop('profile')} profile):")
        evaluation.pop("task_id")
        _print_profile_settings(evaluation)
    typer.echo("options (-T key=value, or [tasks." + task.spec.id + "] in config.toml):")
    for row in rows:
        default = row["default"] if row["default"] != "" else '""'
        typer.echo(f"  {row['name']:16} {row['type']:6} default {default}")
        note = row["description"]
        if row["deprecated_setting"]:
            note += f" (deprecated setting: {row['deprecated_setting']})"
        typer.echo(f"      {note}")
        if row["value"] != row["default"]:
            typer.echo(f"      now: {row['value']!r}")


@app.command()
def demo(
    task: Annotated[str, typer.Option(help="task id")] = "arith",
    backend: BackendOpt = None,
    gpus: GpusOpt = None,
    keep_container: KeepOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """The main job: the reference agent post-trains the tiny model on a toy task, recorded."""
    from a2rl.demo import DEMO_FIELDS, demo_failure, run_demo

    settings = _settings(backend=backend)
    options = _sandbox_options(gpus, "none", keep_container)
    _check_run_options(task)
    store = _store(settings)
    say = _progress()
    try:
        summary = run_demo(settings, store, task=task, backend=backend, say=say, **options)
    except (KeyError, ValueError, RuntimeError) as exc:
        _fail(_message(exc))
    if as_json:
        _print_json(summary.model_dump(include=set(DEMO_FIELDS)))
    else:
        _print_summary(summary)
    _exit_if_interrupted(summary)
    _exit_on_grading_failure(summary)
    if why := demo_failure(summary):
        _fail(f"run {summary.run_id}: no improvement: {why}", code=1)


def _exit_if_interrupted(summary: Any) -> None:
    """A run stopped by Ctrl-C or a signal is no result: one line, and the exit a shell
    reports for that signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
    if summary.interrupted_by:
        import signal

        signum = signal.Signals[summary.interrupted_by]
        _say_error(f"run {summary.run_id} was interrupted ({summary.interrupted_by}) and "
                   f"finalized; see it with: a2rl show {summary.run_id}")
        raise typer.Exit(interrupt.exit_code(signum))


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
    interrupt.install()  # SIGTERM and SIGHUP end a command as Ctrl-C does: cleanly
    app()


if __name__ == "__main__":
    main()
