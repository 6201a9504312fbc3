"""Fetch ALFWorld's game files on a user's machine (`a2rl alfworld download`).

Why the package's own downloader: `alfworld-download` (installed with `alfworld`) knows the
release files and unpacks them in the layout `AlfredTWEnv` reads; this only points it at the
folder of the setting `alfworld_dir` (default `$A2RL_HOME/data/alfworld`) and checks that the
three splits arrived. It needs the network once; everything after runs offline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from a2rl.settings import Settings

from .data import JSON_DIR, SPLITS, target_dir


def downloader() -> list[str]:
    """The command of ALFWorld's downloader in this Python environment."""
    script = Path(sys.executable).parent / "alfworld-download"
    if script.is_file():
        return [sys.executable, str(script)]
    found = shutil.which("alfworld-download")
    if found:
        return [found]
    raise RuntimeError("alfworld-download is missing: install the package (pip install "
                       "-c constraints.txt alfworld==0.4.2, or run scripts/setup.sh)")


def missing_splits(folder: Path) -> list[str]:
    """ALFWorld split folders (train, valid_seen, valid_unseen) not under `folder`."""
    return [name for name, _ in SPLITS.values() if not (folder / JSON_DIR / name).is_dir()]


def download(settings: Settings, *, force: bool = False) -> Path:
    """Run `alfworld-download` into the task's folder (skipped when the splits are there);
    the folder. Raises RuntimeError with the reason when it fails."""
    folder = target_dir(settings)
    if not force and not missing_splits(folder):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cmd = downloader() + ["--data-dir", str(folder)] + (["-f", "-ff"] if force else [])
    rc = subprocess.call(cmd, env={**os.environ, "ALFWORLD_DATA": str(folder)})
    missing = missing_splits(folder)
    if rc != 0 or missing:
        raise RuntimeError(f"alfworld-download failed (exit {rc}); missing in {folder}: "
                           f"{', '.join(missing) or 'nothing'}")
    return folder
