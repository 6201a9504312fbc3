"""`a2rl gc`: remove what finished runs no longer need.

Finished runs keep their record in the store (which is never touched here) and, unless
`include_final`, the grader's copy of their final checkpoint. Removed: other checkpoint copies,
the copies of runs whose record is gone, and the sandbox control folders of finished runs.
The workspace volumes of finished runs are detached (`finish_run` does it already; here for the
runs of older versions and those a kept container held), and the loop devices of deleted
workspace images are freed (their files stay in `workspace.img`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.tools.sandbox import volume


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def collect_garbage(settings: Settings, store: Store, include_final: bool = False) -> dict:
    with store.session() as s:
        runs = {r.id: r for r in s.exec(select(Run)).all()}
    removed: list[str] = []
    freed = 0
    checkpoints = settings.home_dir / "checkpoints"
    for run_dir in sorted(checkpoints.glob("*")) if checkpoints.exists() else []:
        run = runs.get(run_dir.name)
        if run is not None and run.ended_at is None:
            continue  # a live run may still need every copy
        for sub_dir in sorted(run_dir.glob("*")):
            if run is not None and sub_dir.name == run.final_submission_id and not include_final:
                continue
            freed += _size(sub_dir)
            shutil.rmtree(sub_dir, ignore_errors=True)
            removed.append(str(sub_dir))
        if not any(run_dir.iterdir()):
            run_dir.rmdir()
    detached: list[str] = []
    for run in runs.values():
        control = Path(run.workspace).parent / "control"
        if run.ended_at is not None and control.exists():
            shutil.rmtree(control, ignore_errors=True)
            removed.append(str(control))
        if run.ended_at is not None and os.path.ismount(run.workspace):
            volume.detach(Path(run.workspace).parent, Path(run.workspace), wait_s=0)
            detached.append(run.workspace)
    detached += volume.detach_orphans()
    return {"removed": removed, "bytes_freed": freed, "volumes_detached": detached}
