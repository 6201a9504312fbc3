"""Fetch ALFWorld's game files on a user's machine (`a2rl alfworld download`).

Why the package's own downloader: `alfworld-download` (installed with `alfworld`) knows the
release files and unpacks them in the layout `AlfredTWEnv` reads; this only points it at the
folder of the setting `alfworld_dir` (default `$A2RL_HOME/data/alfworld`) and checks that the
three splits arrived. It also fetches the ReAct authors' few-shot examples
(`alfworld_3prompts.json`, at a fixed commit, checked against its sha256) that the `paper`
profile prompts with (`react.py`). It needs the network once; everything after runs offline.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from a2rl.settings import Settings

from .data import JSON_DIR, SPLITS, target_dir
from .react import PROMPTS_FILE, PROMPTS_SHA256, PROMPTS_URL


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
    folder.mkdir(parents=True, exist_ok=True)
    download_react_prompts(folder, force=force)
    if not force and not missing_splits(folder):
        return folder
    cmd = downloader() + ["--data-dir", str(folder)] + (["-f", "-ff"] if force else [])
    rc = subprocess.call(cmd, env={**os.environ, "ALFWORLD_DATA": str(folder)})
    missing = missing_splits(folder)
    if rc != 0 or missing:
        raise RuntimeError(f"alfworld-download failed (exit {rc}); missing in {folder}: "
                           f"{', '.join(missing) or 'nothing'}")
    return folder


def download_react_prompts(folder: Path, *, url: str = PROMPTS_URL,
                           sha256: str = PROMPTS_SHA256, force: bool = False) -> Path:
    """Fetch the ReAct examples into `folder` (skipped when a file with the right hash is
    there); written only when the download's sha256 is `sha256`. RuntimeError otherwise."""
    import httpx

    path = folder / PROMPTS_FILE
    if not force and path.is_file() and \
            hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
        return path
    try:
        resp = httpx.get(url, timeout=60, follow_redirects=True)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise RuntimeError(f"cannot fetch the ReAct examples from {url}: {exc}") from exc
    digest = hashlib.sha256(resp.content).hexdigest()
    if digest != sha256:
        raise RuntimeError(f"the ReAct examples from {url} have sha256 {digest}, not {sha256}")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(resp.content)
    tmp.replace(path)
    return path
