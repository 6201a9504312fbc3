"""Protocol and argument attacks: every request gets an answer, and the store keeps the record.

The wire attacks feed raw bytes to a real `a2rl serve` (stdio: a subprocess's stdin; HTTP: a
real uvicorn server, raw POST bodies). Each asserts the JSON-RPC error the specification
gives, with the request id when it can be read, that the server answers the next request,
and that the refusal is recorded for the run. One server and one run per transport are
shared by the module: these attacks only read.

The argument attacks go through the `agent` fixture (both sandbox backends): each asserts the
one-line reason, the recorded call, and that the attack had no effect (no file written, no
freeze).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from a2rl.server import create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Run, Store, ToolCall

from ..helpers import calls, last_call, text_of
from .conftest import Agent
from .wire import HttpServer, HttpWire, StdioWire, call

pytestmark = pytest.mark.timeout(120)

TRANSPORTS = ["stdio", "http"]


class Target:
    """A run reachable by raw bytes, and its store."""

    def __init__(self, wire: StdioWire | HttpWire, run: Run, store: Store) -> None:
        self.wire, self.run, self.store = wire, run, store
        self.next_id = 100

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def rows(self) -> list[ToolCall]:
        return calls(self.store, self.run.id)

    def assert_answers_next(self) -> None:
        """The server is up and serves this run's next request."""
        request_id = self.new_id()
        answer = self.wire.send(call(request_id, "budget_status", {}))
        assert answer["id"] == request_id and "result" in answer, answer
        assert not answer["result"].get("isError"), answer
        assert self.wire.alive()
        assert self.rows()[-1].tool == "budget_status"

    def refused(self, raw: bytes, code: int, request_id: int | None) -> tuple[dict[str, Any],
                                                                               ToolCall]:
        """Send `raw`: it must get JSON-RPC error `code` for `request_id`, and be recorded."""
        before = len(self.rows())
        answer = self.wire.send(raw)
        assert answer.get("error", {}).get("code") == code, answer
        assert answer["id"] == request_id, answer
        if isinstance(self.wire, HttpWire):
            assert self.wire.last_status == 400
        rows = self.rows()
        assert len(rows) == before + 1, "the refusal was not recorded"
        row = rows[-1]
        assert row.is_error and row.error == answer["error"]["message"]
        self.assert_answers_next()
        return answer, row


@pytest.fixture(scope="module")
def wire_settings(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    db = tmp_path_factory.mktemp("wire") / "a2rl.db"
    return Settings(home=a2rl_home, db_url=f"sqlite:///{db}")


@pytest.fixture(scope="module")
def wire_store(wire_settings: Settings) -> Iterator[Store]:
    s = Store(wire_settings.database_url)
    yield s
    s.close()


@pytest.fixture(scope="module")
def http_server(wire_settings: Settings, wire_store: Store,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = HttpServer(wire_settings, tmp_path_factory.mktemp("http") / "server.log")
    yield server
    server.close()


@pytest.fixture(scope="module", params=TRANSPORTS)
def target(request: pytest.FixtureRequest, wire_settings: Settings, wire_store: Store,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    created = create_run(wire_settings, wire_store, task_id="fixture", budget="30m",
                         baseline=False)
    wire: StdioWire | HttpWire
    if request.param == "stdio":
        wire = StdioWire(wire_settings, created.run.id,
                         tmp_path_factory.mktemp("stdio") / "server.log")
    else:
        wire = HttpWire(request.getfixturevalue("http_server"), created.token)
    try:
        yield Target(wire, created.run, wire_store)
    finally:
        wire.close()
        finish_run(wire_settings, wire_store, created.run.id)


# -- the wire ----------------------------------------------------------------------------------

def test_lone_surrogate_in_an_argument_is_answered_and_recorded(target: Target) -> None:
    request_id = target.new_id()
    raw = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file",'
           b'"arguments":{"path":"TASK\\udcff.md"}}}' % request_id)
    answer, row = target.refused(raw, -32602, request_id)
    assert "lone surrogate" in answer["error"]["message"]
    assert "params.arguments.path" in answer["error"]["message"]
    assert row.tool == "read_file" and row.arguments == {"path": "TASK\ufffd.md"}


def test_lone_surrogate_in_the_tool_name_is_answered(target: Target) -> None:
    request_id = target.new_id()
    raw = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read\\udcff",'
           b'"arguments":{}}}' % request_id)
    _, row = target.refused(raw, -32602, request_id)
    assert row.tool == "read\ufffd"


def test_lone_surrogate_in_an_argument_name_is_answered(target: Target) -> None:
    request_id = target.new_id()
    raw = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_command",'
           b'"arguments":{"command":"touch made-it","x\\udcff":1}}}' % request_id)
    answer, row = target.refused(raw, -32602, request_id)
    assert "a key of `params.arguments`" in answer["error"]["message"]
    assert row.tool == "run_command" and "x\ufffd" in row.arguments
    assert not (Path(target.run.workspace) / "made-it").exists()


