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
from typing import Any

from mcp import Client
from pydantic import BaseModel, Field

import a2rl

from .base import AgentContext, BaseConnector
from .scripted import AgentError, Say, ScriptedAgent

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


class ReplayAgent(ScriptedAgent):
    def __init__(self, client: Client, plan: ReplayPlan, say: Say = lambda _m: None) -> None:
        super().__init__(client, say)
        self.plan = plan
        self.written: dict[str, bytes] = {}  # what this replica's workspace holds, by us

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
                    raise AgentError(f"{path}: {len(data)} bytes of binary code, too large to "
                                     "write back") from None
                encoded = base64.b64encode(data).decode()
                quoted = shlex.quote(path)
                await self.must_run(f"mkdir -p \"$(dirname {quoted})\" && printf %s {encoded} "
                                    f"| base64 -d > {quoted}")
            self.written[path] = data

    async def must_run(self, command: str) -> None:
        """Run `command` to its end; a failure ends the replica, said as the agent's error."""
        ok, output = await self.run_job(command)
        if not ok:
            tail = output.strip().splitlines()[-1:] or ["no output"]
            raise AgentError(f"the job `{command[:80]}` failed: {tail[0][:200]}")

    async def run(self) -> dict[str, Any]:
        for i, stage in enumerate(self.plan.stages, 1):
            self.say(f"job {i}/{len(self.plan.stages)} (was {stage.job_id}): "
                     f"{stage.command[:100]}")
            await self.restore(stage.files)
            await self.must_run(stage.command)
        return await self.submit(self.plan.submit_path,
                                 note=f"replay of {self.plan.source_run_id}")


class ReplayConnector(BaseConnector):
    """The in-process agent of a replica (`a2rl replay`): not an agent a user names with
    `--agent`, so not in the registry; the orchestrator is handed it."""

    name = "replay"
    title = "Replay of a run's recipe (no agent)"
    kind = "inprocess"

    def __init__(self, plan: ReplayPlan) -> None:
        self.plan = plan

    def version(self) -> str | None:
        return a2rl.__version__

    async def run(self, client: Client, ctx: AgentContext) -> None:
        await ReplayAgent(client, self.plan, ctx.say).run()
