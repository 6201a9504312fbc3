"""Small helpers shared by test modules (not fixtures)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Store, ToolCall


def calls(store: Store, run_id: str) -> list[ToolCall]:
    with store.session() as s:
        return list(s.exec(select(ToolCall).where(ToolCall.run_id == run_id)
                           .order_by(ToolCall.id)).all())  # type: ignore[arg-type]


def last_call(store: Store, run_id: str) -> ToolCall:
    rows = calls(store, run_id)
    assert rows, "no tool call was recorded"
    return rows[-1]


def text_of(result: Any) -> str:
    return " ".join(getattr(p, "text", "") for p in result.content)


def with_task_options(settings: Settings, task_id: str, **options: Any) -> Settings:
    """A copy of `settings` whose `[tasks.<task_id>]` table takes `options` over its own (what
    that table of config.toml sets)."""
    tables = dict(settings.tasks)
    tables[task_id] = {**tables.get(task_id, {}), **options}
    return settings.model_copy(update={"tasks": tables})


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll `predicate` until it holds or `timeout` passes; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def workspace_text(workspace: str | Path, rel: str) -> str:
    """A file of a run's workspace, also once the run is finished: then (as root) its volume is
    detached and the file is read from the run's `workspace.img` with e2fsprogs' debugfs,
    without mounting it."""
    path = Path(workspace) / rel
    if path.exists():
        return path.read_text()
    image = Path(workspace).parent / "workspace.img"
    if not image.is_file():
        raise FileNotFoundError(path)
    out = subprocess.run(["debugfs", "-R", f"cat /{rel}", str(image)], capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout


def noisy_checkpoint_copy(settings: Settings, workspace: Path, name: str = "ck") -> Path:
    """A grader-owned copy of arith's base model with noise on its weights: a checkpoint the
    grader scores (graded, not trained), made in a second."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from a2rl.tasks import get_task
    from a2rl.tools.checkpoint_copy import copy_checkpoint

    base = get_task("arith").base_model_dir(settings)
    src = workspace / "output" / name
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(src)
    AutoTokenizer.from_pretrained(base).save_pretrained(src)
    copy = settings.home_dir / "checkpoints" / name
    copy_checkpoint(src, copy)
    return copy
