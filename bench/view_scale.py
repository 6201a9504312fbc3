"""`a2rl view` and `a2rl report` on a large synthetic run: first useful view and report time.

Generates a run of 10,000 tool calls, 500 jobs (with TRL-style training logs) and 50 graded
submissions (with snapshots, code revisions and per-item results) in a temporary SQLite store,
then measures, in the same process and the same run:

- the runs page and the run page of the viewer, served by the real app over HTTP (uvicorn on
  loopback), time until the complete response of the first useful view (the run page's summary,
  first page of the conversation, jobs, revisions and submissions; later pages load on demand),
  cold (first request) and warm; and the run page's report sections (`/run/ID/report`, fetched
  by the page after its first view);
- `a2rl report RUN` as a subprocess (the whole command: import, store, build, render);
- baselines measured in the same run: the same HTTP client fetching a static 404 from the same
  server (the floor for any page) and `a2rl --help` (the floor for any command).

Limits on 2 cores: each page at most 1 s, the report at most 5 s. Wall and CPU seconds are
both printed: CPU time moves less when other work shares the cores.

    .venv/bin/python bench/view_scale.py [--calls 10000 --jobs 500 --subs 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import func
from sqlmodel import col, select

from a2rl.analysis.web.browser import served
from a2rl.store import (
    Blob,
    Evaluation,
    EvaluationKind,
    Job,
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Store,
    Submission,
    ToolCall,
)
from a2rl.store.db import blob_row

TOOLS = ["run_command", "job_status", "read_file", "edit_file", "list_files", "budget_status"]
N_ITEMS = 200


def _log(i: int, steps: int = 40) -> str:
    lines = [f"job {i}: training", "Loading model..."]
    for s in range(steps):
        loss = 2.0 * (0.97 ** s) + 0.01 * (i % 7)
        lines.append(json.dumps({"loss": round(loss, 4), "grad_norm": 1.1,
                                 "learning_rate": 5e-5, "epoch": round(s / steps, 3)})
                     .replace('"', "'"))
    if i % 25 == 24:
        lines += ["Traceback (most recent call last):", '  File "train.py", line 3',
                  "RuntimeError: synthetic failure"]
    return "\n".join(lines) + "\n"


def _items(seed: int, p: float) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"id": f"q{k}", "prompt": f"{k}+{k}=", "output": str(2 * k), "expected": str(2 * k),
             "correct": rng.random() < p} for k in range(N_ITEMS)]


def build_synthetic(store: Store, calls: int = 10_000, jobs: int = 500, subs: int = 50,
                    run_id: str = "synthetic", final_seed: int = 999,
                    fleet_id: str | None = None) -> str:
    """Insert one finished run of that size (bulk inserts); returns its id. Its final test
    evaluation's per-item results are drawn with `final_seed` (runs with different seeds
    disagree on some items)."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    span = 8 * 3600.0
    blobs: dict[str, Blob] = {}

    def blob(text: str) -> str:
        row = blob_row(text.encode())
        blobs.setdefault(row.sha256, row)
        return row.sha256

    base = Evaluation(kind="baseline", split="test", score=0.3, ci_low=0.24, ci_high=0.37,
                      n_items=N_ITEMS, items=_items(0, 0.3), started_at=t0, ended_at=t0)
    base_dev = Evaluation(kind="baseline", split="dev", score=0.31, n_items=N_ITEMS,
                          items=_items(1, 0.31), started_at=t0, ended_at=t0)
    run = Run(id=run_id, task_id="arith", status="finished", workspace="/nonexistent/ws",
              budget_s=span, agent="synthetic", driver_model="none", base_model="tiny",
              created_at=t0, started_at=t0, deadline=t0 + timedelta(seconds=span),
              ended_at=t0 + timedelta(seconds=span), end_reason="budget", baseline_dev=0.31,
              baseline_test=0.3, final_score=0.42, final_submission_id=f"{run_id}-s{subs - 1}",
              fleet_id=fleet_id)
    rows: list[object] = [run]
    for i in range(calls):
        tool = TOOLS[i % len(TOOLS)]
        err = i % 97 == 0
        rows.append(ToolCall(id=None, run_id=run_id, tool=tool, seq=i + 1,
                             arguments={"command": f"python train.py --step {i}"}
                             if tool == "run_command" else {"path": f"code/f{i % 13}.py"},
                             result_summary=f"ok {i}" * 3, is_error=err,
                             error="synthetic error: exit 1" if err else None,
                             started_at=t0 + timedelta(seconds=span * i / calls),
                             duration_ms=150.0))
    for j in range(jobs):
        start = t0 + timedelta(seconds=span * j / jobs)
        failed = j % 25 == 24
        rows.append(Job(id=f"{run_id}-j{j}", run_id=run_id, command=f"python train.py --job {j}",
                        state="exited", exit_code=1 if failed else 0, log_path="",
                        log_blob_sha=blob(_log(j)), log_bytes=2000, started_at=start,
                        ended_at=start + timedelta(seconds=span / jobs * 0.8)))
    with store.session() as s:
        snap0 = s.exec(select(func.max(Snapshot.id))).one() or 0
    code = "import trl\nfrom trl import SFTTrainer\n"
    for k in range(subs):
        at = t0 + timedelta(seconds=span * (k + 0.5) / subs)
        code += f"# change {k}\nLR_{k} = {1e-5 * (k + 1)}\n"
        sha = blob(code)
        rows += [Snapshot(id=snap0 + k + 1, run_id=run_id, reason="submission", created_at=at),
                 SnapshotFile(snapshot_id=snap0 + k + 1, path="code/train.py", blob_sha=sha),
                 Revision(run_id=run_id, path="code/train.py", blob_sha=sha,
                          source="edit_file", created_at=at)]
        sid = f"{run_id}-s{k}"
        rows.append(Submission(id=sid, run_id=run_id, path=f"output/ckpt{k}", status="graded",
                               snapshot_id=snap0 + k + 1, created_at=at))
        score = 0.3 + 0.12 * k / max(subs - 1, 1)
        rows.append(Evaluation(run_id=run_id, submission_id=sid, split="dev", score=score,
                               ci_low=score - 0.06, ci_high=score + 0.06, n_items=N_ITEMS,
                               items=_items(100 + k, score), started_at=at,
                               ended_at=at + timedelta(seconds=60)))
    rows.append(Evaluation(run_id=run_id, submission_id=f"{run_id}-s{subs - 1}",
                           kind=EvaluationKind.submission, split="test", score=0.42,
                           ci_low=0.35, ci_high=0.49,
                           n_items=N_ITEMS, items=_items(final_seed, 0.42),
                           started_at=t0 + timedelta(seconds=span),
                           ended_at=t0 + timedelta(seconds=span)))
    with store.session() as s:  # a second synthetic run in the same store shares blobs
        have = set(s.exec(select(Blob.sha256).where(col(Blob.sha256).in_(list(blobs)))).all())
        s.add_all([b for sha, b in blobs.items() if sha not in have])
    with store.session() as s:
        s.add_all([base, base_dev, *rows])
    return run_id


