"""The reference code's wheels the tests read (never installed): fetched once into a cache
outside the repository, `$A2RL_WHEEL_CACHE` (default `${XDG_CACHE_HOME:-~/.cache}/a2rl/wheels`),
by `make test` (`python -m tests.harness_wheels`).

Tests that check our `paper` profile against the harness's own code and configs take a wheel
with `require_wheel` (its files are read, never imported); so do the export tests, which run
Harbor's own ATIF validator out of its wheel (a subprocess with the wheel on PYTHONPATH: Harbor
requires Python 3.12 and a large dependency tree, its trajectory models only pydantic). A user
without a wheel skips, CI fails.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from a2rl.tasks.opencompass import OPENCOMPASS
from a2rl.tasks.rdagent import RDAGENT
from a2rl.tasks.wheels import Wheel

from .conftest import require


class HarborUnavailable(RuntimeError):
    """Harbor's wheel is not in the cache."""


#: Harbor, whose ATIF validator checks `a2rl export --format atif` (tests/test_export_formats.py)
HARBOR = Wheel(package="harbor", version="0.25.0",
               sha256="51923ac567fc57b03279e93468b105f689628bcac2cd3d541d4e44aa5c0ec309",
               label="Harbor", what="its ATIF trajectory validator", unavailable=HarborUnavailable)
WHEELS: tuple[Wheel, ...] = (OPENCOMPASS, RDAGENT, HARBOR)
#: the Python a wheel declares it needs, when ours is older: pip downloads it only for that
PYTHON_FOR = {"harbor": "3.12"}


def cache_dir() -> Path:
    if os.environ.get("A2RL_WHEEL_CACHE"):
        return Path(os.environ["A2RL_WHEEL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "a2rl" / "wheels"


def cached(wheel: Wheel) -> Path | None:
    """The cached wheel when it is there and is the one the package index serves."""
    path = cache_dir() / wheel.filename
    if not path.is_file():
        return None
    return path if hashlib.sha256(path.read_bytes()).hexdigest() == wheel.sha256 else None


def require_wheel(wheel: Wheel) -> Path:
    path = cached(wheel)
    require(path is not None,
            f"{wheel.filename} is not in {cache_dir()}: run `python -m tests.harness_wheels` "
            "(make test does) with PyPI reachable")
    assert path is not None
    return path


def fetch() -> int:
    """Download the wheels that are missing; 0 when all are there afterwards."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    missing = 0
    for wheel in WHEELS:
        if cached(wheel) is not None:
            continue
        python = PYTHON_FOR.get(wheel.package)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "download",
             f"{wheel.package}=={wheel.version}", "--no-deps", "--only-binary=:all:", "-d",
             str(folder), *(["--python-version", python] if python else [])], check=False)
        if done.returncode != 0 or cached(wheel) is None:
            missing += 1
            print(f"harness_wheels: {wheel.filename} could not be fetched into {folder} "
                  "(offline, or a different file): the tests that read it skip (fail in CI)",
                  file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(fetch())