def test_unparseable_json_gets_a_parse_error_with_its_id(target: Target) -> None:
    request_id = target.new_id()
    raw = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":' % request_id
    answer, row = target.refused(raw, -32700, request_id)
    assert answer["error"]["message"].startswith("Parse error")
    assert row.tool == "(refused request)"


def test_garbage_gets_a_parse_error_with_a_null_id(target: Target) -> None:
    target.refused(b"this is not json at all", -32700, None)


def test_invalid_utf8_gets_a_parse_error(target: Target) -> None:
    request_id = target.new_id()
    raw = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file",'
           b'"arguments":{"path":"\xff\xfe"}}}' % request_id)
    answer, _ = target.refused(raw, -32700, request_id)
    assert "UTF-8" in answer["error"]["message"]


def test_deeply_nested_json_is_answered_quickly(target: Target) -> None:
    request_id = target.new_id()
    depth = 100_000
    raw = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file",'
           b'"arguments":{"path":' % request_id + b"[" * depth + b"]" * depth + b"}}}")
    started = time.monotonic()
    answer, row = target.refused(raw, -32600, request_id)
    assert time.monotonic() - started < 5
    assert "nested too deep" in answer["error"]["message"]
    assert row.tool == "read_file"


def test_nesting_just_past_the_parsers_limit_is_answered(target: Target) -> None:
    request_id = target.new_id()
    raw = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_files",'
           b'"arguments":{"path":' % request_id + b"[" * 300 + b"]" * 300 + b"}}}")
    target.refused(raw, -32600, request_id)


def test_batch_array_gets_invalid_request(target: Target) -> None:
    raw = json.dumps([json.loads(call(target.new_id(), "budget_status", {})),
                      json.loads(call(target.new_id(), "budget_status", {}))]).encode()
    answer, _ = target.refused(raw, -32600, None)
    assert "batch" in answer["error"]["message"]


def test_an_object_that_is_not_json_rpc_gets_invalid_request(target: Target) -> None:
    request_id = target.new_id()
    answer, _ = target.refused(b'{"id":%d,"method":"tools/list"}' % request_id, -32600,
                               request_id)
    assert '"jsonrpc": "2.0"' in answer["error"]["message"]


def test_a_method_of_the_wrong_type_gets_invalid_request(target: Target) -> None:
    request_id = target.new_id()
    target.refused(b'{"jsonrpc":"2.0","id":%d,"method":5}' % request_id, -32600, request_id)


def test_a_valid_call_still_passes_the_guard(target: Target) -> None:
    request_id = target.new_id()
    answer = target.wire.send(call(request_id, "list_files", {"path": "."}))
    assert answer["id"] == request_id and not answer["result"].get("isError"), answer
    assert "TASK.md" in json.dumps(answer["result"])


