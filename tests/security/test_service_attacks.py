"""Attacks on a run's service sockets (`server/services.py`): the one door out of the sandbox.

`<run dir>/services/` is mounted into the sandbox (read-write: a socket there is how the task's
code reaches the server), so every name in it is the agent's to swap. The server binds each
socket elsewhere and moves it in, and never chmods or unlinks a name there it did not make.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from a2rl.server.app import RunRegistry
from a2rl.server.services import ServiceHost
from a2rl.settings import Settings
from a2rl.store import Store

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
