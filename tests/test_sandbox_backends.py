"""A third sandbox backend is one class and its registration: the server reaches it through the
registry alone, by the run's backend name.

The backend here runs the real supervisor as a plain detached process (no isolation, so it is
registered by this test only, never by a2rl): a run made with it fixes its options, serves a
real command over MCP, is offered the backend's clean-up when a server starts, and leaves no
process behind when it is finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from a2rl.sandbox.base import BackendConfig, SandboxChoices, SandboxError, SandboxSpec
from a2rl.sandbox.client import (
    START_TIMEOUT,
    SUPERVISOR_PATH,
    SupervisedSandbox,
    sandbox_env,
    supervisor_args,
)
from a2rl.sandbox.registry import BACKENDS
from a2rl.server import build_server, create_run, finish_run
from a2rl.server.run import build_runtime
from a2rl.server.transports import adopt_on_start
from a2rl.settings import Settings
from a2rl.store import Run, Store

pytestmark = [pytest.mark.timeout(120), pytest.mark.anyio]


class PlainConfig(BackendConfig):
    marker: str = ""  # fixed when the run is made (run_options), read back at every start


class PlainSandbox(SupervisedSandbox):
    """The supervisor as a plain process of this host, jobs as our own user."""

    config_type = PlainConfig
    config: PlainConfig
    cleaned: list[tuple[set[str], str]] = []  # what each server start offered it

    @property
    def isolated(self) -> bool:
        return False

    @classmethod
    def run_options(cls, settings: Settings, choices: SandboxChoices) -> dict[str, Any]:
        return PlainConfig(marker=f"made for {choices.task_image or 'no image'}").model_dump()

    @classmethod
    def clean_up(cls, live_runs: set[str], store_id: str) -> dict[str, list[str]]:
        cls.cleaned.append((set(live_runs), store_id))
        return {"kept": sorted(live_runs)}

    def _launch(self) -> None:
        self._check_deadline()
        token = self.client.new_token()
        with contextlib.suppress(FileNotFoundError):
            self.client.socket_path.unlink()
        command = [sys.executable, "-I", str(SUPERVISOR_PATH),
                   "--socket", str(self.client.socket_path),
                   "--logs-dir", str(self.spec.logs_dir), "--logs-view", str(self.spec.logs_dir),
                   *supervisor_args(self.spec, self.config, isolated=False)]
        env = sandbox_env(self.spec, home=str(self.spec.workspace), path=os.environ["PATH"])
        with open(self.client.log_path, "ab") as out:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.spec.workspace, env=env,
                                    start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(token.encode() + b"\n")
        proc.stdin.close()
        self.client.write_meta({"pid": proc.pid})
        end = time.monotonic() + START_TIMEOUT
        while not self.client.answers(timeout=1.0):
            if proc.poll() is not None or time.monotonic() > end:
                self._force_stop()
                raise SandboxError("the plain supervisor did not answer:\n"
                                   + self.client.log_tail())
            time.sleep(0.02)

    def _force_stop(self) -> None:
        pid = self.client.read_meta().get("pid")
        if isinstance(pid, int):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # ours when this process launched it: no zombie left
        with contextlib.suppress(FileNotFoundError):
            self.client.socket_path.unlink()


@pytest.fixture
def plain() -> Iterator[str]:
    BACKENDS.register("plain", PlainSandbox)
    PlainSandbox.cleaned.clear()
    try:
        yield "plain"
    finally:
        BACKENDS.unregister("plain")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


async def test_a_registered_backend_serves_a_run_without_touching_the_server(
        settings: Settings, store: Store, plain: str) -> None:
    run = create_run(settings, store, task_id="fixture", budget="30m", backend=plain,
                     baseline=False).run
    try:
        # what the backend fixed when the run was made is stored with it
        assert run.backend == "plain"
        assert run.config.setup.sandbox["marker"].startswith("made for ")
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as c:
            r = await c.call_tool("run_command", {"command": "echo from-$A2RL_JOB",
                                                  "wait_s": 30})
            assert not r.is_error, r
            out = r.structured_content
            assert out["exit_code"] == 0 and out["output"].startswith("from-"), out
        spec = _spec(settings, store, run.id)
        assert spec.control_dir == settings.runs_dir / run.id / "control"
        pid = PlainSandbox(spec).client.read_meta()["pid"]
        assert alive(pid)
        # a server starting offers the backend its clean-up, with this store's live runs
        adopt_on_start(store)
        assert PlainSandbox.cleaned == [({run.id}, store.identity)]
    finally:
        finish_run(settings, store, run.id)
    assert not alive(pid)
    adopt_on_start(store)
    assert PlainSandbox.cleaned[-1] == (set(), store.identity)  # finished: no longer live


def _spec(settings: Settings, store: Store, run_id: str) -> SandboxSpec:
    """The run's spec as a server builds it, checking that its config is the one it fixed."""
    with store.session() as s:
        row = s.get(Run, run_id)
    assert row is not None
    runtime = build_runtime(settings, store, row)
    assert runtime.sandbox.backend_config() == PlainConfig.model_validate(row.config.setup.sandbox)
    return runtime.sandbox.spec()
