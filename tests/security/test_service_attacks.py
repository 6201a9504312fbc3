"""Attacks on a run's service sockets (`server/services.py`): the one door out of the sandbox.

`<run dir>/services/` is mounted into the sandbox (read-write: a socket there is how the task's
code reaches the server), so every name in it is the agent's to swap. The server binds each
socket elsewhere and moves it in, and never chmods or unlinks a name there it did not make.
And the door is bounded (`server/service_limits.py`): a job's flood of connections and requests
is refused line by line, counted, and costs the operator's paid backend nothing past the rate.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.server.app import RunRegistry
from a2rl.server.service_limits import REFUSED_TOOL, RunServiceBudget, ServiceLimits
from a2rl.server.services import ServiceHost
from a2rl.settings import Settings
from a2rl.store import Store, ToolCall

from ..fake_search import FakeSearch
from ..helpers import with_task_options
from .conftest import Agent, open_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

#: Swaps a symlink to the canary in for the service's socket, as fast as it can, until killed:
#: a server that binds the socket and then chmods it by name would chmod the canary.
RACER = """
import os, sys
folder, canary = sys.argv[1], sys.argv[2]
spare, name = os.path.join(folder, ".spare"), os.path.join(folder, "echo.sock")
while True:
    try:
        if not os.path.lexists(spare):
            os.symlink(canary, spare)
        os.rename(spare, name)
    except OSError:
        pass
"""

ASK = ("python3 -c \"import json, socket; s = socket.socket(socket.AF_UNIX); "
       "s.connect('{sock}'); s.sendall(b'{{\\\"q\\\": 7}}\\n'); print(s.makefile().readline())\"")


@pytest.fixture
async def agent(backend: Settings, store: Store) -> AsyncIterator[Agent]:
    """A run of the fixture task with one service, `echo`, on the parametrized backend."""
    async for a in open_agent(backend, store, task_id="fixture-services"):
        yield a


def services_inside(agent: Agent) -> str:
    """Where the sandbox shows the run's services folder."""
    return ("/a2rl/services" if agent.run.backend == "docker"
            else str(Path(agent.run.workspace).parent / "services"))


@pytest.mark.cheats("goes for the services' sockets on the host")
async def test_service_socket_cannot_be_redirected_to_a_host_file(agent: Agent,
                                                                  tmp_path: Path) -> None:
    """A job may not plant names in services/ when jobs run as their own user; where they share
    the server's (non-root), it can, and races every restart of the services (as a restarted
    server binds them again) with a symlink to a host file: the file's mode never changes, and
    the service still answers from inside the sandbox."""
    host_dir = Path(agent.run.workspace).parent / "services"
    canary = tmp_path / "store-like.db"
    canary.write_text("private\n")
    os.chmod(canary, 0o600)
    inside = services_inside(agent)
    out = await agent.sh(f"ln -s {canary} {inside}/planted 2>&1; echo rc=$?")
    if os.geteuid() == 0:  # jobs are the sandbox user: services/ is not theirs to write
        assert "rc=1" in out["output"] and not (host_dir / "planted").is_symlink(), out
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(host_dir), str(canary)])
    started: list[ServiceHost] = []
    try:
        for _ in range(300):
            registry = RunRegistry(agent.settings, agent.store)
            registry.get(agent.run.id)  # starts the run's services, as a new server does
            started += registry._services.get(agent.run.id, [])
            assert stat.S_IMODE(canary.stat().st_mode) == 0o600, "a host file was chmodded"
    finally:
        racer.kill()
        racer.wait()
        with ThreadPoolExecutor(16) as pool:  # each stop waits for its poll interval
            list(pool.map(ServiceHost.stop, started))
    assert len(started) > 250  # the restarts ran (a link planted mid-bind may fail one)
    assert canary.read_text() == "private\n"
    # The services of this run's own server (started by its first tool call) were replaced
    # by the racer's links; a restart binds them again, and the sandbox user connects.
    registry = RunRegistry(agent.settings, agent.store)
    registry.get(agent.run.id)
    try:
        sock = host_dir / "echo.sock"
        assert stat.S_ISSOCK(sock.lstat().st_mode) and stat.S_IMODE(sock.lstat().st_mode) == 0o666
        answer = await agent.sh(ASK.format(sock=f"{inside}/echo.sock"))
        assert '"echo": {"q": 7}' in answer["output"], answer
    finally:
        for host in registry._services.get(agent.run.id, []):
            host.stop()
    assert not sock.exists()  # stop removes its own socket
    assert not list(host_dir.parent.glob(".bind-*"))  # nor is a private folder left


#: Inside the sandbox: open 40 connections and keep them, then pipeline 50 searches on each
#: connection that was let in, as fast as the socket takes them; one JSON line of what came back.
FLOOD = r"""
import json, select, socket, sys, time
path = sys.argv[1]
held = []
for _ in range(40):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)  # blocking: waits for room in the listen queue
    s.settimeout(10)
    held.append(s)
time.sleep(1.0)  # a refusal is written at accept: by now every refused one has its line
ready, _, _ = select.select(held, [], [], 0)
refused_lines = [s.makefile().readline() for s in ready]
kept = [s for s in held if s not in ready]
start = time.monotonic()
for s in kept:
    s.sendall(b'{"query": "largest moon of neptune", "k": 2}\n' * 50)
readers = [s.makefile() for s in kept]  # one each: a reader buffers past its line
answers = [json.loads(r.readline()) for r in readers for _ in range(50)]
elapsed = time.monotonic() - start
print(json.dumps({"refused_connections": len(ready), "kept": len(kept),
                  "connection_errors": sorted({l.strip()[:200] for l in refused_lines}),
                  "ok": sum(a["ok"] for a in answers), "answers": len(answers),
                  "errors": sorted({a.get("error", "") for a in answers if not a["ok"]}),
                  "elapsed": elapsed}))
"""

