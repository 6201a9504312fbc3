"""The wheel holds every package and every file beside the code: nothing is left out silently.

Packages are found, not listed (setup.py, from pyproject's package-dir mapping of the top-level
folders into `a2rl`), so a new task folder ships without an edit; this test builds the wheel
as a user's pip would, offline, from a copy of the sources (a build writes `build/` and
`*.egg-info` beside them), and checks that every file under the mapped folders is in it, at
its package's path. Pure Python: a few seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: what never ships: bytecode, and what a build or a tool leaves in a checkout
IGNORED = ("__pycache__", "*.pyc", "*.egg-info", "build", ".*")


def package_dir() -> dict[str, str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return pyproject["tool"]["setuptools"]["package-dir"]


def shipped(folder: Path) -> list[Path]:
    """The files under `folder` a wheel must carry (every one but the ignored)."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part == "__pycache__" or part.startswith(".") or part.endswith(".egg-info")
               for part in rel.parts) or path.suffix == ".pyc" or not path.is_file():
            continue
        out.append(path)
    return out


def test_the_wheel_holds_every_package_folder_and_its_files(tmp_path: Path) -> None:
    mapping = package_dir()
    assert mapping["a2rl.tasks"] == "tasks" and len(mapping) >= 10  # the top-level folders
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in set(mapping.values()):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns(*IGNORED))
    out = tmp_path / "wheel"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("a2rl_bench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    packages, missing = [], []
    for package, folder in mapping.items():
        root = REPO / folder
        for path in shipped(root):
            in_wheel = "/".join([*package.split("."), *path.relative_to(root).parts])
            if in_wheel not in names:
                missing.append(in_wheel)
            if path.name == "__init__.py":
                packages.append(in_wheel)
    assert missing == []
    # every package folder, the nested ones too, and the files beside the code
    assert {"a2rl/tasks/arith/__init__.py", "a2rl/server/run/__init__.py",
            "a2rl/sandbox/__init__.py", "a2rl/analysis/web/__init__.py"} <= set(packages)
    assert {"a2rl/analysis/templates/viewer.js", "a2rl/analysis/report.schema.json",
            "a2rl/clients/reference_scripts/sft.py", "a2rl/tasks/arith/description.md",
            "a2rl/clients/package.json"} <= names
    assert len(packages) >= 20
    # nothing else: a2rl's files and the distribution's metadata
    assert {n.split("/", 1)[0] for n in names} == {"a2rl", wheel.name.split("-py3")[0]
                                                   + ".dist-info"}
