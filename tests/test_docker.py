"""Container-specific behaviour of the docker backend, against the real engine."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from a2rl.sandbox.base import SandboxError, SandboxSpec
from a2rl.sandbox.docker import (
    DockerConfig,
    DockerSandbox,
    DockerSettings,
    adopt_containers,
    container_config,
    container_name,
    docker_client,
)
from a2rl.server import build_server, create_run, finish_run
from a2rl.store import Run, Store

from .conftest import backend_settings

pytestmark = [pytest.mark.timeout(300), pytest.mark.anyio]


@pytest.fixture
def dsettings(settings):  # type: ignore[no-untyped-def]
    return backend_settings(settings, "docker").updated(
        {"sandbox.docker.memory": "512m", "sandbox.docker.pids_limit": 200})


@pytest.fixture
def drun(dsettings, store) -> Iterator[Run]:  # type: ignore[no-untyped-def]
    run = create_run(dsettings, store, task_id="fixture", budget="30m", baseline=False).run
    yield run
    finish_run(dsettings, store, run.id)


def client_for(settings, store, run: Run) -> Client:  # type: ignore[no-untyped-def]
    return Client(build_server(settings, store, run_id=run.id, transport="memory"),
                  mode="legacy")


async def sh(c: Client, command: str, wait_s: float = 30) -> dict:
    r = await c.call_tool("run_command", {"command": command, "wait_s": wait_s})
    assert not r.is_error, r
    return r.structured_content


async def test_hardening(dsettings, store: Store, drun: Run) -> None:  # type: ignore[no-untyped-def]
    async with client_for(dsettings, store, drun) as c:
        out = await sh(c, "id -u; cat /proc/self/status | grep -E 'CapEff|NoNewPrivs'; "
                          "cat /proc/net/dev | tail -n +3 | cut -d: -f1; touch /etc/x || "
                          "echo rofs; env")
        text = out["output"]
        # not root: the sandbox user when the server is root, else the server's own user
        assert text.splitlines()[0] == str(dsettings.sandbox.uid if os.geteuid() == 0
                                           else os.getuid())
        assert "CapEff:\t0000000000000000" in text and "NoNewPrivs:\t1" in text
        assert "rofs" in text  # the root filesystem is read-only
        interfaces = [ln.strip() for ln in text.splitlines() if ln.strip() in ("lo", "eth0")]
        assert interfaces == ["lo"]  # --network none
        assert "A2RL_SUPERVISOR_TOKEN" not in text
    c = docker_client().containers.get(container_name(drun.id))
    host = c.attrs["HostConfig"]
    # the engine's limit leaves room for the supervisor's threads; it ends a job at 200
    assert host["PidsLimit"] == 200 + 64 and host["Memory"] == 512 * 1024**2
    assert host["CapDrop"] == ["ALL"] and host["NetworkMode"] == "none"
    assert "SYS_ADMIN" not in host["CapAdd"] and "no-new-privileges" in host["SecurityOpt"]
    assert c.labels["a2rl.run"] == drun.id


async def test_no_egress(dsettings, store: Store, drun: Run) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        async with client_for(dsettings, store, drun) as c:
            out = await sh(c, f"python3 -c \"import socket; socket.create_connection("
                              f"('127.0.0.1', {port}), timeout=3)\"")
        assert out["exit_code"] != 0 and "refused" in out["output"].lower()


@pytest.mark.cheats("looks for the hidden data and the store in the container")
async def test_hidden_data_is_not_in_the_container(dsettings, store: Store, drun: Run) -> None:  # type: ignore[no-untyped-def]
    secrets_dir = dsettings.home_dir / "secrets"
    secrets_dir.mkdir(exist_ok=True)
    (secrets_dir / "probe.seed").write_text("12345")
    async with client_for(dsettings, store, drun) as c:
        for path in (secrets_dir, dsettings.database_url.removeprefix("sqlite:///"),
                     Path(drun.workspace).parent / "control" / "token", Path.home()):
            out = await sh(c, f"ls {path}")
            assert out["exit_code"] != 0, path
        ro = await sh(c, "touch data/new.txt")
        assert ro["exit_code"] != 0 and "Read-only" in ro["output"]


async def test_fork_bomb_and_memory_hog(dsettings, store: Store, drun: Run) -> None:  # type: ignore[no-untyped-def]
    async with client_for(dsettings, store, drun) as c:
        # The supervisor ends a job that reaches the process limit (the container's pids limit
        # stays the hard wall); the sandbox goes on.
        bomb = await sh(c, "python3 -c 'import os\nwhile True:\n    try: os.fork()\n"
                           "    except OSError: pass'", wait_s=30)
        assert bomb["status"] == "exited" and "process limit 200" in bomb["hint"], bomb
        assert (await sh(c, "echo alive"))["output"].strip() == "alive"
        hog = await sh(c, "python3 -c 'x = b\"x\" * (2 * 1024**3)'", wait_s=60)
        assert hog["exit_code"] != 0 and "memory limit 512m reached" in hog["hint"], hog
        assert (await sh(c, "echo still-alive"))["output"].strip() == "still-alive"


@pytest.mark.cheats("reads another run's workspace and the store")
async def test_runs_do_not_see_each_other(dsettings, store: Store) -> None:  # type: ignore[no-untyped-def]
    a = create_run(dsettings, store, task_id="fixture", budget="30m", baseline=False).run
    b = create_run(dsettings, store, task_id="fixture", budget="30m", baseline=False).run
    try:
        (Path(b.workspace) / "code" / "mine.txt").write_text("b's")
        async with client_for(dsettings, store, a) as c:
            out = await sh(c, f"cat {b.workspace}/code/mine.txt")
            assert out["exit_code"] != 0
    finally:
        for r in (a, b):
            finish_run(dsettings, store, r.id)
    names = {c.name for c in docker_client().containers.list(all=True)}
    assert container_name(a.id) not in names and container_name(b.id) not in names


async def test_restart_adopts_live_and_removes_finalized(dsettings, store: Store) -> None:  # type: ignore[no-untyped-def]
    live = create_run(dsettings, store, task_id="fixture", budget="30m", baseline=False).run
    done = create_run(dsettings, store, task_id="fixture", budget="30m", baseline=False).run
    try:
        async with client_for(dsettings, store, live) as c:
            job = (await sh(c, "echo one; sleep 2; echo two", wait_s=0.2))["job_id"]
        async with client_for(dsettings, store, done) as c:
            await sh(c, "true")
        with store.session() as s:  # the second run was finalized while no server ran
            row = s.get(Run, done.id)
            row.ended_at, row.status = row.created_at, "finished"
            s.add(row)
        # A server of another store on the same engine leaves both alone.
        other = adopt_containers(set(), "another-store")
        assert live.id not in other["removed"] and done.id not in other["removed"]
        result = adopt_containers({live.id}, store.identity)
        assert live.id in result["kept"] and done.id in result["removed"]
        async with client_for(dsettings, store, live) as c:  # a new server, the same job
            r = await c.call_tool("job_status", {"job_id": job, "wait_s": 10})
            assert r.structured_content["job"]["state"] == "exited"
            assert "two" in r.structured_content["output"]
    finally:
        finish_run(dsettings, store, live.id)


def test_keep_container(dsettings, store: Store) -> None:  # type: ignore[no-untyped-def]
    run = create_run(dsettings, store, task_id="fixture", budget="30m", baseline=False,
                     keep_container=True).run
    from a2rl.server.run import build_runtime

    build_runtime(dsettings, store, run).sandbox.get()
    finish_run(dsettings, store, run.id)
    c = docker_client().containers.get(container_name(run.id))
    assert c.status == "exited"
    c.remove(force=True)


def test_gpu_request_and_allocation(dsettings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = SandboxSpec(run_id="r-gpu", workspace=tmp_path, control_dir=tmp_path / "ctl",
                       deadline=4102444800.0)
    gpus = DockerConfig(image=dsettings.sandbox.section(DockerSettings).image, gpus=["2", "5"])
    (spec.control_dir / "sock").mkdir(parents=True)
    config = container_config(spec, gpus, "t")
    (request,) = config["device_requests"]
    assert request["DeviceIDs"] == ["2", "5"] and request["Capabilities"] == [["gpu"]]
    assert config["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert config["labels"]["a2rl.gpus"] == "2,5"
    holder = docker_client().containers.run(
        dsettings.sandbox.section(DockerSettings).image, ["sleep", "60"], detach=True,
        labels={"a2rl.managed": "1", "a2rl.run": "r-holder", "a2rl.gpus": "5"})
    try:
        with pytest.raises(SandboxError, match="held by run"):
            DockerSandbox(spec, gpus)._launch()
        shared = gpus.model_copy(update={"share_gpus": True, "gpus": ["5"]})
        # sharing passes the allocation check; the engine then has no GPU to give here
        with pytest.raises(SandboxError, match="could not start"):
            DockerSandbox(spec, shared)._launch()
    finally:
        holder.remove(force=True)


async def test_any_home_even_under_a_0700_folder(dsettings, store: Store,  # type: ignore[no-untyped-def]
                                                 tmp_path: Path) -> None:
    """Root's default home is 0700: the container's users must not need to cross it."""
    private = tmp_path / "root-like"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    settings = dsettings.updated({"home": private / ".a2rl"})
    run = create_run(settings, store, task_id="fixture", budget="30m", baseline=False).run
    try:
        async with client_for(settings, store, run) as c:
            out = await sh(c, "echo made > code/x.txt && cat code/x.txt && pwd && "
                              "tail -n 1 logs/$A2RL_JOB.log")
            assert out["exit_code"] == 0, out
            assert out["output"].splitlines()[:2] == ["made", "/workspace"]
            status = await c.call_tool("job_status", {"job_id": out["job_id"]})
            assert "made" in status.structured_content["output"]
        assert (Path(run.workspace) / "code" / "x.txt").read_text() == "made\n"
        assert private.stat().st_mode & 0o777 == 0o700  # nothing was opened up
    finally:
        finish_run(settings, store, run.id)
