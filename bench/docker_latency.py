"""The docker backend's overheads, in one run.

1. Round trip of `run_command("true")` through the MCP client on the docker backend, against
   a bare `container.exec_run(["true"])` on the same run's container (target: at most 1.3x).
2. Time from making a run with the docker backend to its first command accepted, excluding
   the image build and the baseline (both cached before timing; target: at most 3 s).

    .venv/bin/python bench/docker_latency.py [--n 100]

Needs a Docker engine and the sandbox image (scripts/docker-engine.sh,
docker/build-test-image.sh).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from a2rl.sandbox.docker import TEST_IMAGE, container_name, docker_client
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


async def main(n: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-docker-"))
    settings = Settings(home=home, sandbox={"backend": "docker", "docker": {"image": TEST_IMAGE}})
    store = Store(settings.database_url)
    create_run(settings, store, task_id="arith", budget="1h", backend="local")  # baseline cache

    starts = []
    for _ in range(5):
        t = time.perf_counter()
        run = create_run(settings, store, task_id="arith", budget="1h").run
        async with Client(build_server(settings, store, run_id=run.id), mode="legacy") as c:
            r = await c.call_tool("run_command", {"command": "true"})
            assert r.structured_content["exit_code"] == 0
        starts.append(time.perf_counter() - t)
        finish_run(settings, store, run.id)

    run = create_run(settings, store, task_id="arith", budget="1h").run
    mcp_ms: list[float] = []
    async with Client(build_server(settings, store, run_id=run.id), mode="legacy") as c:
        for i in range(n + 5):
            t = time.perf_counter()
            r = await c.call_tool("run_command", {"command": "true", "wait_s": 10})
            if i >= 5:
                mcp_ms.append((time.perf_counter() - t) * 1000)
        container = docker_client().containers.get(container_name(run.id))
        exec_ms = []
        for i in range(n + 5):
            t = time.perf_counter()
            code, _ = container.exec_run(["true"])
            if i >= 5:
                exec_ms.append((time.perf_counter() - t) * 1000)
            assert code == 0
    finish_run(settings, store, run.id)

    med_exec, p95_exec = summary(exec_ms)
    med_mcp, p95_mcp = summary(mcp_ms)
    print(f"n={n}; docker backend, image {TEST_IMAGE}")
    print(f"{'what':44} {'median':>9} {'p95':>9} {'x exec_run':>11}")
    name = "bare container.exec_run([true]) (ms)"
    print(f"{name:44} {med_exec:9.2f} {p95_exec:9.2f} {1.0:11.2f}")
    print(f"{'MCP run_command(true), docker backend (ms)':44} {med_mcp:9.2f} {p95_mcp:9.2f} "
          f"{med_mcp / med_exec:11.2f}")
    med_start = statistics.median(starts)
    print(f"create run -> first command accepted (s): median {med_start:.2f}, "
          f"max {max(starts):.2f} over {len(starts)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    anyio.run(main, parser.parse_args().n)
