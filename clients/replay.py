"""The replay agent: re-runs a finished run's recipe in a fresh run, without its agent.

`a2rl replay` hands it a `ReplayPlan` (`a2rl.analysis.replay_plan`): the jobs that made the
final submission, oldest first, each with the code it ran with. Like every agent it works only
through the MCP tools, so the replica is recorded as every run is: for each job it writes the
job's code back where it differs (`edit_file`; a file that is not UTF-8 text through a
`run_command` that decodes it), runs the job's command and waits for it, then submits the
final checkpoint's path and waits for its score. Nothing here chooses anything: a job that
fails ends the replica, said as the agent's error.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable
from typing import Any

from mcp import Client
from pydantic import BaseModel, Field

from .base import AgentContext, BaseConnector

#: the most bytes of a file written back through one `run_command` (base64 in the command)
MAX_BINARY_BYTES = 4 << 20


class ReplayStage(BaseModel):
    """One job of the recipe: its id in the source run, its command, and the code it ran
    with (workspace path -> content), as the source run recorded them."""

    job_id: str
    command: str
    files: dict[str, bytes] = Field(default_factory=dict)


class ReplayPlan(BaseModel):
    """What a replica re-runs: the source run, the jobs in order, the checkpoint to submit."""

    source_run_id: str
    stages: list[ReplayStage]
    submit_path: str
    note: str = ""


class ReplayError(RuntimeError):
    pass


class ReplayAgent:
    def __init__(self, client: Client, plan: ReplayPlan,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.client, self.plan, self.say = client, plan, say
        self.written: dict[str, bytes] = {}  # what this replica's workspace holds, by us

    async def tool(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args, read_timeout_seconds=120)
        if result.is_error:
            text = " ".join(getattr(p, "text", "") for p in result.content)
            raise ReplayError(f"{name} failed: {text}")
        return result.structured_content or {}

    async def restore(self, files: dict[str, bytes]) -> None:
        """Write back each file of the job's code that differs from what the workspace
        holds (as this replica wrote it)."""
        for path, data in sorted(files.items()):
            if self.written.get(path) == data:
                continue
            try:
                await self.tool("edit_file", path=path, new_text=data.decode("utf-8"))
            except UnicodeDecodeError:
                if len(data) > MAX_BINARY_BYTES:
                    raise ReplayError(f"{path}: {len(data)} bytes of binary code, too large to "
                                      "write back") from None
                encoded = base64.b64encode(data).decode()
                quoted = shlex.quote(path)
                await self.run_job(f"mkdir -p \"$(dirname {quoted})\" && printf %s {encoded} "
                                   f"| base64 -d > {quoted}")
            self.written[path] = data

    async def run_job(self, command: str) -> None:
        """Run `command` and wait for it to end; a failure ends the replica."""
        started = await self.tool("run_command", command=command, wait_s=5)
        job = started
        if started["status"] != "exited":
            offset = 0
            while True:
                job = await self.tool("job_status", job_id=started["job_id"], wait_s=30,
                                      offset=offset)
                offset = job["next_offset"]
                if job["job"]["state"] != "running":
                    break
            code = job["job"]["exit_code"] if job["job"]["state"] == "exited" else None
        else:
            code = started["exit_code"]
        if code != 0:
            tail = (job.get("output") or "").strip().splitlines()[-1:] or ["no output"]
            raise ReplayError(f"the job `{command[:80]}` ended with "
                              f"{'exit ' + str(code) if code is not None else 'no exit code'}"
                              f": {tail[0][:200]}")

    async def run(self) -> dict[str, Any]:
        for i, stage in enumerate(self.plan.stages, 1):
            self.say(f"job {i}/{len(self.plan.stages)} (was {stage.job_id}): "
                     f"{stage.command[:100]}")
            await self.restore(stage.files)
            await self.run_job(stage.command)
        sub = await self.tool("submit_checkpoint", path=self.plan.submit_path,
                              note=f"replay of {self.plan.source_run_id}")
        while True:
            score = await self.tool("get_score", submission_id=sub["submission_id"], wait_s=60)
            if score["status"] not in ("queued", "grading"):
                break
        self.say(f"replica's checkpoint {self.plan.submit_path}: {score.get('score')} "
                 f"({score['split']})")
        return score


class ReplayConnector(BaseConnector):
    """The in-process agent of a replica (`a2rl replay`): not an agent a user names with
    `--agent`, so not in the registry; the orchestrator is handed it."""

    name = "replay"
    title = "Replay of a run's recipe (no agent)"
    kind = "inprocess"

    def __init__(self, plan: ReplayPlan) -> None:
        self.plan = plan

    def version(self) -> str | None:
        from a2rl import __version__

        return __version__

    async def run(self, client: Client, ctx: AgentContext) -> None:
        await ReplayAgent(client, self.plan, ctx.say).run()
