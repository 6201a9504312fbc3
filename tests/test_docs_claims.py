"""What the README and docs/*.md say that a test can check, checked: the README's tools table
names exactly the tools the server registers, with their parameters and defaults, and every
repository path a doc names (in backticks or as a relative link) exists. A renamed tool, a
changed default or a moved file fails here until the doc says it too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from mcp import Client

from a2rl.server import build_server
from a2rl.settings import Settings
from a2rl.store import Store

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: `name(a, b=1)` in a cell of the tools table
SIGNATURE = re.compile(r"`(\w+)\(([^`]*)\)`")
TICK = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH_SUFFIXES = (".py", ".md", ".toml", ".txt", ".sh")
#: Paths a doc names that are not meant to exist in the repository: examples of a user's own
#: files, or paths made at run time. Empty now; a path belongs here only if it is one of those,
#: never to quiet a doc naming a file that was moved or removed (fix the doc instead).
NOT_IN_REPO: set[str] = set()


def readme_tools() -> dict[str, dict[str, object]]:
    """Each tool the README's "## Tools" table lists: its parameters, with their defaults
    (`...` for a required one)."""
    text = README.read_text()
    assert "\n## Tools\n" in text, "the README has no \"## Tools\" section"
    table = text.split("\n## Tools\n", 1)[1].split("\n## ", 1)[0]
    tools: dict[str, dict[str, object]] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        for name, params in SIGNATURE.findall(first):
            args: dict[str, object] = {}
            for param in filter(None, (p.strip() for p in params.split(","))):
                key, _, default = param.partition("=")
                args[key.strip()] = ast.literal_eval(default.strip()) if default else ...
            tools[name] = args
    return tools


async def served_tools(settings: Settings, store: Store) -> dict[str, dict[str, object]]:
    """The tools the server registers, as an MCP client lists them, with the same shape."""
    server = build_server(settings, store, transport="memory")
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
    return {t.name: {k: v.get("default", ...) for k, v in
                     t.input_schema.get("properties", {}).items()} for t in listed}


@pytest.mark.anyio
async def test_the_readme_tools_table_is_the_servers_tools(settings: Settings,
                                                           store: Store) -> None:
    documented, served = readme_tools(), await served_tools(settings, store)
    assert len(documented) >= 5, "the README's tools table was not found"
    assert not documented.keys() - served.keys(), (
        f"the README lists tools the server does not have: {documented.keys() - served.keys()}")
    assert not served.keys() - documented.keys(), (
        f"the server has tools the README does not list: {served.keys() - documented.keys()}")
    for name, params in documented.items():
        assert params == served[name], (
            f"README: {name}({params}), the server's: {name}({served[name]}) (... = required)")


def named_paths(doc: Path) -> list[str]:
    """The repository paths `doc` names: a backticked word with a `/` or a file suffix whose
    first component is a top-level entry of the repository, and a relative link (resolved
    from the doc's folder, shown from the root). `::test` and `#anchor` tails are dropped."""
    top = {p.name for p in ROOT.iterdir()} - {".git"}
    text = doc.read_text()
    found = []
    for name in TICK.findall(text):
        name = name.split("::")[0]
        if " " in name or ("/" not in name and not name.endswith(PATH_SUFFIXES)):
            continue
        if name.split("/")[0] in top:
            found.append(name)
    for target in LINK.findall(text):
        target = target.split("#")[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # a URL, mailto:, ...
            continue
        resolved = (doc.parent / target).resolve()
        assert resolved == ROOT or ROOT in resolved.parents, (
            f"{doc.name} links to {target}, outside the repository")
        found.append(resolved.relative_to(ROOT).as_posix())
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    names = named_paths(doc)
    # a placeholder (`tasks/<task>/published.py`) stands for any name: it must match one
    patterns = [re.sub(r"<[^>/]+>", "*", n) for n in names]
    missing = [n for n, pat in zip(names, patterns, strict=True) if n not in NOT_IN_REPO and not (
        any(ROOT.glob(pat)) if "*" in pat else (ROOT / pat).exists())]
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_path_check_sees_the_paths() -> None:
    """The check above is not vacuous: it finds the paths the README is known to name."""
    names = named_paths(README)
    assert {"docs/adding-a-task.md", "docker/build-test-image.sh", "constraints.txt"} <= set(names)