def test_http_garbage_without_a_token_touches_no_run(http_server: HttpServer,
                                                      wire_store: Store) -> None:
    import httpx2

    before = {run_id: len(calls(wire_store, run_id)) for run_id in _run_ids(wire_store)}
    for headers in ({}, {"Authorization": "Bearer a2rl_wrong"}):
        resp = httpx2.post(http_server.url, content=b"[" * 100_000, headers={
            **headers, "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        assert resp.status_code == 401
    after = {run_id: len(calls(wire_store, run_id)) for run_id in _run_ids(wire_store)}
    assert after == before
    assert http_server.alive()


def _run_ids(store: Store) -> list[str]:
    from sqlmodel import select

    with store.session() as s:
        return list(s.exec(select(Run.id)).all())


# -- the arguments (every tool, both backends) -----------------------------------------------

@pytest.mark.anyio
async def test_nul_in_a_command_gets_a_one_line_reason(agent: Agent) -> None:
    text = await agent.refused("run_command", command="echo hi > pwned\x00; echo more")
    assert text.startswith("Error executing tool run_command: `command`: holds a NUL byte")
    assert "\n" not in text
    row = last_call(agent.store, agent.run.id)
    assert row.tool == "run_command" and row.is_error and row.error == text
    assert not (Path(agent.run.workspace) / "pwned").exists()


@pytest.mark.anyio
async def test_nul_in_a_note_and_a_path(agent: Agent) -> None:
    text = await agent.refused("submit_checkpoint", path="ckpt", note="a\x00b")
    assert text.startswith("Error executing tool submit_checkpoint: `note`: holds a NUL byte")
    text = await agent.refused("read_file", path="TASK.md\x00.txt")
    assert text.startswith("Error executing tool read_file: `path`: holds a NUL byte")
    assert [c.is_error for c in calls(agent.store, agent.run.id)] == [True, True]


@pytest.mark.anyio
async def test_lone_surrogate_through_the_sdk_gets_a_one_line_reason(agent: Agent) -> None:
    text = await agent.refused("edit_file", path="notes\udcff.txt", new_text="x")
    assert text.startswith("Error executing tool edit_file: `path`: holds a lone surrogate")
    row = last_call(agent.store, agent.run.id)
    assert row.arguments["path"] == "notes\ufffd.txt"
    assert not any("notes" in p.name for p in Path(agent.run.workspace).iterdir())


@pytest.mark.anyio
async def test_a_megabyte_path_is_refused_at_once(agent: Agent) -> None:
    for tool in ("read_file", "list_files", "submit_checkpoint"):
        started = time.monotonic()
        text = await agent.refused(tool, path="a/" * 500_000)
        assert time.monotonic() - started < 0.5, f"{tool} took too long"
        assert text == (f"Error executing tool {tool}: `path`: is too long (1,000,000 bytes); "
                        "a path may be at most 4096 bytes")
    started = time.monotonic()
    text = await agent.refused("edit_file", path="b" * 4_000_000, new_text="x")
    assert time.monotonic() - started < 1.0
    assert "a path may be at most 4096 bytes" in text


@pytest.mark.anyio
async def test_a_long_path_component_gets_a_reason(agent: Agent) -> None:
    text = await agent.refused("read_file", path="d/" + "x" * 3000)
    assert text == ("Error executing tool read_file: `path`: a name in it is too long "
                    "(3,000 bytes); a file or folder name may be at most 255 bytes")
    text = await agent.refused("edit_file", path="y" * 256, new_text="hello")
    assert "at most 255 bytes" in text
    assert not any(p.name.startswith("yyy") for p in Path(agent.run.workspace).iterdir())


@pytest.mark.anyio
async def test_oversize_arguments_are_refused_and_nothing_is_written(agent: Agent) -> None:
    limit = agent.settings.recording.max_tool_args_bytes
    big = "z" * (limit + 1)
    text = await agent.refused("edit_file", path="big.txt", new_text=big)
    assert text.startswith(f"Error executing tool edit_file: the arguments are {limit + 20:,} "
                           "bytes; a call may carry at most")
    assert not (Path(agent.run.workspace) / "big.txt").exists()
    row = last_call(agent.store, agent.run.id)
    assert len(row.arguments["new_text"].encode()) <= agent.settings.recording.tool_arg_keep_bytes
    assert row.arguments_blob is None  # it never ran: no whole copy


@pytest.mark.anyio
async def test_a_big_argument_is_stored_bounded_with_its_hash(agent: Agent) -> None:
    text = ("0123456789abcdef" * 70_000)[:1_000_000]
    await agent.ok("edit_file", path="big.txt", new_text=text)
    assert (Path(agent.run.workspace) / "big.txt").read_text() == text
    row = last_call(agent.store, agent.run.id)
    keep = agent.settings.recording.tool_arg_keep_bytes
    assert row.arguments["new_text"] == text[:keep]
    assert row.arguments["_truncated"] == {"new_text": {
        "sha256": hashlib.sha256(text.encode()).hexdigest(), "size": len(text)}}
    assert row.arguments["path"] == "big.txt"
    # the whole arguments, as the tool received them, kept once for the audit (issue 43)
    assert row.arguments_blob is not None
    assert json.loads(agent.store.get_blob(row.arguments_blob)) == {"path": "big.txt",
                                                                    "new_text": text}


@pytest.mark.anyio
async def test_validation_errors_read_one_line_per_field(agent: Agent) -> None:
    text = await agent.refused("run_command", command="true", wait_s="soon")
    assert text.startswith("Error executing tool run_command: invalid arguments\n"
                           "`wait_s`: must be a valid number")
    assert "pydantic" not in text and "http" not in text
    text = await agent.refused("read_file", path="TASK.md", offset=-1, limit="many")
    lines = text.splitlines()
    assert lines[0] == "Error executing tool read_file: invalid arguments"
    assert sorted(line.split(":")[0] for line in lines[1:]) == ["`limit`", "`offset`"]
    assert last_call(agent.store, agent.run.id).error == text


@pytest.mark.anyio
async def test_nul_on_postgresql_is_refused_and_recorded(postgres: Any, settings: Settings) -> None:
    """PostgreSQL cannot store NUL: before the check, the call failed with a bare error and the
    record was lost."""
    from ..conftest import require_bwrap
    from .conftest import open_agent

    require_bwrap()
    pg_settings = settings.updated({"db_url": postgres.create_database()})
    store = Store(pg_settings.database_url)
    try:
        async for agent in open_agent(pg_settings, store, task_id="fixture"):
            text = await agent.refused("run_command", command="echo a\x00b")
            assert text.startswith("Error executing tool run_command: `command`: holds a NUL byte")
            text = await agent.refused("submit_checkpoint", path="x", note="\x00")
            assert text.startswith(
                "Error executing tool submit_checkpoint: `note`: holds a NUL byte")
            rows = calls(store, agent.run.id)
            assert [(r.tool, r.is_error) for r in rows] == [("run_command", True),
                                                           ("submit_checkpoint", True)]
            assert "`command`: holds a NUL byte" in (rows[0].error or "")
    finally:
        store.close()


def test_a_message_over_the_size_limit_is_refused_without_being_kept(target: Target,
                                                                     wire_settings: Settings
                                                                     ) -> None:
    request_id = target.new_id()
    limit = 2 * wire_settings.recording.max_tool_args_bytes + 65_536
    raw = call(request_id, "edit_file", {"path": "huge.txt", "new_text": "q" * (limit + 1)})
    answer, row = target.refused(raw, -32600, request_id)
    assert answer["error"]["message"] == (
        f"Invalid request: the message is over {limit:,} bytes ({len(raw):,}); write large "
        "files with a command, e.g. from a script")
    # Read from the message's head: the tool, and each argument capped as any call's are.
    assert row.tool == "edit_file" and row.arguments["path"] == "huge.txt"
    kept = row.arguments["new_text"]
    assert set(kept) == {"q"} and len(kept) == wire_settings.recording.tool_arg_keep_bytes
    assert row.arguments["_truncated"] == {"(message)": {
        "sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}}
    assert not (Path(target.run.workspace) / "huge.txt").exists()


def test_an_oversize_message_with_its_id_last_is_answered_with_that_id(
        target: Target, wire_settings: Settings) -> None:
    request_id = target.new_id()
    text = "q" * (2 * wire_settings.recording.max_tool_args_bytes + 65_537)
    raw = json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {
        "name": "edit_file", "arguments": {"path": "late.txt", "new_text": text}},
        "id": request_id}).encode()
    target.refused(raw, -32600, request_id)


# -- every request gets an answer, however large ---------------------------------------------
# A loaded 2-core machine: each test runs beside a process that spins a core for its whole
# duration. The call is an `edit_file` aimed outside the workspace with a huge `new_text`:
# 1 MB passes every size check and is refused by the tool, 10 MB by the argument limit
# (`max_tool_args_bytes`), 50 and 100 MB by the guard before any parse (over twice that).

SIZES_MB = [1, 10, 50, 100]
ANSWER_S = 5.0
ESCAPE = "../escape.txt"


@pytest.fixture
def cpu_burner() -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait(10)


def _huge(size_mb: int) -> dict[str, Any]:
    return {"path": ESCAPE, "new_text": "z" * (size_mb << 20)}


def _client_cost_s(kind: str, arguments: dict[str, Any]) -> float:
    """What the SDK's client spends on a call this size before the server can answer, timed
    here under the same load: over stdio it encodes the message with pydantic; over HTTP it
    formats the message for its debug log and encodes it with `json`; in memory nothing.
    Each pass is over the whole argument: at 100 MB, seconds the server has no part in."""
    import mcp_types

    message = mcp_types.JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/call",
                                       params={"name": "edit_file", "arguments": arguments})
    started = time.monotonic()
    if kind == "stdio":
        message.model_dump_json(by_alias=True, exclude_unset=True)
    elif kind == "http":
        f"Sending client message: {message}"  # noqa: B018
        json.dumps(message.model_dump(by_alias=True, exclude_unset=True))
    return time.monotonic() - started


def _error_text(answer: dict[str, Any]) -> str:
    """The error a raw answer carries: a JSON-RPC error, or a tool result marked isError."""
    if "error" in answer:
        return str(answer["error"]["message"])
    assert answer["result"].get("isError"), f"the huge call was not refused: {str(answer)[:300]}"
    return " ".join(part.get("text", "") for part in answer["result"]["content"])


def _assert_recorded_bounded(row: ToolCall, text: str, keep_bytes: int) -> None:
    """The call's row: the tool named, the error as answered, each argument capped."""
    assert row.tool == "edit_file" and row.is_error and row.error == text
    assert row.arguments["path"] == ESCAPE
    assert set(row.arguments["new_text"]) <= {"z"}
    assert len(row.arguments["new_text"].encode()) <= keep_bytes
    assert row.arguments["_truncated"]  # the size and sha256 of what was not kept


@pytest.mark.parametrize("size_mb", SIZES_MB)
def test_a_huge_raw_call_gets_one_line_at_once(target: Target, wire_settings: Settings,
                                              size_mb: int, cpu_burner: None) -> None:
    request_id = target.new_id()
    raw = call(request_id, "edit_file", _huge(size_mb))
    started = time.monotonic()
    answer = target.wire.send(raw)
    elapsed = time.monotonic() - started
    assert answer["id"] == request_id, str(answer)[:300]
    text = _error_text(answer)
    assert elapsed < ANSWER_S, f"{size_mb} MB answered in {elapsed:.1f} s"
    assert "\n" not in text and len(text) < 300, text
    _assert_recorded_bounded(target.rows()[-1], text, wire_settings.recording.tool_arg_keep_bytes)
    target.assert_answers_next()
    assert not (Path(target.run.workspace).parent / "escape.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("size_mb", SIZES_MB)
@pytest.mark.parametrize("kind", ["stdio", "http", "memory"])
async def test_a_huge_call_through_the_sdk_gets_one_line_at_once(
        kind: str, size_mb: int, wire_settings: Settings, wire_store: Store,
        request: pytest.FixtureRequest, cpu_burner: None) -> None:
    import anyio
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    from a2rl.server import build_server

    from .wire import A2RL, server_env

    created = create_run(wire_settings, wire_store, task_id="fixture", budget="30m",
                         baseline=False)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {created.token}"}, timeout=30)
    source: Any
    if kind == "stdio":
        source = StdioServerParameters(command=A2RL, args=["serve", "--run", created.run.id],
                                       env=server_env(wire_settings))
    elif kind == "http":
        source = streamable_http_client(request.getfixturevalue("http_server").url,
                                        http_client=http)
    else:
        source = build_server(wire_settings, wire_store, run_id=created.run.id,
                              transport="memory")
    try:
        async with Client(source, mode="legacy") as client:
            await client.call_tool("budget_status", {})  # the server is up and warm
            started = time.monotonic()
            with anyio.fail_after(4 * ANSWER_S):  # a dropped answer fails, not hangs
                try:
                    result = await client.call_tool("edit_file", _huge(size_mb))
                    assert result.is_error, "the huge call was not refused"
                    text = text_of(result)
                except MCPError as exc:  # the guard's JSON-RPC error
                    text = str(exc)
            elapsed = time.monotonic() - started
            own = _client_cost_s(kind, _huge(size_mb))
            assert elapsed - own < ANSWER_S, (f"{size_mb} MB answered in {elapsed:.1f} s, "
                                              f"{own:.1f} s of them the client's own")
            assert "\n" not in text and len(text) < 300, text
            _assert_recorded_bounded(last_call(wire_store, created.run.id), text,
                                     wire_settings.recording.tool_arg_keep_bytes)
            with anyio.fail_after(ANSWER_S):
                assert not (await client.call_tool("budget_status", {})).is_error
            assert last_call(wire_store, created.run.id).tool == "budget_status"
    finally:
        await http.aclose()
        finish_run(wire_settings, wire_store, created.run.id)
    assert not (Path(created.run.workspace).parent / "escape.txt").exists()


@pytest.mark.anyio
async def test_a_slow_store_write_does_not_hold_the_event_loop(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over HTTP every run shares one event loop: recording a call must not stop it."""
    import anyio

    from a2rl.server import recording

    from .conftest import open_agent

    def slowly(fn):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            time.sleep(0.6)  # a store under load: a lock, a network round trip
            return fn(*args, **kwargs)
        return wrapped

    async for agent in open_agent(settings, store, task_id="fixture"):
        await agent.ok("budget_status")  # the run's runtime is built before the clock runs
        monkeypatch.setattr(recording, "start_call", slowly(recording.start_call))
        monkeypatch.setattr(recording, "end_call", slowly(recording.end_call))
        gaps: list[float] = []

        async def tick(gaps: list[float]) -> None:
            last = time.monotonic()
            while True:
                await anyio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async with anyio.create_task_group() as tg:
            tg.start_soon(tick, gaps)
            started = time.monotonic()
            await agent.ok("budget_status")
            assert time.monotonic() - started >= 1.2  # both writes were slow
            tg.cancel_scope.cancel()
        assert max(gaps) < 0.3, f"the event loop stood still for {max(gaps):.2f} s"
        assert [c.tool for c in calls(store, agent.run.id)] == ["budget_status"] * 2


@pytest.mark.anyio
async def test_odd_shaped_arguments_get_an_answer_and_a_record(agent: Agent) -> None:
    """Nesting as deep as the wire lets through, thousands of unknown keys, a megabyte key:
    each call is answered with a short reason and recorded, and the server goes on."""
    deep: Any = "x"
    for _ in range(150):
        deep = {"d": deep}
    text = await agent.refused("read_file", path=deep)
    assert text.startswith("Error executing tool read_file: invalid arguments\n`path`: must be")
    row = last_call(agent.store, agent.run.id)
    assert row.is_error and row.arguments["path"] == "(not stored: nested deeper than 64 levels)"

    many = {f"k{i}": i for i in range(20_000)}
    text = await agent.refused("list_files", path=".", **many)  # unknown arguments: refused
    assert len(text) < 500 and "unknown arguments `k0`" in text and "19,995 more" in text
    row = last_call(agent.store, agent.run.id)
    assert row.is_error and len(row.arguments) == 65  # ...and not all stored
    assert row.arguments["_truncated"] == {"(more arguments)": {"count": 20_001 - 64}}

    text = await agent.refused("read_file", path="TASK.md", **{"k" * 1_000_000: "\x00"})
    assert len(text) < 500 and "holds a NUL byte" in text
    row = last_call(agent.store, agent.run.id)
    assert max(len(k) for k in row.arguments) <= 200
    await agent.ok("read_file", path="TASK.md")


@pytest.mark.anyio
async def test_nul_in_an_argument_name_is_refused(agent: Agent) -> None:
    """(A lone surrogate in a name is refused on the wire, see above.)"""
    text = await agent.refused("run_command", command="touch made-it", **{"pa\x00th": "x"})
    assert text == ("Error executing tool run_command: an argument's name holds a NUL byte "
                    "or a lone surrogate")
    assert not (Path(agent.run.workspace) / "made-it").exists()
    assert [c.is_error for c in calls(agent.store, agent.run.id)] == [True]


@pytest.mark.anyio
async def test_a_call_the_client_gives_up_on_is_still_recorded(agent: Agent) -> None:
    """A client-side timeout cancels the call on the server: its row is completed anyway (the
    store write is shielded from the cancellation) and the next call is served. (Where the
    tool's wait cannot be interrupted, the call ends at its wait_s and is recorded then.)"""
    import anyio

    with pytest.raises(Exception):  # noqa: B017  (the client's timeout error)
        await agent.client.call_tool("run_command", {"command": "sleep 20", "wait_s": 4},
                                     read_timeout_seconds=1)
    with anyio.fail_after(20):
        while True:
            row = last_call(agent.store, agent.run.id)
            if row.duration_ms > 0:
                break
            await anyio.sleep(0.1)
    assert row.tool == "run_command"
    assert row.error in (None, "cancelled by the client")
    assert row.is_error == (row.error is not None)
    await agent.ok("budget_status")
