"""The audit of a large run: 10,000 tool calls, 500 jobs and 1 GB of generated training text.

A synthetic `arith` run in a fresh home: tool calls (commands and edited scripts), jobs with
stored output logs, and the generated training data left in the workspace (JSON lines of
additions, the task's own format, so the short-item rule and its control are exercised on
every hidden item). `compute_audit` is timed against two baselines measured in the same run:
a plain read of the same workspace bytes (the floor: any audit reads them), and a naive
un-hashed audit (Python tokens, a set of n-gram tuples) on a sample, scaled to the size.

    .venv/bin/python bench/audit.py [--gb 1.0] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import tempfile
import time
from pathlib import Path

from a2rl.audit.run import compute_audit
from a2rl.settings import Settings
from a2rl.store import Job, Run, Store, ToolCall, utcnow

BLOCK = 16 << 20


def training_block(rng: random.Random) -> bytes:
    lines = []
    size = 0
    while size < BLOCK:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        line = json.dumps({"messages": [{"role": "user", "content": f"{a}+{b}"},
                                        {"role": "assistant", "content": str(a + b)}]}) + "\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()


def build(home: Path, gb: float) -> tuple[Store, Settings, str, int]:
    settings = Settings(home=home, db_url=f"sqlite:///{home / 'a2rl.db'}")
    store = Store(settings.database_url)
    run_id = "r-bench"
    ws = home / "runs" / run_id / "workspace"
    (ws / "gen").mkdir(parents=True)
    rng = random.Random(7)
    with store.session() as s:
        s.add(Run(id=run_id, task_id="arith", workspace=str(ws), budget_s=3600,
                  ended_at=utcnow(), config={"readonly_paths": ["base_model", "data"]}))
    with store.session() as s:
        for i in range(10_000):
            if i % 2:
                args = {"command": f"python code/train.py --step {i} --lr 1e-4 | tail -5"}
            else:
                args = {"path": f"code/step_{i % 50}.py",
                        "new_text": "import json\n" + "x = [i * 2 for i in range(100)]\n" * 20}
            s.add(ToolCall(run_id=run_id, tool="run_command" if i % 2 else "edit_file",
                           arguments=args, result_summary="ok"))
    log = ("step 10 loss 1.234 lr 0.0001 tokens/s 5321\n" * 500).encode()  # ~22 KB each
    with store.session() as s:
        for i in range(500):  # each log its own content, as real jobs' are
            data = log + f"job {i} done\n".encode()
            s.add(Job(id=f"j-{i:05d}", run_id=run_id, command=f"python code/train.py --seed {i}",
                      state="exited", exit_code=0, log_blob_sha=store.put_blob(data),
                      log_bytes=len(data)))
    block = training_block(rng)
    total = 0
    per_file = 128 << 20
    target = int(gb * (1 << 30))
    n = 0
    while total < target:
        with open(ws / "gen" / f"synthetic_{n:02d}.jsonl", "wb") as f:
            written = 0
            while written < per_file and total < target:
                f.write(block)
                written += len(block)
                total += len(block)
        n += 1
    return store, settings, run_id, total


def plain_read(root: Path) -> float:
    started = time.perf_counter()
    for path in sorted(root.rglob("*.jsonl")):
        fd = os.open(path, os.O_RDONLY)
        while os.read(fd, 4 << 20):
            pass
        os.close(fd)
    return time.perf_counter() - started


def naive_sample(root: Path, n: int = 8, sample: int = 32 << 20) -> float:
    """Seconds per byte of an un-hashed audit: Python tokens, n-gram tuples, a set lookup."""
    data = next(iter(sorted(root.rglob("*.jsonl")))).read_bytes()[:sample].decode()
    wanted = {("47", "+", "85")}
    started = time.perf_counter()
    toks = re.findall(r"[a-z0-9]+|[^\sa-z0-9]", data.lower())
    hits = 0
    for k in (n, 3, 1):
        for i in range(len(toks) - k + 1):
            if tuple(toks[i:i + k]) in wanted:
                hits += 1
    return (time.perf_counter() - started) / len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-audit-"))
    try:
        started = time.perf_counter()
        store, settings, run_id, total = build(home, args.gb)
        print(f"built: {total / (1 << 30):.2f} GiB, 10,000 tool calls, 500 jobs "
              f"({time.perf_counter() - started:.1f} s)")
        ws = home / "runs" / run_id / "workspace"
        read_s = plain_read(ws)
        naive_s = naive_sample(ws) * total
        cpu0, started = time.process_time(), time.perf_counter()
        report = compute_audit(store, run_id, settings)
        audit_s, audit_cpu = time.perf_counter() - started, time.process_time() - cpu0
        c = report.checks["contamination"]
        print(f"contamination read {c['bytes'] / (1 << 30):.2f} GiB in {c['texts']} texts; "
              f"flags: {[(f.kind, f.severity.value) for f in report.flags]}")
        print(f"{'':24}{'seconds':>10}{'audit / it':>12}")
        print(f"{'audit (wall)':24}{audit_s:>10.2f}{1.0:>12.2f}")
        print(f"{'audit (cpu)':24}{audit_cpu:>10.2f}")
        print(f"{'plain read':24}{read_s:>10.2f}{audit_s / read_s:>12.2f}")
        print(f"{'naive n-gram (scaled)':24}{naive_s:>10.2f}{audit_s / naive_s:>12.2f}")
        for name, chk in report.checks.items():
            if isinstance(chk, dict) and "seconds" in chk:
                print(f"  {name}: {chk['seconds']} s")
        print(f"load average {os.getloadavg()[0]:.1f}; within 30 s: {audit_s <= 30}")
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
