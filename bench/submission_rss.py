"""The server's peak RSS while it handles a submission, by the config's num_hidden_layers.

One arith run (tiny base model, 4 layers), an in-memory MCP client, so this process is the
server. For each layer count a trained checkpoint whose config.json asks for that many layers
is submitted; the peak RSS (VmHWM, reset before each call through /proc/self/clear_refs) is
printed with its ratio to the 4-layer (valid, accepted) submission's. Flat means the server
never builds what a submitted config asks for.

    .venv/bin/python bench/submission_rss.py [--layers 4 400 4000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_grading_checks import save_perturbed  # noqa: E402


def status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no {key} in /proc/self/status (Linux only)")


async def main(layers: list[int]) -> None:
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    settings = Settings(home=home)
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="arith", budget="1h", baseline=False).run
    ws = Path(run.workspace)
    trained = save_perturbed(ws / "base_model", home / "trained", 0.3)
    for n in layers:
        folder = shutil.copytree(trained, ws / "output" / f"layers{n}")
        cfg = json.loads((folder / "config.json").read_text())
        cfg["num_hidden_layers"] = n
        (folder / "config.json").write_text(json.dumps(cfg))
    server = build_server(settings, store, run_id=run.id, transport="memory")
    rows = []
    try:
        async with Client(server, mode="legacy") as client:
            await client.call_tool("budget_status", {})
            for n in layers:
                Path("/proc/self/clear_refs").write_text("5")
                start = status_mib("VmRSS")
                t = time.perf_counter()
                r = await client.call_tool("submit_checkpoint", {"path": f"output/layers{n}"})
                seconds = time.perf_counter() - t
                answer = "accepted" if not r.is_error else "refused"
                rows.append((n, start, status_mib("VmHWM"), seconds, answer))
    finally:
        finish_run(settings, store, run.id)
        store.close()
        shutil.rmtree(home, ignore_errors=True)
    ref = rows[0][2]
    print(f"{'layers':>7} {'RSS before':>11} {'peak RSS':>9} {'ratio':>6} {'seconds':>8}  answer")
    for n, start, peak, seconds, answer in rows:
        print(f"{n:>7} {start:>8.0f} MiB {peak:>5.0f} MiB {peak / ref:>6.2f} {seconds:>8.2f}"
              f"  {answer}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 400, 4000])
    anyio.run(main, parser.parse_args().layers)