SEARCH_ONCE = ("python3 -c \"import json, socket; s = socket.socket(socket.AF_UNIX); "
               "s.connect('{sock}'); s.sendall(b'{{\\\"query\\\": \\\"capital of chile\\\"}}\\n');"
               " print(s.makefile().readline())\"")


@pytest.fixture
async def search_agent(backend: Settings, store: Store, monkeypatch: pytest.MonkeyPatch,
                       ) -> AsyncIterator[tuple[Agent, FakeSearch]]:
    """A DeepSearchQA run whose search service asks a fake paid web endpoint, with tight
    bounds: 4 connections, 5 requests per second."""
    fixture = Path(__file__).parents[1] / "fixtures" / "deepsearchqa"
    monkeypatch.setenv("A2RL_SEARCH_API_KEY", "sk-test")
    with FakeSearch() as fake:
        settings = with_task_options(backend.updated({
            "base_model": "tiny-llama", "server.services.max_connections": 4,
            "server.services.requests_per_s": 5.0}), "deepsearchqa", data_dir=str(fixture),
            search_url=fake.url)
        async for a in open_agent(settings, store, task_id="deepsearchqa"):
            yield a, fake


def _rows(store: Store, run_id: str, tool: str) -> list[ToolCall]:
    with store.session() as s:
        return list(s.exec(select(ToolCall).where(ToolCall.run_id == run_id,
                                                  ToolCall.tool == tool)).all())


@pytest.mark.cheats("floods a service and names a2rl's home")
async def test_service_flood_from_a_job_is_bounded_and_recorded(
        search_agent: tuple[Agent, FakeSearch]) -> None:
    """A job opens 40 connections and pipelines 200 searches: 4 connections are let in, the
    36 others get one refusal line each (none hangs), at most a second's burst plus the rate
    reaches the paid endpoint, every request gets an answer line, the refusals are counted in
    the run's `service.refused` row, and once the flood ends an honest search works."""
    agent, fake = search_agent
    await agent.sh("true")  # the first call serves the run: its services start
    sock = f"{services_inside(agent)}/search.sock"
    flood = Path(agent.run.workspace) / "code" / "flood.py"
    flood.write_text(FLOOD)
    before = len(fake.requests)  # the task's own searches while the run was made
    out = await agent.sh(f"python3 code/flood.py {sock}", wait_s=60)
    assert out["exit_code"] == 0, out
    stats = json.loads(out["output"].strip().splitlines()[-1])
    assert stats["kept"] == 4 and stats["refused_connections"] == 36, stats
    assert len(stats["connection_errors"]) == 1, stats
    assert "server.services.max_connections" in stats["connection_errors"][0], stats
    assert stats["answers"] == 200, stats  # every request answered, none left hanging
    allowed = 5 + 5.0 * stats["elapsed"] + 1  # the burst, the refill, one of rounding
    assert 5 <= stats["ok"] <= allowed, stats
    assert stats["errors"], stats
    assert all("server.services.requests_per_s" in e for e in stats["errors"]), stats
    assert len(fake.requests) - before == stats["ok"]  # only admitted searches cost a paid call
    assert len(_rows(agent.store, agent.run.id, "service.search")) == stats["ok"]
    time.sleep(1.5)  # the refusal row is rewritten at most once a second
    refused = _rows(agent.store, agent.run.id, REFUSED_TOOL)
    assert len(refused) == 1, refused
    assert refused[0].arguments == {"connections": 36, "rate": 200 - stats["ok"], "bytes": 0}
    # The flood's connections are closed: an honest search from inside gets its answer.
    answer = await agent.sh(SEARCH_ONCE.format(sock=sock))
    assert '"ok": true' in answer["output"] and "capital of chile" in answer["output"], answer
    assert len(fake.requests) - before == stats["ok"] + 1


async def test_service_bytes_per_run_are_capped(store: Store, settings: Settings,
                                                tmp_path: Path) -> None:
    """Past `server.services.max_bytes` of requests and answers, every request is refused with
    its one line, on a connection that stays usable, and the refusal is counted."""
    from a2rl.server import create_run

    run = create_run(settings, store, task_id="fixture-services", baseline=False).run
    limits = ServiceLimits.from_settings(settings.updated({"server.services.max_bytes": 300}))
    host = ServiceHost(store, run.id, tmp_path / "services", "echo", lambda r: {"echo": r},
                       RunServiceBudget(limits, store, run.id)).start()
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(host.path))
            reader = s.makefile()
            answers = []
            for i in range(10):
                s.sendall(json.dumps({"q": "x" * 20, "i": i}).encode() + b"\n")
                answers.append(json.loads(reader.readline()))
        served = [a for a in answers if a["ok"]]
        assert 1 <= len(served) < 10 and all(not a["ok"] for a in answers[len(served):])
        assert "server.services.max_bytes" in answers[-1]["error"]
        assert host.budget.bytes_carried <= 300 + 200  # passed by at most one answer
    finally:
        host.stop()
        from a2rl.server import finish_run

        finish_run(settings, store, run.id)
    refused = _rows(store, run.id, REFUSED_TOOL)
    assert refused[0].arguments["bytes"] == 10 - len(served)
