"""File hashing and the grader-owned checkpoint copy.

Why copy: the agent can keep writing to output/ after submitting; the grader evaluates a
private copy taken at submission time, and the sha256 of every file is recorded so a score can
be traced to exact bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def tree_hashes(root: Path) -> dict[str, str]:
    """relpath -> sha256 for every regular file under `root` (symlinks followed)."""
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in _files(root)}


def tree_digest(hashes: dict[str, str]) -> str:
    """One sha256 for a whole tree, from its per-file hashes."""
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def data_hash(items: list[dict[str, Any]]) -> str:
    """sha256 of a split's items in canonical JSON (recorded in provenance)."""
    blob = json.dumps(items, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def copy_checkpoint(src: Path, dest: Path) -> dict[str, str]:
    """Copy the files of checkpoint `src` into a new directory `dest`; return relpath -> sha256.

    Symlinks inside the checkpoint are copied as the files they point to (validation has
    already checked the directory). The hashes are computed on the copy, so they describe
    exactly what will be graded. Written to a temporary sibling and renamed, so `dest` is
    either complete or absent.
    """
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for path in _files(src):
            target = tmp / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        tmp.mkdir(parents=True, exist_ok=True)
        hashes = tree_hashes(tmp)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return hashes