def timed_get(client: httpx.Client, url: str) -> tuple[float, httpx.Response]:
    t = time.perf_counter()
    r = client.get(url)
    return time.perf_counter() - t, r


def cpu_get(client: httpx.Client, url: str) -> tuple[float, float]:
    """Wall and CPU seconds of one request (CPU: this process, server thread included; it
    moves less than wall time when other work shares the cores)."""
    c = time.process_time()
    wall, r = timed_get(client, url)
    assert r.status_code == 200, (url, r.status_code)
    return wall, time.process_time() - c


def measure(url: str, run_id: str, env: dict[str, str]) -> dict[str, float]:
    """Seconds for each measured thing (see the module's docstring)."""
    out: dict[str, float] = {}
    with served(url) as base, httpx.Client(base_url=base, timeout=60) as c:
        out["floor_404"] = min(timed_get(c, "/no-such-page")[0] for _ in range(5))
        for page, path in (("runs", "/"), ("run", f"/run/{run_id}"),
                           ("report", f"/run/{run_id}/report")):
            cold, cold_cpu = cpu_get(c, path)
            out[f"{page}_cold"], out[f"{page}_cold_cpu"] = cold, cold_cpu
            warm = min((cpu_get(c, path) for _ in range(3)), key=lambda x: x[0])
            out[f"{page}_warm"], out[f"{page}_warm_cpu"] = warm
            out[f"{page}_bytes"] = float(len(c.get(path).content))
    exe = str(Path(sys.executable).parent / "a2rl")
    for key, argv in (("floor_cli", [exe, "--help"]),
                      ("report", [exe, "report", run_id, "--format", "html", "--out",
                                  str(Path(env["A2RL_HOME"]) / "report.html")])):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        out[key] = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out[key + "_cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime
                                                                 + before.ru_stime)
        assert p.returncode == 0, p.stderr[-2000:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--subs", type=int, default=50)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'a2rl.db'}"
        store = Store(url)
        t = time.perf_counter()
        run_id = build_synthetic(store, a.calls, a.jobs, a.subs)
        store.close()
        print(f"generated {a.calls} calls, {a.jobs} jobs, {a.subs} submissions in "
              f"{time.perf_counter() - t:.1f}s")
        env = {**os.environ, "A2RL_HOME": tmp, "A2RL_DB_URL": url}
        m = measure(url, run_id, env)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| what | wall s | CPU s | limit (wall) | wall x floor |")
    print("|---|---|---|---|---|")
    print(f"| HTTP floor (a 404 from the same server) | {m['floor_404']:.3f} | | | 1.0 |")
    for page, label in (("runs", "runs page"), ("run", "run page (first view)"),
                        ("report", "run page's report sections (`/run/ID/report`)")):
        for kind in ("cold", "warm"):
            v = m[f"{page}_{kind}"]
            limit = "1" if page != "report" else ""
            print(f"| {label}, {kind} ({m[f'{page}_bytes'] / 1e3:.0f} kB) | {v:.3f} | "
                  f"{m[f'{page}_{kind}_cpu']:.3f} | {limit} | {v / m['floor_404']:.0f} |")
    print(f"| `a2rl --help` (CLI floor) | {m['floor_cli']:.3f} | {m['floor_cli_cpu']:.3f} | "
          "| 1.0 |")
    print(f"| `a2rl report RUN --format html` | {m['report']:.3f} | {m['report_cpu']:.3f} | 5 | "
          f"{m['report'] / m['floor_cli']:.1f} |")


if __name__ == "__main__":
    main()
