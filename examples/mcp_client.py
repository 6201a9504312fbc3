"""Connect your own agent: a minimal MCP client of one a2rl run (the README shows its core).

    a2rl create --task arith --budget 20m       # prints RUN_ID and the run's token, once
    python examples/mcp_client.py RUN_ID        # over stdio: it starts `a2rl serve --run RUN_ID`
    a2rl serve --http &                         # or over streamable HTTP, with the token:
    A2RL_TOKEN=TOKEN python examples/mcp_client.py --http http://127.0.0.1:8765/mcp

It lists the tools, reads TASK.md, runs a command and asks for the budget. The installed MCP
SDK (2.x) spells the protocol's fields in snake case: a tool's `input_schema`, a result's
`is_error` and `structured_content` (the JSON's inputSchema, isError, structuredContent).
Every call is recorded on the run (`a2rl show RUN_ID`); end it with `a2rl finish RUN_ID`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


async def work(client: Client) -> None:
    """What an agent does first: look at the tools, the task and the budget."""
    for tool in (await client.list_tools()).tools:
        print(f"tool {tool.name}({', '.join(tool.input_schema.get('properties', {}))})")
    task = await client.call_tool("read_file", {"path": "TASK.md", "limit": 3})
    print(task.structured_content["content"])
    result = await client.call_tool("run_command", {"command": "ls data"})
    if result.is_error:  # a refusal the model should read: the message is the text block
        print("refused:", result.content[0].text)
    else:
        print(f"exit {result.structured_content['exit_code']}: "
              f"{result.structured_content['output'].strip()}")
    budget = (await client.call_tool("budget_status", {})).structured_content
    print(f"budget: {budget['remaining_s']:.0f} s of {budget['budget_s']:.0f} s left")


async def main(argv: list[str]) -> None:
    if argv[:1] == ["--http"] and len(argv) == 2:  # one server for every run; the token picks
        token = os.environ["A2RL_TOKEN"]
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=120) as http, \
                Client(streamable_http_client(argv[1], http_client=http)) as client:
            await work(client)
    elif len(argv) == 1:  # one run per server process, started here; it inherits A2RL_HOME
        a2rl = shutil.which("a2rl") or str(Path(sys.executable).parent / "a2rl")
        server = StdioServerParameters(command=a2rl, args=["serve", "--run", argv[0]],
                                       env=dict(os.environ))
        async with Client(server) as client:
            await work(client)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
