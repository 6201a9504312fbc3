"""What the scripted in-process agents share (the reference agent, a replay's agent): calling
a tool (an error is raised, with the tool's text), running a command to its end through the
job tools, and submitting a checkpoint then waiting for its score. They work only through the
MCP tools, as any agent does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp import Client

Say = Callable[[str], None]


class AgentError(RuntimeError):
    pass


class ScriptedAgent:
    def __init__(self, client: Client, say: Say = lambda _m: None) -> None:
        self.client, self.say = client, say

    async def tool(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args, read_timeout_seconds=120)
        if result.is_error:
            text = " ".join(getattr(p, "text", "") for p in result.content)
            raise AgentError(f"{name} failed: {text}")
        return result.structured_content or {}

    async def run_job(self, command: str) -> tuple[bool, str]:
        """Run `command` to its end, each new last line of its output said as it comes;
        (whether it exited 0, the end of its output)."""
        started = await self.tool("run_command", command=command, wait_s=5)
        if started["status"] == "exited":
            return started["exit_code"] == 0, started.get("output", "")
        job_id, offset = started["job_id"], 0
        while True:
            st = await self.tool("job_status", job_id=job_id, wait_s=30, offset=offset)
            offset = st["next_offset"]
            lines = [ln for ln in st["output"].splitlines() if ln.strip()]
            if lines:
                self.say(f"  {job_id}: {lines[-1][:100]}")
            if st["job"]["state"] != "running":
                ok = st["job"]["state"] == "exited" and st["job"]["exit_code"] == 0
                if not ok:
                    self.say(f"  {job_id} failed:\n{st['output'][-1500:]}")
                return ok, st["output"]

    async def submit(self, path: str, note: str) -> dict[str, Any]:
        """Submit `path` and wait for its score."""
        sub = await self.tool("submit_checkpoint", path=path, note=note)
        self.say(f"submitted {path} as {sub['submission_id']}; waiting for its score")
        while True:
            score = await self.tool("get_score", submission_id=sub["submission_id"], wait_s=60)
            if score["status"] not in ("queued", "grading"):
                break
        self.say(f"score of {path}: {score.get('score')} ({score['split']}; baseline "
                 f"{score.get('baseline')})")
        return score
