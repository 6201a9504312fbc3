"""Is the HTTP server fair under abuse? Another run's `run_command true` while one token floods.

Starts `a2rl serve --http` (its default bounds, or `--env NAME=VALUE` ones) on a fresh home
with two `arith` runs, a victim and an attacker. For each flood of bench/http_floods.py, at the
sizes of issue 43, it measures the victim's latency (a real MCP client, one call after
another) first without the flood, then during it, and the server's resident memory and open
descriptors before, at the flood's peak and a few seconds after it stopped:

- `initialize`: an `initialize` loop on the attacker's token (4 at a time);
- `slow-bodies`: 300 slow bodies with the token and 300 token-less half requests;
- `refused`: 300 refused calls kept in flight on the token;
- `duplicate-ids`: slow calls each followed by 8 requests with the same id.

Targets (issue 43): the victim's p50 <= 0.5 s and p99 <= 5 s during every flood, no call left
unanswered, memory and descriptors back near where they were.

    .venv/bin/python bench/http_fairness.py [--seconds 20] [--only refused] [--json]
        [--a2rl PATH]  # another build's a2rl, e.g. to measure a server from before the bounds
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

_PATH = Path(__file__).resolve().parent / "http_floods.py"
_spec = importlib.util.spec_from_file_location("http_floods", _PATH)
assert _spec is not None and _spec.loader is not None
floods = importlib.util.module_from_spec(_spec)
sys.modules["http_floods"] = floods
_spec.loader.exec_module(floods)

SETTLE_S = 5.0
FLOODS = ("initialize", "slow-bodies", "refused", "duplicate-ids")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(name: str, url: str, pid: int, victim_token: str,
                  attacker_token: str, seconds: float, baseline_n: int) -> dict[str, Any]:
    victim = floods.Victim(url, victim_token, timeout_s=30)
    await victim.latencies(n=5)  # warm: the run's sandbox started, the server's paths run
    base, base_failed = await victim.latencies(n=baseline_n)
    probe = floods.ProcessProbe(pid)
    rss0, fds0 = probe.sample()
    stop = anyio.Event()
    out: dict[str, Any] = {}

    async def flooding() -> None:  # the attacker: a process of its own
        done = await anyio.run_process([sys.executable, str(_PATH), name, url, attacker_token,
                                        str(seconds)], check=False)
        out["flood"] = json.loads(done.stdout or b"{}") if done.returncode == 0 else {
            "error": done.stderr.decode()[-500:]}

    async def victim_calls() -> None:
        await anyio.sleep(min(2.0, seconds / 5))  # the flood is under way
        out["victim"] = await victim.latencies(stop=stop)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.watch, stop)
        tg.start_soon(flooding)
        tg.start_soon(victim_calls)
        await anyio.sleep(seconds + 1)  # the attacker's process takes a moment to start
        stop.set()
        with anyio.move_on_after(90):  # a flood's last calls end; a hung server is cut off
            while "victim" not in out or "flood" not in out:
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    elapsed = time.monotonic() - started
    await anyio.sleep(SETTLE_S)
    alive = True
    try:
        rss1, fds1 = probe.sample()
    except OSError:
        alive, rss1, fds1 = False, float("nan"), -1
    times, failed = out.get("victim", ([], -1))
    p = floods.percentile
    row = {
        "flood": name, "seconds": round(elapsed, 1),
        "base_p50_s": p(base, 0.5), "base_p99_s": p(base, 0.99), "base_failed": base_failed,
        "p50_s": p(times, 0.5), "p99_s": p(times, 0.99), "calls": len(times),
        "failed": failed, "rss_mb": [round(rss0), round(probe.peak_rss_mb), round(rss1)],
        "fds": [fds0, probe.peak_fds, fds1], "server_alive": alive,
        "attacker": {str(k): v for k, v in dict(out.get("flood") or {}).items()},
    }
    row["p50_ratio"] = row["p50_s"] / row["base_p50_s"] if row["base_p50_s"] else None
    row["p99_ratio"] = row["p99_s"] / row["base_p99_s"] if row["base_p99_s"] else None
    row["meets_target"] = bool(times) and failed == 0 and row["p50_s"] <= 0.5 \
        and row["p99_s"] <= 5.0
    return row


class Served:
    """`a2rl serve --http` (of the `a2rl` given) on `home` with a victim run and an attacker
    run, both made and finished by that same `a2rl` (its store's schema is its own)."""

    def __init__(self, a2rl: str, home: Path, env: dict[str, str]) -> None:
        self.a2rl, self.home = a2rl, home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
        self.env.update(A2RL_HOME=str(home), **env)
        self.runs = [self._create() for _ in range(2)]
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = (home / "server.log").open("ab")
        self.proc = subprocess.Popen([a2rl, "serve", "--http", "--port", str(self.port)],
                                     env=self.env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{self.port}/health", timeout=2)
                break
            except httpx2.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the HTTP server did not start") from None
                time.sleep(0.2)

    def _create(self) -> dict[str, Any]:
        """A run (the baseline is scored once per home, then cached)."""
        done = subprocess.run([self.a2rl, "create", "--task", "arith", "--budget", "2h",
                               "--json"], env=self.env, capture_output=True, check=True,
                              timeout=600)
        return dict(json.loads(done.stdout))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        self.log.close()
        for run in self.runs:
            subprocess.run([self.a2rl, "finish", run["run_id"]], env=self.env,
                           capture_output=True, timeout=600)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| flood | victim p50 / p99 without (s) | during (s) | ratio p50 / p99 | "
             "unanswered | RSS MB before / peak / after | fds before / peak / after |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = (f"{r['p50_ratio']:.1f}x / {r['p99_ratio']:.1f}x"
                 if r["p50_ratio"] and r["p99_ratio"] else "-")
        lines.append(
            f"| {r['flood']} | {r['base_p50_s']:.3f} / {r['base_p99_s']:.3f} | "
            f"{r['p50_s']:.3f} / {r['p99_s']:.3f} | {ratio} | {r['failed']} of {r['calls']} | "
            f"{' / '.join(map(str, r['rss_mb']))} | {' / '.join(map(str, r['fds']))} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each flood")
    parser.add_argument("--baseline", type=int, default=40, help="victim calls without flood")
    parser.add_argument("--only", choices=FLOODS, action="append", help="this flood (again: more)")
    parser.add_argument("--a2rl", default=str(Path(sys.executable).parent / "a2rl"),
                        help="the a2rl executable that serves")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    rows = []
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-http-"))
    try:
        for name in args.only or FLOODS:  # a fresh server each: a flood's leftovers its own
            served = Served(args.a2rl, home, env)
            try:
                rows.append(anyio.run(measure, name, served.url, served.proc.pid,
                                      served.runs[0]["token"], served.runs[1]["token"],
                                      args.seconds, args.baseline))
            finally:
                served.close()
            if not args.json:
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        print()
        print(table(rows))
        for r in rows:
            print(f"{r['flood']}: attacker's answers {r['attacker']}; server alive "
                  f"{r['server_alive']}; target met {r['meets_target']}")


if __name__ == "__main__":
    main()
