"""The MCP server: one process serves one run (stdio) or many runs (HTTP, token per run).

`A2RLServer.call_tool` is the single entry of every tool call: it finds the run, starts the
budget clock on the first call, refuses work after the deadline, binds the run for the tool
function and records the call whatever its outcome. Each run's tools get their runtime from
`run.build_runtime`: the run's `RunClock`, and this process's grading pump as their
`GradingHook`.
"""

from __future__ import annotations

import inspect
import json
import time
from datetime import datetime
from typing import Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from a2rl import __version__
from a2rl.layout import TASK_FILE
from a2rl.sandbox.workspace_fs import WorkspaceError
from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.tools import TOOLS
from a2rl.tools.runtime import CallContext, RunRuntime, bind, in_thread, unbind

from .argument_checks import check_arguments, unknown_arguments, validation_message
from .auth import RunTokenVerifier, ended_message
from .instructions import instructions_for
from .recording import RecordClosed, aend_call, astart_call, summarize
from .run.clock import RunClock, read_clock
from .run.grading import GradingPump, tell_sandbox
from .run.hooks import build_runtime
from .run.owner import DeadlineWatch, take_if_free
from .services import ServiceHost, start_run_services

ALWAYS_ALLOWED = {"budget_status", "get_score"}
#: The most of TASK.md the `a2rl://task` resource returns (the paper's tasks' are a few KB).
MAX_TASK_BYTES = 1_000_000


class RunRegistry:
    """The runtimes of the runs this process serves, built on first use."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings, self.store = settings, store
        self._runtimes: dict[str, RunRuntime[RunClock]] = {}
        self._services: dict[str, list[ServiceHost]] = {}
        # its thread starts on the first wake()
        self.pump = GradingPump(settings, store, on_deadline=self._deadline_moved)
        #: set by `a2rl serve` (`transports`): the runs it owns end at their deadline. Not in
        #: `a2rl run`'s own HTTP server, whose orchestrator ends its run itself.
        self.deadlines: DeadlineWatch | None = None

    def _deadline_moved(self, run_id: str, deadline: datetime) -> None:
        """A paused grading clock gave the run more time: tell its sandbox's watchdog, through
        the runtime when this process serves the run, else by attaching to its supervisor
        (this pump grades every run's requests)."""
        rt = self._runtimes.get(run_id)
        if rt is None:
            tell_sandbox(self.settings, self.store, run_id, deadline)
        else:
            rt.sandbox.push_deadline(deadline.timestamp())

    def _start_services(self, rt: RunRuntime[RunClock], run: Run) -> None:
        """The task's per-run services (sockets in `services/`); a failure is logged and the
        run goes on without them (the env code inside then reports the missing socket)."""
        if run.ended_at is not None:
            return
        try:
            self._services[run.id] = start_run_services(self.settings, self.store, run,
                                                        rt.dir / "services")
        except Exception:
            rt.log.exception("the task's services could not start")

    def get(self, run_id: str) -> RunRuntime[RunClock]:
        if run_id not in self._runtimes:
            with self.store.session() as s:
                run = s.get(Run, run_id)
            if run is None:
                raise ToolError(f"run {run_id!r} does not exist")
            rt = build_runtime(self.settings, self.store, run, grading=self.pump)
            self._runtimes[run_id] = rt
            self._start_services(rt, run)
            # served here: ours to finalize at its deadline when its maker is gone
            take_if_free(self.store, run_id)
            if self.deadlines is not None:
                self.deadlines.add(run_id)
        return self._runtimes[run_id]


class A2RLServer(MCPServer[Any]):
    def __init__(self, settings: Settings, store: Store, run_id: str | None = None,
                 transport: str = "stdio", **kwargs: Any) -> None:
        self.a2rl_settings, self.store, self.bound_run_id = settings, store, run_id
        self.registry = RunRegistry(settings, store)
        self.transport = transport
        # Each run's shares of worker threads (tools.runtime.in_thread): for its work and for
        # its waits on jobs, made on its first call.
        self._limiters: dict[str, tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]] = {}
        run = None
        if run_id is not None:
            with store.session() as s:
                run = s.get(Run, run_id)
            if run is None:
                raise ValueError(f"run {run_id!r} does not exist")
        super().__init__(name="a2rl", version=__version__,
                         instructions=instructions_for(run), **kwargs)
        #: each tool's argument names, in the order of its signature (unknown ones are refused)
        self._arguments: dict[str, list[str]] = {}
        for fn, hints in TOOLS:
            self.add_tool(fn, annotations=hints)
            self._arguments[fn.__name__] = list(inspect.signature(fn).parameters)
        self._register_resources()

    def _register_resources(self) -> None:
        @self.resource("a2rl://task", name="task", description="TASK.md: the task and its rules",
                       mime_type="text/markdown")
        def task_description() -> str:
            return task_text(self._runtime())

    def _runtime(self) -> RunRuntime[RunClock]:
        run_id = self.bound_run_id
        if run_id is None:
            token = get_access_token()
            if token is None:
                raise ToolError("no run token: send 'Authorization: Bearer <token>'")
            run_id = token.client_id
        return self.registry.get(run_id)

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        rt = self._runtime()
        started = time.perf_counter()
        arguments = arguments or {}
        # a call too large to run keeps no whole copy: the audit reads what ran
        oversize = check_arguments(arguments, self.a2rl_settings.recording.max_tool_args_bytes)
        try:
            call_id = await astart_call(self.store, rt.run_id, name, arguments, self.transport,
                                        self.a2rl_settings.recording.tool_arg_keep_bytes,
                                        None if oversize else
                                        self.a2rl_settings.recording.tool_arg_run_keep_bytes)
        except RecordClosed as exc:  # ended elsewhere a moment ago: nothing is recorded
            raise ToolError(ended_message(rt.run_id, exc.reason)) from None
        limiters = self.limiters(rt.run_id)
        token = bind(CallContext(rt, call_id, *limiters))
        summary, error = "", None
        try:
            refused = oversize
            if refused is None and name in self._arguments:  # an unknown tool: the SDK says so
                refused = unknown_arguments(arguments, self._arguments[name])
            if refused is not None:  # worded as the SDK words a tool's own errors
                raise ToolError(f"Error executing tool {name}: {refused}")
            await self._check_budget(rt, name)
            try:
                result = await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    raise ToolError(validation_message(name, exc.__cause__)) from None
                raise
            result = compact(result)
            summary, error = summarize(result)
            return result
        except ToolError as exc:
            error = summary = str(exc)
            raise
        except anyio.get_cancelled_exc_class():
            error = summary = "cancelled by the client"
            raise
        except Exception as exc:
            error = summary = f"internal error: {type(exc).__name__}: {exc}"
            rt.log.exception("tool %s failed", name)
            raise
        finally:
            await aend_call(self.store, call_id, started, summary, error)
            unbind(token)

    def limiters(self, run_id: str) -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        """The run's shares of worker threads: for its work, and for its waits on jobs."""
        limiters = self._limiters.get(run_id)
        if limiters is None:
            n = self.a2rl_settings.server.max_run_threads
            limiters = self._limiters[run_id] = (anyio.CapacityLimiter(n),
                                                 anyio.CapacityLimiter(n))
        return limiters

    async def _check_budget(self, rt: RunRuntime[RunClock], name: str) -> None:
        clock = read_clock(rt.clock.start())
        if clock.deadline is not None and not clock.exhausted:
            deadline = clock.deadline.timestamp()
            if rt.sandbox.deadline_is_stale(deadline):  # moved by a grader that could not tell it
                await anyio.to_thread.run_sync(rt.sandbox.push_deadline, deadline)
        if name in ALWAYS_ALLOWED:
            return
        if clock.ended:
            raise ToolError(f"this run has ended ({clock.end_reason or 'finished'}); "
                            "no more work is possible")
        if clock.exhausted and clock.deadline is not None:
            await in_thread(exhaust, rt)
            raise ToolError(f"budget exhausted: the deadline ({clock.deadline.isoformat()}) "
                            "has passed, running jobs were stopped; only budget_status answers "
                            "now")


