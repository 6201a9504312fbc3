"""A run's life from the command line: `create` and `finish` one an agent drives itself,
`serve` its MCP tools, `run` an agent headless from start to report, and `demo`.

A run that produced no score, or was interrupted, is no result: those commands exit non-zero
and say why (`exit_on_grading_failure`, `exit_if_interrupted`).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from a2rl import interrupt
from a2rl.cli import context
from a2rl.cli.errors import fail, message, no_run, say_error
from a2rl.cli.options import (
    BackendOpt,
    GpusOpt,
    GradingClockOpt,
    JsonFlag,
    KeepOpt,
    MaxSubmissionsOpt,
    NetworkOpt,
    ProfileOpt,
    ProtocolOpt,
    TaskOptionOpt,
    UnsafeLocalOpt,
    check_task,
    gpu_ids,
    key_values,
    run_config,
    task_options,
)
from a2rl.cli.output import echo, print_json, score, when
from a2rl.cli.preflight import check_run
from a2rl.clients.registry import DEFAULT_AGENT
from a2rl.listen import ListenError, check_listen
from a2rl.store import RunConfig, RunConfigError
from a2rl.store.outcome import end_kind_words
from a2rl.store.queries import run_summary
from a2rl.tasks.hub import BaseModelUnavailable
from a2rl.tasks.registry import DEFAULT_TASK


def create(
    task: Annotated[str, typer.Option(help="task id (see a2rl tasks)")] = DEFAULT_TASK,
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
    settings = context.settings()
    check_task(task)
    config = run_config(
        task_id=task, budget=budget, backend=backend, max_submissions=max_submissions,
        protocol=protocol, profile=profile, grading_clock=grading_clock,
        unsafe_local=unsafe_local or None, gpus=gpu_ids(gpus), network=network == "bridge",
        keep_container=keep_container,
        task_options=task_options(task, task_option, settings, profile),
        task_options_resolved=True)
    check_run(settings, config)  # the base model and the data, in one line each
    # the server and the tools (the MCP SDK among their imports, ~0.4 s) once the flags are
    # known to be good: a mistake in them is answered without it
    from a2rl.sandbox.base import SandboxError
    from a2rl.server import create_run

    store = context.store(settings)
    say = context.progress()
    say(f"creating a run of '{task}' and scoring the base model (the baseline; cached after "
        "the first time)")
    try:
        created = create_run(settings, store, config)
    except (KeyError, ValueError, SandboxError, BaseModelUnavailable) as exc:
        fail(message(exc))  # no hub for the base model: one line, as `a2rl run` says it
    run = created.run
    say(f"run {run.id}: baseline dev {score(run.baseline_dev)}, "
        f"test {score(run.baseline_test)}")
    doc = {"run_id": run.id, "token": created.token, "task": run.task_id,
           "profile": run.profile,
           "workspace": run.workspace, "budget_s": run.budget_s,
           "mcp_url": f"http://{settings.server.host}:{settings.server.port}/mcp"}
    if as_json:
        print_json(doc)
        return
    echo(f"run {run.id} created (task {run.task_id}, budget {run.budget_s:.0f} s)")
    echo(f"token (shown once): {created.token}")
    echo(f"stdio:  a2rl serve --run {run.id}")
    echo(f"http:   a2rl serve --http   then connect to {doc['mcp_url']} with the token")


def finish(run_id: Annotated[str, typer.Argument(help="the run to end")],
           as_json: JsonFlag = False) -> None:
    """End a run: stop its jobs and sandbox and close its record."""
    from a2rl.server import finish_run  # the MCP SDK among its imports: see `create`

    settings = context.settings()
    store = context.read_store(settings)
    if store is None:
        no_run(run_id)
    before = run_summary(store, run_id)
    if before is None:
        no_run(run_id)
    try:
        run = finish_run(settings, store, run_id, reason="finished by a2rl finish")
    except KeyError:
        no_run(run_id)
    # as `a2rl show` gives it: a run without a submission has no final score (the stored
    # final_score holds the baseline's)
    doc = run_summary(store, run.id) or {}
    doc["already_finished"] = before["ended_at"] is not None
    if as_json:
        print_json(doc)
        return
    final = (f"final test {score(doc['final_score'])}" if doc.get("final_score") is not None
             else f"no final score ({doc.get('final_note') or 'none recorded'})")
    kind = end_kind_words(doc.get("end_kind"))
    ended = run.end_reason if run.end_reason == kind else f"{run.end_reason}; {kind}"
    if before["ended_at"] is not None:  # nothing was done: say so, and when it ended
        echo(f"run {run.id} had already finished at {when(before['ended_at'])} UTC "
                   f"({ended}): {final}, baseline test {score(run.baseline_test)}")
        return
    echo(f"run {run.id} finished ({ended}): {final}, baseline test "
               f"{score(run.baseline_test)}")


def serve(
    run: Annotated[str | None, typer.Option("--run", help="serve this run over stdio")] = None,
    http: Annotated[bool, typer.Option(
        "--http", help="serve all runs over streamable HTTP")] = False,
    host: Annotated[str | None, typer.Option(help="HTTP address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="HTTP port (default: the "
                                             "server.port setting, 8765)")] = None,
    allow_remote: Annotated[bool, typer.Option(
        help="allow listening on a non-loopback address")] = False,
) -> None:
    """Serve MCP: one run over stdio (--run RUN_ID), or every run over HTTP (--http)."""
    # the server (the MCP SDK among its imports): see `create`
    from a2rl.server.auth import ended_message
    from a2rl.server.http_transport import serve_http
    from a2rl.server.transports import serve_stdio

    settings = context.settings({"server.host": host, "server.port": port})
    if http == (run is not None):
        fail("give exactly one of --run RUN_ID (stdio) or --http")
    if http:
        if settings.server.host not in {"127.0.0.1", "localhost", "::1"} and not allow_remote:
            fail(f"refusing to listen on {settings.server.host}: runs' tools execute commands; "
                 "pass --allow-remote to listen beyond loopback")
        _check_port(settings.server.host, settings.server.port)
        store = context.store(settings)
        if not context.quiet():  # where to connect: the address is free (checked above)
            bound = settings.server.host
            host = f"[{bound}]" if ":" in bound else bound
            url = f"http://{host}:{settings.server.port}/mcp"
            echo(f"serving every run's MCP tools at {url}; connect with the header "
                 "'Authorization: Bearer TOKEN' (the token a2rl create printed); "
                 "Ctrl-C stops", err=True)
        serve_http(settings, store)
    else:
        assert run is not None
        store = context.read_store(settings)
        row = run_summary(store, run) if store is not None else None
        if row is None:
            no_run(run)
        elif row["ended_at"] is not None:
            # Serving it would append calls to a closed record and change its report.
            fail(ended_message(run, row["end_reason"] or row["status"]))
        serve_stdio(settings, store, run)


def _config_of_file(ctx: typer.Context, path: str) -> RunConfig:
    """The `RunConfig` in `path` (`a2rl run --config`, what a fleet's node writes); no other
    run flag may come with it, since none would apply."""
    given = [p.opts[0] for p in ctx.command.params
             if p.name not in ("config_file", "as_json") and p.name is not None
             and (source := ctx.get_parameter_source(p.name)) is not None
             and source.name in ("COMMANDLINE", "ENVIRONMENT")]
    if given:
        fail(f"--config holds the whole run: give no other run flag ({', '.join(given)})")
    try:
        return RunConfig.parse(Path(path).read_bytes())
    except OSError as exc:
        fail(f"--config {path}: {exc.strerror or exc}")
    except RunConfigError as exc:
        fail(f"--config {path}: {exc}")


def _check_port(host: str, port: int) -> None:
    """Say in one line that the address is taken, before the server starts and fails."""
    try:
        check_listen(host, port)
    except ListenError as exc:
        fail(str(exc))


def run(
    ctx: typer.Context,
    task: Annotated[str, typer.Option(help="task id (see a2rl tasks)")] = DEFAULT_TASK,
    agent: Annotated[str, typer.Option(help="agent system (see a2rl agents)")] = DEFAULT_AGENT,
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
    max_cost: Annotated[float | None, typer.Option(
        help="stop the agent once its driver model has cost this many USD (reported by the "
             "agent, else priced by the prices setting)")] = None,
    max_tokens: Annotated[int | None, typer.Option(
        help="stop the agent once its driver model has used this many tokens (in and out)")
    ] = None,
    llm_base_url: Annotated[str | None, typer.Option(
        help="--agent llm: an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")] = None,
    llm_api_key_env: Annotated[str | None, typer.Option(
        help="--agent llm: the variable holding the endpoint's key (default OPENAI_API_KEY, "
             "optional; named here, it must be set)")] = None,
    agent_option: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE passed to the connector, e.g. anthropic_base_url=http://...")] = None,
    task_option: TaskOptionOpt = None,
    config_file: Annotated[str | None, typer.Option(
        "--config", hidden=True, help="set by a2rl fleet: the whole run's RunConfig as JSON, "
        "in place of every other flag")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run an agent on a task: create, serve MCP, launch headless, budget, finalize, report."""
    # --backend is the run's (`RunConfig.backend`), never laid over the settings: one home
    settings = context.settings()
    if config_file is not None:  # a fleet's node: the config its plan made, as JSON
        config = _config_of_file(ctx, config_file)
        check_task(config.task_id)
    else:
        agent_options = key_values(agent_option, "--agent-option")
        # the llm agent's two flags are its options (another agent refuses them by name)
        for key, value in (("llm_base_url", llm_base_url), ("llm_api_key_env", llm_api_key_env)):
            if value:
                agent_options.setdefault(key, value)
        check_task(task)
        config = run_config(
            task_id=task, agent=agent, driver_model=model, budget=budget, backend=backend,
            max_cost=max_cost, max_tokens=max_tokens,
            protocol=protocol, profile=profile, grading_clock=grading_clock,
            unsafe_local=unsafe_local or None, max_submissions=max_submissions, seed=seed,
            agent_options=agent_options, gpus=gpu_ids(gpus), network=network == "bridge",
            keep_container=keep_container,
            task_options=task_options(task, task_option, settings, profile),
            task_options_resolved=True)
    check_run(settings, config)  # the agent, its options and endpoint, the base model, data
    # the orchestrator (the MCP SDK among its imports) once the flags parsed: see `create`
    from a2rl.clients.orchestrator import Orchestrator

    store = context.store(settings)
    say = context.progress()
    summaries = []
    for i in range(repeats):
        opts = config.model_copy(update={"seed": None if config.seed is None
                                         else config.seed + i})
        try:
            summaries.append(Orchestrator(settings, store, say, warn=say_error).run(opts))
        except (KeyError, ValueError, RuntimeError) as exc:
            fail(message(exc))
        if summaries[-1].interrupted_by:
            break  # the repeats left are not started
    if as_json:
        docs = [s.model_dump() for s in summaries]
        print_json(docs[0] if repeats == 1 else docs)
    else:
        for summary in summaries:
            print_summary(summary)
    exit_if_interrupted(summaries[-1])
    exit_on_agent_crash(*summaries)
    exit_on_grading_failure(*summaries)


def demo(
    task: Annotated[str, typer.Option(help="task id")] = DEFAULT_TASK,
    backend: BackendOpt = None,
    gpus: GpusOpt = None,
    keep_container: KeepOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """The main job: the reference agent post-trains the tiny model on a toy task, recorded."""
    settings = context.settings()
    check_task(task)
    config = run_config(task_id=task, agent=DEFAULT_AGENT, backend=backend, gpus=gpu_ids(gpus),
                        keep_container=keep_container)
    from a2rl.cli.demo import DEMO_FIELDS, demo_failure, run_demo  # see `create`

    store = context.store(settings)
    say = context.progress()
    try:
        summary = run_demo(settings, store, config, say=say)
    except (KeyError, ValueError, RuntimeError) as exc:
        fail(message(exc))
    if as_json:
        print_json(summary.model_dump(include=set(DEMO_FIELDS)))
    else:
        print_summary(summary)
    exit_if_interrupted(summary)
    exit_on_grading_failure(summary)
    if why := demo_failure(summary):
        fail(f"run {summary.run_id}: no improvement: {why}", code=1)


def exit_if_interrupted(summary: Any) -> None:
    """A run stopped by Ctrl-C or a signal is no result: one line, and the exit a shell
    reports for that signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
    if summary.interrupted_by:
        signum = signal.Signals[summary.interrupted_by]
        say_error(f"run {summary.run_id} was interrupted ({summary.interrupted_by}) and "
                  f"finalized; see it with: a2rl show {summary.run_id}")
        raise typer.Exit(interrupt.exit_code(signum))


def print_summary(summary: Any) -> None:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    agent = f", agent {summary.agent}: {summary.agent_status}" if summary.agent else ""
    echo(f"\nrun {summary.run_id} ({summary.task}{agent}) in {summary.seconds:.0f} s")
    if summary.end_reason:
        echo(f"  ended: {summary.end_reason}")
    if summary.agent_error:  # why the agent failed or stopped, as `a2rl show` says it
        echo(f"  agent: {summary.agent_error}")
    # as `a2rl show`: no final score without a final submission (not the baseline's)
    final = pct(summary.final_score) if summary.final_score is not None else \
        f"none ({summary.final_note or 'not recorded'})"
    echo(f"  baseline (test) {pct(summary.baseline_score)} -> best dev "
               f"{pct(summary.best_score)} -> final test {final}")
    echo(f"  {summary.submissions} submissions, {summary.tool_calls} tool calls, "
               f"{summary.revisions} code revisions recorded")
    echo(f"  inspect it: a2rl show {summary.run_id}")


def exit_on_agent_crash(*summaries: Any) -> None:
    """A run whose agent crashed is no result: one line each with why, and exit 1."""
    crashed = [s for s in summaries if s.agent_status == "crashed"]
    for summary in crashed:
        say_error(f"run {summary.run_id}: the agent crashed: "
                  f"{summary.agent_error or 'no error recorded'} (a2rl show {summary.run_id})")
    if crashed:
        raise typer.Exit(1)


def exit_on_grading_failure(*summaries: Any) -> None:
    """A run that produced no score is a failure (exit 1), shown with the grader's reasons:
    its submissions failed grading, or it was not finalized. A run without a submission has
    no final score and is no failure of the grader (`final_note` "no submission")."""
    failed = False
    for summary in summaries:
        for error in summary.grading_errors:
            echo(f"a2rl: run {summary.run_id}: grading failed: {error}", err=True)
        if summary.final_score is None and summary.final_note != "no submission":
            failed = True
            echo(f"a2rl: run {summary.run_id} produced no score"
                 + (f" ({summary.submissions_failed} submissions failed grading)"
                    if summary.submissions_failed else ""), err=True)
    if failed:
        raise typer.Exit(1)
