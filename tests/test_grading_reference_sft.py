"""End to end on the embedded default: the reference SFT script lifts arith from ~0 to >= 90%.

Slow (about 60-90 s of training on two CPU cores): it is the measurement behind the toy task's
calibration, so it runs in CI; deselect with `-m "not slow"` while iterating.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a2rl.grading import evaluate, validate_checkpoint
from a2rl.settings import Settings
from a2rl.tasks import get_task

SCRIPTS = Path(__file__).resolve().parents[1] / "clients" / "reference_scripts"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reference_sft_reaches_90_percent(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    task = get_task("arith")
    ws = tmp_path / "ws"
    task.prepare_workspace(ws, settings)
    shutil.copy(SCRIPTS / "sft.py", ws / "code" / "sft.py")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "code/sft.py", "--out", "output/sft", "--holdout", "0"],
        cwd=ws, capture_output=True, text=True, timeout=800,
        env={**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"})
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = validate_checkpoint(ws / "output" / "sft", ws / "output",
                                task.base_model_dir(settings))
    assert check.ok, check.error
    result = evaluate(task, ws / "output" / "sft", "test", settings)
    print(f"reference SFT: {elapsed:.1f}s wall, test accuracy {result.score:.3f}")
    assert result.score >= 0.9
    assert not any(p.name.endswith("-trainer") for p in (ws / "output").iterdir())
