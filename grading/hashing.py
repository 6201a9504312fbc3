"""File hashing: of a checkpoint's files, of a whole tree, of a split's items.

The grader hashes only what it owns: a submission's files are hashed as they are copied out
of the workspace (`a2rl.tools.checkpoint_copy`), the base model and the data here.
"""

from __future__ import annotations

import hashlib
import json
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
