"""Every tool through a real MCP client, in the legacy JSON-RPC mode and the default mode."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
import pytest
from mcp import Client
from sqlmodel import select

from a2rl.server import build_server, create_run, finish_run
from a2rl.store import Job, Revision, Run, Store
from a2rl.store.models import utcnow

from .conftest import backend_settings
from .helpers import calls, last_call, text_of

pytestmark = [pytest.mark.timeout(120), pytest.mark.anyio]


@pytest.fixture(params=["local", "docker"])
def backend(request, settings):  # type: ignore[no-untyped-def]
    """The same behaviour suite on every sandbox backend."""
    return backend_settings(settings, request.param)


@pytest.fixture
def run(backend, store) -> Run:  # type: ignore[no-untyped-def]
    created = create_run(backend, store, task_id="fixture", budget="30m", baseline=False)
    yield created.run
    finish_run(backend, store, created.run.id)


@pytest.fixture(params=["legacy", "auto"])
async def client(request, backend, store, run) -> AsyncIterator[Client]:  # type: ignore[no-untyped-def]
    server = build_server(backend, store, run_id=run.id, transport="memory")
    async with Client(server, mode=request.param) as c:
        yield c


async def call(client: Client, name: str, **args):  # type: ignore[no-untyped-def]
    return await client.call_tool(name, args)


async def test_tool_list_has_annotations(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"run_command", "job_status", "job_kill", "read_file", "list_files", "edit_file",
            "budget_status"} <= set(tools)
    assert tools["read_file"].annotations.read_only_hint is True
    assert tools["run_command"].annotations.destructive_hint is True
    assert all(t.description for t in tools.values())


async def test_run_command_and_recording(client: Client, store: Store, run: Run) -> None:
    r = await call(client, "run_command", command="echo hello; exit 3", wait_s=10)
    assert not r.is_error
    assert r.structured_content["exit_code"] == 3
    assert "hello" in r.structured_content["output"]
    row = last_call(store, run.id)
    assert row.tool == "run_command" and row.arguments["command"].startswith("echo hello")
    assert not row.is_error and row.duration_ms > 0 and "hello" in row.result_summary


async def test_unknown_arguments_are_refused_and_recorded(client: Client, store: Store,
                                                        run: Run) -> None:
    """A misspelt argument used to be dropped silently (the call ran with the defaults)."""
    r = await call(client, "run_command", command="touch made-it", wait=5)
    assert r.is_error
    assert text_of(r) == ("Error executing tool run_command: unknown argument `wait`; this "
                          "tool takes `command`, `wait_s`")
    assert not (Path(run.workspace) / "made-it").exists()
    r = await call(client, "budget_status", verbose=True, x=1)
    assert text_of(r) == ("Error executing tool budget_status: unknown arguments `verbose`, "
                          "`x`; this tool takes no arguments")
    rows = calls(store, run.id)
    assert [(c.tool, c.is_error) for c in rows] == [("run_command", True), ("budget_status", True)]
    assert rows[0].arguments == {"command": "touch made-it", "wait": 5}
    assert rows[0].error == text_of(await call(client, "run_command", command="x", wait=5))


async def test_a_bad_value_is_refused_and_stored_as_sent(client: Client, store: Store,
                                                         run: Run) -> None:
    r = await call(client, "run_command", command="echo hi", wait_s="abc")
    assert r.is_error and "`wait_s`: must be a valid number" in text_of(r)
    row = last_call(store, run.id)
    assert row.is_error and row.arguments == {"command": "echo hi", "wait_s": "abc"}
    assert row.error == text_of(r)


async def test_results_are_compact_json_of_the_structured_content(client: Client) -> None:
    r = await call(client, "run_command", command="echo 'héllo  world'", wait_s=10)
    assert len(r.content) == 1
    text = r.content[0].text
    assert json.loads(text) == r.structured_content
    assert text == json.dumps(r.structured_content, separators=(",", ":"), ensure_ascii=False)
    assert "héllo  world" in text and '": ' not in text and "\n  " not in text
    r = await call(client, "budget_status")
    assert json.loads(r.content[0].text) == r.structured_content
    assert "\n" not in r.content[0].text


@pytest.mark.cheats("echoes a secret-looking variable to see it is not passed")
async def test_thread_counts_reach_the_jobs(client: Client,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's environment is an allow-list; the numeric libraries' thread counts the
    operator set pass through it (runs sharing cores need them), and nothing else does."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "many")  # not a number: not passed
    monkeypatch.setenv("OMP_SECRET", "x")
    r = await call(client, "run_command", wait_s=10,
                   command='echo "$OMP_NUM_THREADS ${OPENBLAS_NUM_THREADS-unset} '
                           '${OMP_SECRET-unset}"')
    assert r.structured_content["output"].strip() == "3 unset unset"


async def test_edit_read_list_and_revisions(client: Client, store: Store, run: Run) -> None:
    r = await call(client, "edit_file", path="code/a.py", new_text="x = 1\ny = 2\n")
    assert r.structured_content["created"] is True
    r = await call(client, "edit_file", path="code/a.py", old_text="y = 2", new_text="y = 3")
    assert "+y = 3" in r.structured_content["diff"]
    r = await call(client, "read_file", path="code/a.py")
    assert r.structured_content["content"].splitlines()[1].endswith("y = 3")
    # A file without a final newline: its last lines, old and new, each on a line of its own.
    await call(client, "edit_file", path="code/c.txt", new_text="a\nb")
    r = await call(client, "edit_file", path="code/c.txt", old_text="b", new_text="c")
    lines = r.structured_content["diff"].splitlines()
    assert lines[-4:] == ["-b", "\\ No newline at end of file", "+c",
                          "\\ No newline at end of file"], lines
    await call(client, "run_command", command="echo 'z = 4' >> code/a.py && echo hi > code/b.txt")
    r = await call(client, "list_files", path="code")
    paths = {e["path"] for e in r.structured_content["entries"]}
    assert {"code/a.py", "code/b.txt"} <= paths
    with store.session() as s:
        revs = s.exec(select(Revision).where(Revision.run_id == run.id,
                                             Revision.path == "code/a.py")).all()
    assert [r.source for r in revs] == ["edit_file", "edit_file", "command"]
    assert revs[1].prev_blob_sha == revs[0].blob_sha
    assert store.get_blob(revs[2].blob_sha).endswith(b"z = 4\n")
    assert all(r.tool_call_id for r in revs)


async def test_read_file_paging(client: Client) -> None:
    await call(client, "run_command", command="seq 1 1000 > code/n.txt")
    r = await call(client, "read_file", path="code/n.txt", offset=10, limit=5)
    sc = r.structured_content
    assert sc["content"].splitlines()[0].split("\t") == ["    11", "11"]
    assert sc["lines_returned"] == 5 and sc["next_offset"] == 15 and sc["total_lines"] == 1000
    r = await call(client, "read_file", path="code/n.txt", offset=995, limit=100)
    assert r.structured_content["content"].splitlines()[-1].endswith("1000")
    assert r.structured_content["next_offset"] is None


@pytest.mark.parametrize("path,expect", [
    ("../x.txt", "outside the workspace"),
    ("/etc/passwd", "is absolute"),
    ("code/../../x", "outside the workspace"),
])
async def test_paths_outside_are_refused(client: Client, store: Store, run: Run,
                                         path: str, expect: str) -> None:
    r = await call(client, "read_file", path=path)
    assert r.is_error and expect in text_of(r)
    row = last_call(store, run.id)
    assert row.is_error and expect in row.error and row.arguments["path"] == path


async def test_symlink_out_is_refused(client: Client, store: Store, run: Run) -> None:
    os.symlink("/etc/hostname", Path(run.workspace) / "code" / "link")
    r = await call(client, "read_file", path="code/link")
    assert r.is_error and "outside the workspace" in text_of(r)
    r = await call(client, "edit_file", path="code/link", new_text="x")
    assert r.is_error and last_call(store, run.id).is_error


async def test_readonly_input_and_edit_errors(client: Client, store: Store, run: Run) -> None:
    r = await call(client, "edit_file", path="data/train.jsonl", new_text="{}")
    assert r.is_error and "read-only input" in text_of(r)
    assert "read-only" in last_call(store, run.id).error
    await call(client, "edit_file", path="code/c.py", new_text="a\na\n")
    r = await call(client, "edit_file", path="code/c.py", old_text="a", new_text="b")
    assert r.is_error and "occurs 2 times" in text_of(r)
    r = await call(client, "edit_file", path="code/c.py", old_text="a", new_text="b",
                   replace_all=True)
    assert r.structured_content["replacements"] == 2
    r = await call(client, "edit_file", path="code/c.py", old_text="zzz", new_text="b")
    assert r.is_error and "not found" in text_of(r)
    r = await call(client, "read_file", path="code/missing.py")
    assert r.is_error and "does not exist" in text_of(r)
    assert "does not exist" in last_call(store, run.id).error


async def test_argument_validation_is_recorded(client: Client, store: Store, run: Run) -> None:
    r = await call(client, "run_command", command="true", wait_s=1000)
    assert r.is_error and "wait_s" in text_of(r)
    row = last_call(store, run.id)
    assert row.is_error and row.arguments["wait_s"] == 1000
    r = await call(client, "no_such_tool")
    assert r.is_error and last_call(store, run.id).tool == "no_such_tool"


async def test_binary_file_is_described(client: Client, run: Run) -> None:
    (Path(run.workspace) / "code" / "w.bin").write_bytes(b"\x00\x01\x02" * 100)
    r = await call(client, "read_file", path="code/w.bin")
    assert r.structured_content["binary"] is True
    assert "300 bytes" in r.structured_content["description"]
    assert r.structured_content["content"] == ""


async def test_large_and_invalid_utf8_output(client: Client, run: Run) -> None:
    r = await call(client, "run_command",
                   command="head -c 10000000 /dev/zero | tr '\\0' 'a'; printf '\\xff\\xfe end'")
    sc = r.structured_content
    assert sc["truncated"] is True and sc["output_bytes"] == 10_000_000 + 6
    assert len(sc["output"]) < 20_000 and sc["output"].endswith("\ufffd\ufffd end")
    # logs/<job>.log is the supervisor's file, outside the workspace (jobs cannot replace it)
    name = sc["log_path"].removeprefix("logs/")
    assert (Path(run.workspace).parent / "control" / "joblogs" / name).stat().st_size == 10_000_006


async def test_long_command_becomes_job(client: Client, store: Store, run: Run) -> None:
    r = await call(client, "run_command", command="echo start; sleep 2; echo done", wait_s=0.5)
    sc = r.structured_content
    assert sc["status"] == "running" and sc["job_id"] and "job_status" in sc["hint"]
    r = await call(client, "job_status", job_id=sc["job_id"], wait_s=10)
    st = r.structured_content
    assert st["job"]["state"] == "exited" and st["job"]["exit_code"] == 0
    assert "done" in st["output"]
    r2 = await call(client, "job_status", job_id=sc["job_id"], offset=st["next_offset"])
    assert r2.structured_content["output"] == ""
    listing = (await call(client, "job_status")).structured_content["jobs"]
    assert sc["job_id"] in {j["job_id"] for j in listing}
    with store.session() as s:
        job = s.get(Job, sc["job_id"])
    assert job.is_background and job.log_blob_sha
    assert b"done" in store.get_blob(job.log_blob_sha)


async def test_job_kill_takes_grandchildren(client: Client, run: Run) -> None:
    marker = f"a2rl-test-{time.time_ns()}"
    cmd = (f"(setsid bash -c 'exec -a {marker} sleep 300' &) ; "
           f"bash -c 'exec -a {marker} sleep 300' & sleep 300")
    r = await call(client, "run_command", command=cmd, wait_s=0.5)
    job_id = r.structured_content["job_id"]
    await anyio.sleep(0.3)
    assert _count_procs(marker) == 2
    r = await call(client, "job_kill", job_id=job_id)
    assert r.structured_content["job"]["state"] == "killed"
    await anyio.sleep(0.3)
    assert _count_procs(marker) == 0


def _count_procs(marker: str) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(marker.encode()):
                    n += 1
            except OSError:
                pass
    return n


async def test_unknown_job(client: Client, store: Store, run: Run) -> None:
    for tool in ("job_status", "job_kill"):
        r = await call(client, tool, job_id="j-nope")
        assert r.is_error and "no job 'j-nope'" in text_of(r)
        assert "no job 'j-nope'" in last_call(store, run.id).error


async def test_budget_exhausted(client: Client, store: Store, run: Run) -> None:
    r = await call(client, "run_command", command="sleep 300", wait_s=0.2)
    job_id = r.structured_content["job_id"]
    with store.session() as s:
        row = s.get(Run, run.id)
        row.deadline = utcnow()
        s.add(row)
    r = await call(client, "read_file", path="TASK.md")
    assert r.is_error and "budget exhausted" in text_of(r)
    assert "budget exhausted" in last_call(store, run.id).error
    b = await call(client, "budget_status")
    assert not b.is_error and b.structured_content["exhausted"] is True
    with store.session() as s:
        assert s.get(Job, job_id).state in ("killed", "timeout")


async def test_budget_status_counts(client: Client) -> None:
    r = await call(client, "budget_status")
    sc = r.structured_content
    assert sc["clock_started"] is True and 0 <= sc["used_s"] < 60
    assert 1700 < sc["remaining_s"] <= 1800 and sc["jobs_running"] == 0


async def test_fifty_concurrent_calls(client: Client, store: Store, run: Run) -> None:
    before = len(calls(store, run.id))
    async with anyio.create_task_group() as tg:
        for i in range(50):
            if i % 2:
                tg.start_soon(partial(call, client, "run_command", command=f"echo {i}"))
            else:
                tg.start_soon(partial(call, client, "list_files"))
    rows = calls(store, run.id)[before:]
    assert len(rows) == 50, len(rows)
    assert [r.error for r in rows if r.is_error] == []
    assert all(r.duration_ms > 0 for r in rows)


@pytest.mark.cheats("reads the store, another run and the user's home, dumps the environment")
async def test_isolation(client: Client, backend, run: Run) -> None:  # type: ignore[no-untyped-def]
    settings = backend
    other = settings.runs_dir / "r-other" / "workspace"
    other.mkdir(parents=True, exist_ok=True)
    (other / "secret.txt").write_text("other run")
    home_file = Path.home() / f".a2rl-test-{os.getpid()}"
    home_file.write_text("user secret")
    os.environ["A2RL_FAKE_API_KEY"] = "sk-should-not-leak"
    try:
        db = settings.database_url.removeprefix("sqlite:///")
        for target in (db, str(other / "secret.txt"), str(home_file)):
            r = await call(client, "run_command", command=f"cat {target}")
            assert r.structured_content["exit_code"] != 0, target
        r = await call(client, "run_command", command="env")
        assert "sk-should-not-leak" not in r.structured_content["output"]
        assert "A2RL_FAKE_API_KEY" not in r.structured_content["output"]
    finally:
        home_file.unlink()
        del os.environ["A2RL_FAKE_API_KEY"]


async def test_task_resource_and_instructions(client: Client, run: Run) -> None:
    res = await client.read_resource("a2rl://task")
    assert "fixture" in res.contents[0].text.lower()


async def test_logs_folder_holds_job_logs_and_the_agents_own_files(client: Client) -> None:
    """Job logs are read from where only the supervisor writes; any other file under logs/ is
    the agent's own, read from the workspace."""
    r = await call(client, "run_command", command="echo from-the-job; echo mine > logs/mine.log")
    job_log = r.structured_content["log_path"]
    r = await call(client, "read_file", path=job_log)
    assert not r.is_error and "from-the-job" in r.structured_content["content"]
    r = await call(client, "read_file", path="logs/mine.log")
    assert not r.is_error and "mine" in r.structured_content["content"]
