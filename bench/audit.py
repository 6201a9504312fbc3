"""The audit of a large, realistic run, against the audit before issue 43 on the same run.

A synthetic `arith` run in a fresh home, shaped like a real training run's: 10,000 tool calls,
500 jobs with their logs in the supervisor's folder, 1 GiB of generated training data (JSON
lines), the Hugging Face datasets cache of it (an Arrow stream), the base model's weights
(recognised by the hash the grader recorded for the baseline), a Trainer checkpoint (its
weights, an `optimizer.pt` twice their size, `trainer_state.json`, `training_args.bin`), and
the kernel's record of the files the training job read and wrote (`JobFile`). Timed in one
process, one after the other: this version's `compute_audit`, and the audit as it was at
`--old-ref` (its package read from git into a temporary folder and imported under another
name), which skipped the cache, the weights and every archive by name.

    .venv/bin/python bench/audit.py [--gb 1.0] [--model-mb 256] [--old-ref REV] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from a2rl.audit.run import compute_audit
from a2rl.settings import Settings
from a2rl.store import Evaluation, Job, JobFile, Run, Store, ToolCall, utcnow

BLOCK = 16 << 20
REPO = Path(__file__).resolve().parents[1]
#: the last commit before issue 43's audit (its reading of the workspace by name)
OLD_REF = "d4e5afb"


def training_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        rows.append({"messages": [{"role": "user", "content": f"{a}+{b}"},
                                  {"role": "assistant", "content": str(a + b)}]})
    return rows


def training_block(rng: random.Random) -> bytes:
    lines, size = [], 0
    while size < BLOCK:
        line = json.dumps(training_rows(rng, 1)[0]) + "\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()


def _weights(path: Path, mb: int) -> None:
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    n = (mb << 20) // 4 // 8
    save_file({f"layers.{i}.weight": np.full(n, 0.01 * i, np.float32) for i in range(8)},
              str(path))


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def build(home: Path, gb: float, model_mb: int) -> tuple[Store, Settings, str, dict[str, int]]:
    import pyarrow as pa
    import torch

    settings = Settings(home=home, db_url=f"sqlite:///{home / 'a2rl.db'}")
    store = Store(settings.database_url)
    run_id = "r-bench"
    run_dir = home / "runs" / run_id
    ws = run_dir / "workspace"
    logs = run_dir / "control" / "joblogs"
    for d in ("gen", "code", "data", "base_model", "output/checkpoint-100",
              ".cache/huggingface/datasets/json/default"):
        (ws / d).mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True)
    rng = random.Random(7)
    sizes: dict[str, int] = {}
    # the task's inputs: the base model (hashed as the grader records it) and the train file
    _weights(ws / "base_model" / "model.safetensors", model_mb)
    (ws / "base_model" / "config.json").write_text(json.dumps({"hidden_size": 128}))
    base_hashes = {p.name: _sha(p) for p in (ws / "base_model").iterdir()}
    (ws / "data" / "train.jsonl").write_text("".join(
        json.dumps(r) + "\n" for r in training_rows(rng, 6000)))
    # what training left: a checkpoint with its optimizer state, and the datasets cache
    _weights(ws / "output" / "checkpoint-100" / "model.safetensors", model_mb)
    n = (model_mb << 20) // 4
    torch.save({"state": {0: {"exp_avg": torch.zeros(n), "exp_avg_sq": torch.zeros(n)}}},
               ws / "output" / "checkpoint-100" / "optimizer.pt")
    torch.save({"learning_rate": 1e-4, "output_dir": "output"},
               ws / "output" / "checkpoint-100" / "training_args.bin")
    (ws / "output" / "checkpoint-100" / "trainer_state.json").write_text(json.dumps(
        {"log_history": [{"step": i, "loss": 1.0 / (i + 1)} for i in range(1000)]}))
    table = pa.Table.from_pylist(training_rows(rng, 400_000))
    cache = ws / ".cache/huggingface/datasets/json/default/cache-0001.arrow"
    with pa.OSFile(str(cache), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    sizes["arrow cache"] = cache.stat().st_size
    block = training_block(rng)
    total = n_files = 0
    target = int(gb * (1 << 30))
    while total < target:
        with open(ws / "gen" / f"synthetic_{n_files:02d}.jsonl", "wb") as f:
            written = 0
            while written < (128 << 20) and total < target:
                f.write(block)
                written += len(block)
                total += len(block)
        n_files += 1
    sizes["generated jsonl"] = total
    (ws / "code" / "train.py").write_text("import json\n" * 50)
    with store.session() as s:
        s.add(Run(id=run_id, task_id="arith", workspace=str(ws), budget_s=3600,
                  ended_at=utcnow(), baseline_test=0.1,
                  config={"readonly_paths": ["base_model", "data"]}))
        s.add(Evaluation(kind="baseline", split="test", score=0.1, provenance={
            "task_id": "arith", "checkpoint_hashes": base_hashes}))
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
            (logs / f"j-{i:05d}.log").write_bytes(data)
            s.add(Job(id=f"j-{i:05d}", run_id=run_id, command=f"python code/train.py --seed {i}",
                      state="exited", exit_code=0, log_blob_sha=store.put_blob(data),
                      log_path=f"logs/j-{i:05d}.log", log_bytes=len(data)))
    with store.session() as s:  # the kernel's record of the training job's files
        read = ["data/train.jsonl", "code/train.py", "base_model/model.safetensors",
                "base_model/config.json", *(f"gen/{p.name}" for p in (ws / "gen").iterdir())]
        wrote = [".cache/huggingface/datasets/json/default/cache-0001.arrow",
                 *(f"output/checkpoint-100/{p.name}"
                   for p in (ws / "output/checkpoint-100").iterdir())]
        s.add_all(JobFile(run_id=run_id, job_id="j-00001", path=p, read=True) for p in read)
        s.add_all(JobFile(run_id=run_id, job_id="j-00001", path=p, written=True) for p in wrote)
    sizes["workspace"] = sum(p.stat().st_size for p in ws.rglob("*") if p.is_file())
    return store, settings, run_id, sizes


def old_audit(ref: str, into: Path) -> Any:
    """`compute_audit` of the audit package at `ref`, imported as `a2rl_audit_old`."""
    pkg = into / "a2rl_audit_old"
    pkg.mkdir()
    names = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", ref, "audit/"],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if name.endswith(".py"):
            text = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:{name}"],
                                  capture_output=True, text=True, check=True).stdout
            (pkg / Path(name).name).write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("a2rl_audit_old.run").compute_audit


def timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    cpu0, started = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started, time.process_time() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--model-mb", type=int, default=256)
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-audit-"))
    try:
        started = time.perf_counter()
        store, settings, run_id, sizes = build(home, args.gb, args.model_mb)
        print(f"built in {time.perf_counter() - started:.1f} s: " + ", ".join(
            f"{k} {v / (1 << 20):.0f} MiB" for k, v in sizes.items()))
        old_compute = old_audit(args.old_ref, home)
        new, new_s, new_cpu = timed(compute_audit, store, run_id, settings)
        old, old_s, old_cpu = timed(old_compute, store, run_id, settings)
        for name, rep in (("new", new), ("old", old)):
            c = rep.checks["contamination"]
            print(f"{name}: contamination read {c['bytes'] / (1 << 20):.0f} MiB in {c['texts']} "
                  f"texts, unread {c['unread_bytes']}; flags "
                  f"{[(f.kind, f.severity.value) for f in rep.flags]}")
        files = new.checks["contamination"]["files"]
        print(f"new: files {files['source']}: {files['files']} listed, inputs recognised "
              f"{files['inputs_unchanged_bytes'] / (1 << 20):.0f} MiB, numeric skipped "
              f"{files['numeric_bytes_skipped'] / (1 << 20):.0f} MiB, formats {files['formats']}")
        print(f"{'':16}{'wall s':>9}{'cpu s':>9}")
        print(f"{'old audit':16}{old_s:>9.2f}{old_cpu:>9.2f}")
        print(f"{'new audit':16}{new_s:>9.2f}{new_cpu:>9.2f}")
        print(f"new / old: wall {new_s / old_s:.2f}, cpu {new_cpu / old_cpu:.2f}; "
              f"load average {os.getloadavg()[0]:.1f}")
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
