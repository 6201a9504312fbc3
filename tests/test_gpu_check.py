"""bench/gpu_check.sh end to end in its CPU smoke mode: every check runs and writes its figures
(the figures themselves only mean something on a GPU; see bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_smoke_runs_every_check(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # One thread: the smoke shapes are tiny, and the build machines are shared.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("OUT", None)
    p = subprocess.run([str(ROOT / "bench" / "gpu_check.sh"), "--smoke", "--out", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["ok"] and doc["smoke"] and doc["environment"]["device"] == "CPU"
    rows = doc["engines"]["rows"]
    assert [r["engine"] for r in rows] == ["transformers", "transformers-static"]
    assert all(r["generated_tokens_per_s"] > 0 and r["prompts"] == 8 for r in rows)
    assert rows[0]["same_outputs_as_plain"] is None  # the baseline
    assert rows[1]["compared_outputs"] == 8 and rows[1]["same_outputs_as_plain"] == 1.0
    assert doc["engine_select"]["auto_chooses"] == "static"
    arith = doc["arith_worker"]
    assert arith["error"] is None and arith["n_items"] == 200 and 0.0 <= arith["score"] <= 1.0
    assert arith["engine"] == "transformers-static"
    assert "all checks passed" in p.stdout and "arith dev through the grader worker" in p.stdout


def test_gpu_check_without_a_gpu_says_so(tmp_path: Path) -> None:
    """The full check refuses to pretend on a CPU: one line, exit 2, nothing written."""
    p = subprocess.run([str(ROOT / "bench" / "gpu_check.sh"), "--out", str(tmp_path / "o")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 2 and "no CUDA device here" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "o" / "gpu_check.json").exists()
