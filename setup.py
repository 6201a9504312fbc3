"""The wheel's packages, found rather than listed: every folder with an `__init__.py` under the
top-level folders that pyproject.toml's `[tool.setuptools] package-dir` maps into `a2rl`
(server/ is `a2rl.server`, tasks/arith/ is `a2rl.tasks.arith`, ...).

Why a setup.py: pyproject's `packages.find` names what it finds after the folders it walks
(`server.run`), and cannot map them into `a2rl`; a hand-written list left a new task folder out
of the wheel, silently. Everything else (metadata, the mapping, package data) stays in
pyproject.toml; tests/test_packaging.py builds the wheel and checks every folder is in it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """Each mapped package and every package under its folder."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    found: list[str] = []
    for package, folder in package_dir.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(where=str(ROOT / folder))]
    return sorted(set(found))


setup(packages=packages())
