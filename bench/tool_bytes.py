"""Bytes per tool result: the SDK's pretty-printed text block (the baseline) against ours.

A result carries its structured content twice: as `structuredContent` and, as the MCP spec
asks, serialized in a text block. The SDK writes that text with `indent=2`; the server now
writes it compact (`separators=(",", ":")`, see `a2rl.server.app.compact`). Both forms are
measured in the same run, over the same results of a realistic session of calls through a real
MCP client (list, read, edit, run, poll a job, submit nothing, score, budget): the baseline is
each result with its text block re-serialized the SDK's way, so that the only difference is
the serialization. Bytes are those of the result as JSON on the wire (`by_alias`, no nulls);
the text block alone is what the driver model reads as text.

    .venv/bin/python bench/tool_bytes.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pydantic_core
from mcp import Client
from mcp_types import CallToolResult, TextContent

from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store

#: The session: what an agent's first minutes look like (a training job polled to its end).
SESSION: list[tuple[str, dict[str, Any]]] = [
    ("budget_status", {}),
    ("list_files", {"path": ".", "depth": 2}),
    ("read_file", {"path": "TASK.md"}),
    ("list_files", {"path": "data"}),
    ("edit_file", {"path": "code/train.py", "new_text": "import sys\nfor step in range(40):\n"
                   "    print(f'step {step} loss {1 / (step + 1):.4f}', flush=True)\n"}),
    ("read_file", {"path": "code/train.py"}),
    ("edit_file", {"path": "code/train.py", "old_text": "range(40)", "new_text": "range(60)"}),
    ("run_command", {"command": "python3 code/train.py", "wait_s": 10}),
    ("run_command", {"command": "ls -la; df -h . | tail -1; nproc", "wait_s": 10}),
    ("run_command", {"command": "sleep 1; python3 code/train.py", "wait_s": 0}),
    ("job_status", {}),
    ("job_status", {"job_id": "$job", "wait_s": 10}),
    ("get_score", {}),
    ("budget_status", {}),
]


def sizes(result: CallToolResult) -> tuple[int, int]:
    """(the result's bytes on the wire, its text block's bytes)."""
    wire = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
    text = sum(len(getattr(c, "text", "").encode()) for c in result.content)
    return wire, text


def pretty(result: CallToolResult) -> CallToolResult:
    """The result as the SDK made it: its text block the structured content with indent=2."""
    if result.structured_content is None or result.is_error:
        return result
    text = pydantic_core.to_json(result.structured_content, fallback=str, indent=2).decode()
    return result.model_copy(update={"content": [TextContent(type="text", text=text)]})


async def session(client: Client) -> list[tuple[str, CallToolResult]]:
    out, job = [], ""
    for tool, args in SESSION:
        args = {k: job if v == "$job" else v for k, v in args.items()}
        result = await client.call_tool(tool, args)
        assert not result.is_error, (tool, result.content)
        if tool == "run_command" and result.structured_content["status"] == "running":
            job = result.structured_content["job_id"]
        out.append((tool, result))
    return out


async def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    try:
        settings = Settings(home=home)
        store = Store(settings.database_url)
        run = create_run(settings, store, task_id="arith", budget="1h", baseline=False).run
        server = build_server(settings, store, run_id=run.id, transport="memory")
        async with Client(server, mode="legacy") as c:
            results = await session(c)
        finish_run(settings, store, run.id)
        store.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)

    print(f"{len(results)} calls of one session; bytes per result (wire = the whole result as "
          "JSON, text = its text block)")
    print(f"{'tool':14} {'wire pretty':>11} {'wire compact':>12} {'text pretty':>11} "
          f"{'text compact':>12}")
    totals = [0, 0, 0, 0]
    for tool, result in results:
        old_wire, old_text = sizes(pretty(result))
        new_wire, new_text = sizes(result)
        for i, v in enumerate((old_wire, new_wire, old_text, new_text)):
            totals[i] += v
        print(f"{tool:14} {old_wire:11,} {new_wire:12,} {old_text:11,} {new_text:12,}")
    n = len(results)
    print(f"{'mean per call':14} {totals[0] / n:11,.0f} {totals[1] / n:12,.0f} "
          f"{totals[2] / n:11,.0f} {totals[3] / n:12,.0f}")
    print(f"compact / pretty: wire {totals[1] / totals[0]:.3f}, text block "
          f"{totals[3] / totals[2]:.3f}")


if __name__ == "__main__":
    if shutil.which("bwrap") is None:
        sys.exit("tool_bytes: bubblewrap is not installed (run `make system-deps`): the "
                 "session's commands run in the local sandbox")
    anyio.run(main)
