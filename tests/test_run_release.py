"""A finished run holds no kernel resource: no mount, loop device, cgroup, process or container
of it is left after `finish_run`, while `a2rl show` and `a2rl report` still read it; and the
loop device of a run whose home was removed with `rm -rf` is freed by `detach_orphans`.

Real parts: the workspace volume is a real loop-mounted ext4 image (root and loop devices, else
skipped, a failure in CI), jobs run in a real sandbox through the real MCP tools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from a2rl.sandbox import volume
from a2rl.sandbox.cgroup import RunCgroup
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store

from .conftest import backend_settings, require

pytestmark = [pytest.mark.timeout(180)]

A2RL = str(Path(sys.executable).parent / "a2rl")


def require_volume() -> None:
    reason = volume.unavailable_reason()
    require(reason is None, f"a workspace volume cannot be made here: {reason}")


def mounts_under(folder: Path) -> list[str]:
    prefix = str(folder.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split()[4] for line in f) if (p + "/").startswith(prefix)]


def containers_of(run_id: str) -> list[str]:
    import docker
    from a2rl.sandbox.docker import LABEL_RUN

    client = docker.from_env()
    return [c.name for c in client.containers.list(all=True,
                                                   filters={"label": f"{LABEL_RUN}={run_id}"})]


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_finished_run_holds_nothing_and_stays_readable(
        backend: str, settings: Settings, store: Store) -> None:
    require_volume()
    settings = backend_settings(settings, backend)
    created = create_run(settings, store, task_id="arith", budget="30m", baseline=False)
    run = created.run
    run_dir, workspace = Path(run.workspace).parent, Path(run.workspace)
    image = run_dir / volume.IMAGE_NAME
    assert os.path.ismount(workspace) and volume.loops_of(image)
    # sparse, and never longer than the disk it lies on (`ls -la` showed 221 GB on 64 GiB)
    assert image.stat().st_size <= volume.disk_bytes(run_dir)
    assert image.stat().st_blocks * 512 < image.stat().st_size
    server = build_server(settings, store, run_id=run.id, transport="memory")
    try:
        async with Client(server, mode="legacy") as client:
            # A file the agent leaves, and a job still running in the background at the end.
            result = await client.call_tool("run_command", {
                "command": "echo kept > code/note.txt; sleep 300", "wait_s": 1})
            assert not result.is_error
            if backend == "local":
                assert RunCgroup(run.id).exists or not RunCgroup(run.id).paths
    finally:
        finish_run(settings, store, run.id)
    assert not os.path.ismount(workspace)
    assert mounts_under(run_dir) == []
    assert volume.loops_of(image) == [], "the run's loop device is still attached"
    assert not RunCgroup(run.id).exists, "the run's cgroup is still there"
    if backend == "docker":
        assert containers_of(run.id) == []
    # The files are still in the image, and what reads a finished run reads the store.
    env = {**os.environ, "A2RL_HOME": str(settings.home), "A2RL_DB_URL": settings.database_url}
    for argv in ([A2RL, "show", run.id], [A2RL, "report", run.id]):
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, (argv, p.stderr[-2000:])
        assert run.id in p.stdout, p.stdout[:2000]
    assert image.is_file()
    assert mounts_under(run_dir) == []  # reading it mounted nothing again


def test_image_size_is_the_limit_with_room_and_at_most_the_disk() -> None:
    gib = 1 << 30
    full = volume.image_size(200 * gib, gib)
    assert full > 201 * gib  # the limit, the inputs and ext4's own room
    assert volume.image_size(200 * gib, gib, 64 * gib) == 64 * gib
    assert volume.image_size(200 * gib, gib, 400 * gib) == full


def test_home_removed_with_rm_rf_leaks_no_loop_device(settings: Settings, store: Store) -> None:
    """A run that never finished (as after a crash) and whose folder is then removed: the
    mount point outlives `rm -rf` (a mount point cannot be removed), its image is deleted and
    its loop device points at a deleted file; `detach_orphans` unmounts and frees it."""
    require_volume()
    run = create_run(settings, store, task_id="arith", budget="30m", baseline=False).run
    run_dir = Path(run.workspace).parent
    image = run_dir / volume.IMAGE_NAME
    devices = volume.loops_of(image)
    assert devices and os.path.ismount(run.workspace)
    shutil.rmtree(run_dir, ignore_errors=True)  # as `rm -rf`
    assert not image.exists()
    deleted = [d["name"] for d in volume._loop_devices()
               if d.get("back-file") == f"{image}{volume.DELETED}"]
    assert deleted == devices, volume._loop_devices()
    freed = volume.detach_orphans()
    assert set(devices) <= set(freed)

    def still_listed() -> bool:
        return any(d["name"] in devices and str(d.get("back-file")).startswith(str(run_dir))
                   for d in volume._loop_devices())

    deadline = time.monotonic() + 10  # the kernel lets a device go a moment after its release
    while still_listed() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not still_listed()
    assert mounts_under(run_dir) == []
    shutil.rmtree(run_dir, ignore_errors=True)
    assert not run_dir.exists()
