"""docs/security.md names, for each wall, the attack tests that prove it: every row names at
least one, and every name is a test that exists (a renamed or removed test fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"
#: `tests/x/test_y.py::test_z`, `test_y.py::test_z` or `::test_z` (the file named last before it)
NAME = re.compile(r"`(?:((?:tests/)?(?:[\w/]+/)?test_\w+\.py))?(?:::(test_\w+))?`")


def boundary_rows() -> list[tuple[str, str]]:
    """(boundary, attack-tests cell) of the Boundaries table."""
    text = DOC.read_text()
    table = text.split("## Boundaries", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0] not in ("Boundary", "---"):
            rows.append((cells[0], cells[3]))
    return rows


def resolve(name: str) -> Path:
    """A file named in the doc, short names looked up under tests/ and tests/security/."""
    for candidate in (ROOT / name, ROOT / "tests" / name, ROOT / "tests" / "security" / name):
        if candidate.is_file():
            return candidate
    raise AssertionError(f"docs/security.md names {name}, which does not exist")


def test_every_boundary_names_tests_that_exist() -> None:
    rows = boundary_rows()
    assert len(rows) >= 15
    for boundary, cell in rows:
        current: Path | None = None
        named = 0
        for file, test in NAME.findall(cell):
            if file:
                current = resolve(file)
            if test:
                assert current is not None, f"{boundary}: ::{test} follows no file"
                source = current.read_text()
                assert re.search(rf"^(async )?def {test}\(", source, re.M), (
                    f"{boundary}: {current.name}::{test} does not exist")
                named += 1
        assert named, f"the row {boundary!r} names no test"
