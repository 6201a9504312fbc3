"""`a2rl gc`: remove what finished runs no longer need.

Finished runs keep their record in the store (which is never touched here) and, unless
`include_final`, the grader's copy of their final checkpoint and of the stages scored for its
attribution (`stage-<job>`). Removed: other checkpoint copies,
the copies of runs whose record is gone, and the sandbox control folders of finished runs.
The workspace volumes of finished runs are detached (`finish_run` does it already; here for the
runs of older versions and those a kept container held), and the loop devices of deleted
workspace images are freed (their files stay in `workspace.img`).

A run folder the store does not know (a create that died before writing its row, a store
replaced under an old home) is removed once it is older than the grace period and no live
process is making it (`maker`, the file `create_run` writes until the row exists); its volume
is detached first, and a folder whose volume stays mounted is left.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from sqlmodel import select

from a2rl.sandbox import volume
from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.store.owners import owner_gone


class _Freed:
    """Bytes that removing trees gives back to the disk: the blocks each file holds (a
    sparse image counts what it has written, not its length), each file once, and only when
    every hard link to it is among the removed."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], list[int]] = {}  # inode -> [links seen, nlink, bytes]

    def add(self, tree: Path) -> None:
        """Count `tree` (measured before it is removed)."""
        for root, dirs, files in os.walk(tree):
            for path in ([root] if root == str(tree) else []) + [
                    os.path.join(root, name) for name in (*dirs, *files)]:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                # a folder has no other links that keep it: its own nlink counts its children
                nlink = 1 if stat.S_ISDIR(st.st_mode) else st.st_nlink
                seen = self._seen.setdefault((st.st_dev, st.st_ino), [0, nlink, st.st_blocks * 512])
                seen[0] += 1

    @property
    def bytes(self) -> int:
        return sum(size for links, nlink, size in self._seen.values() if links >= nlink)


#: How old an unknown run folder must be before `a2rl gc` removes it (`--grace`).
ORPHAN_GRACE_S = 3600.0


def _orphan_folders(runs_dir: Path, known: set[str], grace_s: float) -> list[Path]:
    """Run folders under `runs_dir` the store does not know, older than `grace_s`, that no
    live process is making (its `maker` file names a process of this host that is gone, or
    there is none: a folder of an older version)."""
    from .run.lifecycle import MAKER_FILE

    out = []
    now = time.time()
    for folder in sorted(runs_dir.glob("r-*")) if runs_dir.is_dir() else []:
        if folder.name in known or folder.is_symlink() or not folder.is_dir():
            continue
        maker = folder / MAKER_FILE
        try:
            newest = max(p.lstat().st_mtime for p in (folder, maker) if p.exists())
            owner = maker.read_text().strip() if maker.is_file() else None
        except OSError:
            continue
        if now - newest >= grace_s and (owner is None or owner_gone(owner)):
            out.append(folder)
    return out


def collect_garbage(settings: Settings, store: Store, include_final: bool = False,
                    grace_s: float = ORPHAN_GRACE_S) -> dict:
    with store.session() as s:
        runs = {r.id: r for r in s.exec(select(Run)).all()}
    removed: list[str] = []
    freed = _Freed()
    for folder in _orphan_folders(settings.runs_dir, set(runs), grace_s):
        if volume.detach(folder, folder / "workspace", wait_s=2) or \
                os.path.ismount(folder / "workspace"):
            continue  # something still holds its volume: left for a later gc
        freed.add(folder)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    checkpoints = settings.home_dir / "checkpoints"
    for run_dir in sorted(checkpoints.glob("*")) if checkpoints.exists() else []:
        run = runs.get(run_dir.name)
        if run is not None and run.ended_at is None:
            continue  # a live run may still need every copy
        for sub_dir in sorted(run_dir.glob("*")):
            kept = sub_dir.name == run.final_submission_id or sub_dir.name.startswith(
                "stage-") if run is not None else False  # what a regrade or a score needs
            if kept and not include_final:
                continue
            freed.add(sub_dir)
            shutil.rmtree(sub_dir, ignore_errors=True)
            removed.append(str(sub_dir))
        if not any(run_dir.iterdir()):
            freed.add(run_dir)
            run_dir.rmdir()
    detached: list[str] = []
    for run in runs.values():
        control = Path(run.workspace).parent / "control"
        if run.ended_at is not None and control.exists():
            freed.add(control)
            shutil.rmtree(control, ignore_errors=True)
            removed.append(str(control))
        if run.ended_at is not None and os.path.ismount(run.workspace):
            volume.detach(Path(run.workspace).parent, Path(run.workspace), wait_s=0)
            detached.append(run.workspace)
    detached += volume.detach_orphans()
    return {"removed": removed, "bytes_freed": freed.bytes, "volumes_detached": detached}