def compact(result: Any) -> Any:
    """`result` with its text block the structured content serialized without indentation or
    padding. The SDK writes it pretty-printed (indent=2): the driver model reads that text on
    every call, as well as the structured content, and the spaces cost it tokens. The MCP
    spec asks that structured content also come as serialized JSON in a text block, which this
    still is (`bench/tool_bytes.py` measures the bytes saved)."""
    if (not isinstance(result, CallToolResult) or result.structured_content is None
            or result.is_error):
        return result
    text = json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return result.model_copy(update={"content": [TextContent(type="text", text=text)]})


def task_text(rt: RunRuntime[RunClock]) -> str:
    """TASK.md as the `a2rl://task` resource serves it, read through the workspace's safe
    opener: the file is the agent's to replace (the workspace root is its own), so a symlink
    to a host file, a FIFO or a huge file gets a one-line note, never the host file, a hang or
    the whole file in memory."""
    try:
        data, st = rt.workspace.fs().read((TASK_FILE,), MAX_TASK_BYTES)
    except WorkspaceError as exc:
        return f"No task description: {exc}."
    text = data.decode("utf-8", errors="replace")
    if st.st_size > MAX_TASK_BYTES:
        text += (f"\n\n[... TASK.md is {st.st_size} bytes; the first {MAX_TASK_BYTES} are "
                 "shown: read_file reads the rest ...]\n")
    return text


def exhaust(rt: RunRuntime[RunClock]) -> None:
    """At the deadline: note it on the clock (once) and stop every job."""
    from a2rl.store import JobEndCause
    from a2rl.tools.jobs import stop_all

    rt.clock.exhaust()
    stop_all(rt, cause=JobEndCause.budget, evidence="the budget ran out: the server stopped "
             "every job at the deadline")


def build_server(settings: Settings, store: Store, run_id: str | None = None,
                 transport: str = "stdio") -> A2RLServer:
    """A server bound to one run (stdio, in-memory), or token-routed (HTTP) when run_id is None."""
    if run_id is not None:
        return A2RLServer(settings, store, run_id=run_id, transport=transport)
    url = f"http://{settings.server.host}:{settings.server.port}"
    return A2RLServer(
        settings, store, transport=transport, token_verifier=RunTokenVerifier(store),
        auth=AuthSettings(issuer_url=url, resource_server_url=None, required_scopes=["run"]))
