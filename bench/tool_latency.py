"""Round trip of run_command("true") through MCP against a bare subprocess, in one run.

Prints median and p95 for: subprocess.run(["true"]) (the baseline), the in-memory MCP client,
the stdio MCP client against `a2rl serve`, and the store's recording cost per call alone
(start_call + end_call). Targets on 2 cores: MCP round trip median <= 25 ms on the local
backend, recording <= 2 ms per call.

    .venv/bin/python bench/tool_latency.py [--n 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from a2rl.server import build_server, create_run, finish_run
from a2rl.server.recording import end_call, start_call
from a2rl.settings import Settings
from a2rl.store import Store


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


async def mcp_round_trips(client: Client, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await client.call_tool("run_command", {"command": "true", "wait_s": 10})
        out.append((time.perf_counter() - t) * 1000)
        assert r.structured_content["exit_code"] == 0, r
    return out


async def main(n: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    settings = Settings(home=home)
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="arith", budget="1h").run
    rows: dict[str, list[float]] = {}

    base = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        base.append((time.perf_counter() - t) * 1000)
    rows["subprocess.run(['true'])"] = base

    server = build_server(settings, store, run_id=run.id, transport="memory")
    async with Client(server, mode="legacy") as c:
        await mcp_round_trips(c, 5)
        rows["MCP in-memory run_command"] = await mcp_round_trips(c, n)

    env = dict(os.environ, A2RL_HOME=str(home), A2RL_DB_URL=settings.database_url)
    params = StdioServerParameters(command=str(Path(sys.executable).parent / "a2rl"),
                                   args=["serve", "--run", run.id], env=env)
    async with Client(params, mode="legacy") as c:
        await mcp_round_trips(c, 5)
        rows["MCP stdio run_command"] = await mcp_round_trips(c, n)

    rec = []
    for _ in range(n):
        t = time.perf_counter()
        cid = start_call(store, run.id, "bench", {"command": "true"}, "bench")
        end_call(store, cid, t, "{}", None)
        rec.append((time.perf_counter() - t) * 1000)
    rows["recording only (start+end)"] = rec

    finish_run(settings, store, run.id)
    base_median = stats(base)[0]
    print(f"n={n} per row, {os.cpu_count()} cores, sandbox isolated by bubblewrap")
    print(f"{'what':34} {'median ms':>10} {'p95 ms':>10} {'x subprocess':>13}")
    for name, samples in rows.items():
        med, p95 = stats(samples)
        print(f"{name:34} {med:10.2f} {p95:10.2f} {med / base_median:13.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    # Without bubblewrap the local backend runs commands unisolated: the figures would leave out
    # the sandbox they are meant to measure, so refuse rather than print them under its name.
    if shutil.which("bwrap") is None:
        sys.exit("tool_latency: bubblewrap is not installed (run `make system-deps`): "
                 "without it the round trip would not include the sandbox")
    anyio.run(main, args.n)
