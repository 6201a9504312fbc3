"""`a2rl run`: one orchestrator for every agent system.

It makes the run (workspace, sandbox settings, baseline), serves MCP to the agent, launches
the agent headless, enforces the budget (at the deadline the agent's whole process tree is
stopped, SIGTERM then SIGKILL, and so are its jobs), stores the agent's transcript, finalizes
and summarizes. Ctrl-C, SIGTERM and SIGHUP finalize cleanly too (`a2rl.interrupt`), the
signal named in the run's end reason. Process agents (CLIs) reach our server over
streamable HTTP on loopback with the run's token, from their own sandbox; in-process agents
(reference, llm) talk to a real `a2rl serve` over stdio.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp import Client, StdioServerParameters
from pydantic import BaseModel
from sqlmodel import select

from a2rl import interrupt
from a2rl.server.http_transport import http_config
from a2rl.server.run import RunClock, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import AgentStatus, Run, RunConfig, Store, Submission, SubmissionStatus
from a2rl.store.ledger import SpendLimit, price_for
from a2rl.store.queries import best_submission, run_summary
from a2rl.store.records import runs
from a2rl.tasks import get_task
from a2rl.tasks.registry import DEFAULT_TASK

from .agent_sandbox import MARKER_VAR, sandboxed_argv
from .base import AgentContext, Connector, McpEndpoint
from .ledger import record_driver
from .prompt import task_prompt
from .registry import get_connector
from .transcript import driver_usage

Say = Callable[[str], None]
TERM_GRACE_S = 5.0
#: how often a CLI agent's streamed usage is read against the run's spending limits
USAGE_POLL_S = 1.0
STDERR_TAIL_LINES = 12  # of a crashed agent's stderr, shown to the user


#: The most of an agent's error line the run keeps (`Run.agent_error`).
AGENT_ERROR_CHARS = 300


def error_line(text: str) -> str:
    """An agent's error as the run stores it: its last non-blank line, bounded, with control
    characters as visible escapes (the text is the agent's, or its endpoint's, and is shown
    on terminals and pages)."""
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[-1].strip() if lines else text.strip()
    safe = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in line)
    return safe[:AGENT_ERROR_CHARS]


def returned_end(limit_note: str | None) -> tuple[AgentStatus, str | None]:
    """How an in-process agent that returned ended, and the error line the run keeps: at a
    limit (`limit_note`: a spending limit, or its own turn limit, which is also kept as its
    `agent_error`) the run ended as its budget's end, not as the agent's choice; else it
    finished by itself."""
    if not limit_note:
        return AgentStatus.finished, None
    own = limit_note.startswith("turn limit")
    return AgentStatus.budget, (error_line(limit_note) if own else None)


class RunSummary(BaseModel):
    """What `a2rl run` prints when a run ends: what `a2rl show` says of it."""

    run_id: str
    task: str
    agent: str | None = None
    agent_status: str | None = None
    #: why the agent stopped when it failed or hit its own limit (`Run.agent_error`)
    agent_error: str | None = None
    end_reason: str | None = None
    baseline_score: float | None
    best_score: float | None
    #: the final submission's test score; None without one (`final_note` says why), as
    #: `a2rl show` gives it (the store's final_score holds the baseline's then)
    final_score: float | None
    final_note: str | None = None
    submissions: int
    tool_calls: int
    revisions: int
    seconds: float
    #: submissions whose grading failed, and the first line of each distinct reason (a
    #: grading failure must not pass for a run that merely scored nothing)
    submissions_failed: int = 0
    grading_errors: list[str] = []
    #: the signal that interrupted the command (SIGINT, SIGTERM, SIGHUP), or None
    interrupted_by: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(settings: Settings, store: Store) -> Iterator[str]:
    """Our MCP server over streamable HTTP on loopback, in a thread, for one run's agent."""
    port = _free_port()
    config = http_config(settings, store, "127.0.0.1", port, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="a2rl-mcp-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP HTTP server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)


def stdio_params(settings: Settings, run_id: str) -> StdioServerParameters:
    exe = Path(sys.executable).parent / "a2rl"
    env = dict(os.environ, A2RL_HOME=str(settings.home_dir), A2RL_DB_URL=settings.database_url)
    return StdioServerParameters(command=str(exe), args=["serve", "--run", run_id], env=env)


def _kill_tree(proc: subprocess.Popen[bytes], marker: str) -> None:
    """SIGTERM the agent's process group, then SIGKILL it and anything carrying its marker."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(TERM_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    # daemons that left the group (unsandboxed agents; a sandboxed one dies with its namespace)
    needle = f"{MARKER_VAR}={marker}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def stderr_tail(data: bytes, lines: int = STDERR_TAIL_LINES) -> list[str]:
    """The last non-blank lines of an agent's stderr: where its error usually is."""
    text = data.decode("utf-8", "replace")
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


def _agent(opts: RunConfig) -> str:
    """The agent that drives the run: a run the orchestrator makes has one."""
    if opts.agent is None:
        raise ValueError("a run the orchestrator drives needs an agent (see a2rl agents)")
    return opts.agent


def check_options(opts: RunConfig, connector: Connector | None = None) -> None:
    """Refuse what would fail only after the run was made and its baseline scored: an unknown
    agent or task, an unknown option or a value of the wrong type, an agent not installed or
    missing its key, an endpoint that does not answer or refuses the key (a bad budget or any
    other bad knob never made a `RunConfig`). Raises KeyError, ValueError or RuntimeError
    with a one-line message."""
    opts = opts.with_task(DEFAULT_TASK)
    connector = connector or get_connector(_agent(opts))
    connector.options_model.parse(_agent(opts), opts.agent_options)  # AgentOptionsError
    if not connector.installed():
        raise RuntimeError(f"agent {opts.agent!r} is not installed (see a2rl agents)")
    if missing := connector.missing_config(opts.agent_options, opts.driver_model):
        raise RuntimeError(f"agent {opts.agent!r} needs {'; '.join(missing)}")
    if why := connector.unreachable(opts.agent_options):
        raise RuntimeError(f"agent {opts.agent!r} cannot use its endpoint: {why}")
    get_task(opts.task_id)


class Orchestrator:
    def __init__(self, settings: Settings, store: Store, say: Say = lambda _m: None,
                 warn: Say | None = None) -> None:
        """`say` gets progress lines; `warn` (default: say) what the user must see even when
        progress is off: an agent's crash and its last stderr lines."""
        self.settings, self.store, self.say = settings, store, say
        self.warn = warn or say
        self.limit_note: str | None = None  # the spending or turn limit that stopped it
        self.agent_error: str | None = None  # why the agent failed, or its own limit

    def run(self, opts: RunConfig, connector: Connector | None = None) -> RunSummary:
        """Run `opts` (its agent driving, or `connector`: a replay's, which no user names)
        from its creation to its summary."""
        started = time.monotonic()
        connector = connector or get_connector(_agent(opts))
        check_options(opts, connector)
        opts = opts.with_task(DEFAULT_TASK)
        self.say(f"creating a run of '{opts.task_id}' and scoring the base model (the "
                 "baseline)")
        created = create_run(self.settings, self.store, opts, start_clock=True)
        run = created.run
        self._update(run.id, agent_version=connector.version())
        self.say(f"run {run.id}: baseline dev {run.baseline_dev}, test {run.baseline_test}; "
                 f"agent {opts.agent}")
        home = Path(run.workspace).parent / "agent" / "home"
        home.mkdir(parents=True)
        found = price_for(self.settings.prices, opts.driver_model)
        limits = SpendLimit(max_cost_usd=opts.max_cost, max_tokens=opts.max_tokens,
                            price=found[1] if found else None)
        if limits.max_cost_usd is not None and limits.price is None:
            model = opts.driver_model or "the driver model"
            self.warn(f"--max-cost: prices has no price for {model}: only a cost the "
                      "agent reports counts against it")
        self.limit_note = self.agent_error = None
        ctx = AgentContext(run_id=run.id, prompt=task_prompt(run), home=home,
                           endpoint=McpEndpoint(url="", token=created.token),
                           model=opts.driver_model, budget_s=run.budget_s,
                           options=dict(opts.agent_options), say=self.say, limits=limits)
        status, code = AgentStatus.interrupted, None
        signum: int | None = None
        try:
            if connector.kind == "inprocess":
                status, code = anyio.run(self._run_inprocess, connector, ctx, run)
            else:
                status, code = self._run_process(connector, ctx, run)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP made one (a2rl.interrupt)
            status, code, signum = AgentStatus.interrupted, None, interrupt.cause()
            self.warn(f"interrupted by {interrupt.name(signum)}: finalizing the run")
        finally:
            # no second signal may cut the finalization short: it is noted, not raised
            with interrupt.holding(self.warn):
                if status == AgentStatus.interrupted and signum is None:
                    signum = interrupt.received()
                self._update(run.id, agent_status=status, agent_exit_code=code,
                             agent_error=self.agent_error)
                reason = {AgentStatus.finished: "agent finished",
                          AgentStatus.budget: "budget exhausted" + (
                              f" ({self.limit_note})" if self.limit_note else ""),
                          AgentStatus.crashed: f"agent crashed (exit {code})",
                          AgentStatus.interrupted: interrupt.reason(signum)}.get(status, status)
                self.say(f"finalizing ({reason}): " + (
                    "the best submission is scored on the test split"
                    if self._submitted(run.id) else "no submission, so no final score"))
                finish_run(self.settings, self.store, run.id, reason=reason)
                record_driver(self.settings, self.store, run.id)
        summary = self.summary(run.id, started)
        late = interrupt.received()  # a signal during the finalization: the command stops too
        if signum or late:
            summary.interrupted_by = interrupt.name(signum or late)  # type: ignore[arg-type]
        return summary

    def _remaining(self, run: Run) -> float:
        """Seconds the agent has left, from the run's clock (started with the run)."""
        clock = RunClock(self.store, run.id).read()
        assert clock.deadline is not None
        return clock.remaining_s

    async def _run_inprocess(self, connector: Any, ctx: AgentContext,
                             run: Run) -> tuple[AgentStatus, int | None]:
        status: tuple[AgentStatus, int | None] = (AgentStatus.budget, None)
        with anyio.move_on_after(self._remaining(run)):
            try:
                async with Client(stdio_params(self.settings, run.id), mode="legacy") as client:
                    await connector.run(client, ctx)
                # an in-process agent that stopped at a spending limit or at its own turn
                # limit says which (`llm`): the run ended as its budget's end, not by choice
                self.limit_note = getattr(connector, "limit_note", None)
                ended, self.agent_error = returned_end(self.limit_note)
                status = (ended, 0)
            except Exception as exc:
                while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                    exc = exc.exceptions[0]  # type: ignore[assignment]
                self.warn(f"agent failed: {exc}")
                self.agent_error = error_line(str(exc) or type(exc).__name__)
                status = (AgentStatus.crashed, 1)
        if transcript := connector.recorded_transcript():
            self._update(run.id, agent_transcript_sha=self.store.put_blob(transcript))
        return status

    def _run_process(self, connector: Any, ctx: AgentContext,
                     run: Run) -> tuple[AgentStatus, int | None]:
        logs = Path(run.workspace).parent / "agent"
        with http_server(self.settings, self.store) as url:
            ctx = ctx.model_copy(update={"endpoint": McpEndpoint(url=url,
                                                                 token=ctx.endpoint.token)})
            launch = connector.prepare(ctx)
            marker = secrets.token_hex(8)
            argv, sandboxed = sandboxed_argv(launch, ctx.home, marker)
            if not sandboxed:
                self.say("warning: bubblewrap is missing, the agent runs unsandboxed")
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(ctx.home),
                   MARKER_VAR: marker, **launch.env}
            with open(logs / "transcript.jsonl", "wb") as out, \
                    open(logs / "stderr.log", "wb") as err:
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                        cwd=launch.cwd, env=env, start_new_session=True)
                self.say(f"agent started (pid {proc.pid}{', sandboxed' if sandboxed else ''})")
                status: tuple[AgentStatus, int | None]
                try:
                    code = self._wait(proc, run, connector, ctx.limits,
                                      logs / "transcript.jsonl")
                    status = (AgentStatus.finished if code == 0 else AgentStatus.crashed, code)
                except subprocess.TimeoutExpired:
                    self.say(f"{self.limit_note or 'the budget is spent'}: stopping the agent")
                    status = (AgentStatus.budget, None)
                except KeyboardInterrupt:
                    status = (AgentStatus.interrupted, None)
                    raise
                finally:
                    with interrupt.holding(self.warn):  # the agent is stopped whatever comes
                        _kill_tree(proc, marker)
                        stderr = (logs / "stderr.log").read_bytes()
                        self._update(run.id,
                                     agent_transcript_sha=self.store.put_blob(
                                         (logs / "transcript.jsonl").read_bytes()),
                                     agent_stderr_sha=self.store.put_blob(stderr))
        if status[0] == AgentStatus.crashed:
            tail = stderr_tail(stderr)
            self.agent_error = error_line(tail[-1]) if tail else \
                f"exit {status[1]}, nothing on stderr"
            self.warn(f"agent crashed (exit {status[1]})" + (
                "; the last lines of its stderr:\n" + "\n".join(f"  | {t}" for t in tail)
                if tail else "; it wrote nothing on stderr"))
        return status

    def _wait(self, proc: subprocess.Popen[bytes], run: Run, connector: Any,
              limits: SpendLimit, transcript: Path) -> int:
        """The agent's exit code; TimeoutExpired at the deadline, or once the usage its
        transcript streams has passed a spending limit (`limit_note` says which)."""
        if not limits.any:
            return proc.wait(self._remaining(run))
        while True:
            try:
                return proc.wait(max(0.0, min(USAGE_POLL_S, self._remaining(run))))
            except subprocess.TimeoutExpired:
                if self._remaining(run) <= 0:
                    raise
            try:
                used = driver_usage(connector.transcript_usage(transcript.read_bytes()))
            except Exception:  # noqa: BLE001 - the bytes are the agent's; read them next time
                continue
            if why := limits.passed(used):
                self.limit_note = why
                raise subprocess.TimeoutExpired(proc.args, 0)

    def _submitted(self, run_id: str) -> bool:
        with self.store.session() as s:
            return s.exec(select(Submission.id).where(Submission.run_id == run_id)).first() \
                is not None

    def _update(self, run_id: str, **fields: Any) -> None:
        runs.record_agent(self.store, run_id, **fields)

    def summary(self, run_id: str, started: float) -> RunSummary:
        with self.store.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
            failed = s.exec(select(Submission.error).where(
                Submission.run_id == run_id, Submission.status == SubmissionStatus.failed)).all()
        counts = run_summary(self.store, run_id) or {}
        best = best_submission(self.store, run_id, run.config.feedback_split)
        errors = list(dict.fromkeys((e or "no reason recorded").strip().splitlines()[0][:300]
                                    for e in failed))
        return RunSummary(
            run_id=run.id, task=run.task_id, agent=run.agent, agent_status=run.agent_status,
            agent_error=run.agent_error, end_reason=run.end_reason,
            baseline_score=run.baseline_test, best_score=best[1].score if best else None,
            final_score=counts.get("final_score"), final_note=counts.get("final_note"),
            submissions=counts["submissions"],
            tool_calls=counts["tool_calls"], revisions=counts["revisions"],
            seconds=round(time.monotonic() - started, 1), submissions_failed=len(failed),
            grading_errors=errors[:3])
