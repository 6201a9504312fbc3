"""The import graph between a2rl's top-level folders: only the allowed edges, and no loop.

Every import counts: at module level, inside a function (deferred) and under TYPE_CHECKING,
and `importlib.import_module("a2rl....")` with a literal name. A deferred import is still a
dependency; hiding a loop inside a function is what this test exists to catch.
"""

from __future__ import annotations

import ast
import graphlib
import sys
import tomllib
from pathlib import Path

import pytest

from a2rl.sandbox.registry import BUILTIN_BACKENDS

REPO = Path(__file__).resolve().parents[1]

#: package name -> its folder: pyproject's package-dir, read rather than copied, so that a new
#: top-level folder is a node of this graph the moment it is a package of the wheel
PACKAGES = {name: folder for name, folder in tomllib.loads(
    (REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()
    if name != "a2rl"}

#: Who may import whom, read downwards; an edge missing here is a layering mistake, and one
#: added must keep the graph free of loops (the test checks that too).
ALLOWED: dict[str, set[str]] = {
    "cli": {"analysis", "fleet", "clients", "server", "audit", "tools", "sandbox", "tasks",
            "grading", "store", "a2rl"},
    "analysis": {"clients", "audit", "tasks", "store", "a2rl"},
    "fleet": {"server", "audit", "store", "a2rl"},
    "clients": {"server", "tools", "sandbox", "tasks", "store", "a2rl"},
    "server": {"tools", "sandbox", "audit", "tasks", "grading", "store", "a2rl"},
    #: the cheating audit reads the record and the tasks' hidden items; the server runs it
    #: when a run finishes, analysis and the CLI show it
    "audit": {"tasks", "grading", "store", "a2rl"},
    "tools": {"sandbox", "grading", "store", "a2rl"},
    #: the sandbox backends, their supervisor and recorder: what runs the agent's commands, for
    #: the tools, the server and the agent's own sandbox alike
    "sandbox": {"store", "a2rl"},
    "tasks": {"grading", "a2rl"},  # grading's seam only (test below)
    "grading": {"store", "a2rl"},
    "store": {"a2rl"},
    "a2rl": set(),
}


def node_of_module(module: str) -> str | None:
    for package, folder in PACKAGES.items():
        if module == package or module.startswith(package + "."):
            return folder
    if module == "a2rl" or module.startswith("a2rl."):
        return "a2rl"
    return None


def node_of_file(rel: str) -> str:
    return rel.split("/", 1)[0]


def module_of_file(rel: str) -> tuple[str, bool]:
    """The dotted name a source file is imported under, and whether it is a package."""
    parts = rel.removesuffix(".py").split("/")
    base = ["a2rl"] if parts[0] == "a2rl" else ["a2rl", parts[0]]
    rest, is_package = parts[1:], parts[-1] == "__init__"
    if is_package:
        rest = rest[:-1]
    return ".".join(base + rest), is_package


def imports_of(path: Path) -> list[str]:
    """Every module `path` imports, absolute, however and wherever it does."""
    return imports_in(ast.parse(path.read_text()), path.relative_to(REPO).as_posix())


def imports_in(tree: ast.AST, rel: str, *, names: bool = False) -> list[str]:
    """Every module the source `tree` of the file at `rel` (from the repository) imports;
    with `names`, also each name imported from a module, as a dotted path."""
    module, is_package = module_of_file(rel)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            found.append(base)
            # `from a2rl import tools` imports the subpackage a2rl.tools; with `names`, every
            # `from x import y` adds x.y too (y may be a module)
            found += [f"{base}.{a.name}" for a in node.names
                      if f"{base}.{a.name}" in PACKAGES or (names and a.name != "*")]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.startswith("a2rl")):
            found.append(node.args[0].value)
    return found


def folder_edges() -> dict[tuple[str, str], set[str]]:
    """(importer, imported) between folders -> the files that make the edge."""
    edges: dict[tuple[str, str], set[str]] = {}
    for top in {"a2rl", *PACKAGES.values()}:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            src = node_of_file(rel)
            for module in imports_of(path):
                dst = node_of_module(module)
                if dst is not None and dst != src:
                    edges.setdefault((src, dst), set()).add(f"{rel} -> {module}")
    return edges


def test_folders_import_only_downwards_and_without_a_loop() -> None:
    graphlib.TopologicalSorter(ALLOWED).prepare()  # CycleError if the rule has a loop
    edges = folder_edges()
    assert ("server", "tools") in edges and ("tools", "store") in edges  # the walk sees them
    wrong = {f"{src} -> {dst}": sorted(files) for (src, dst), files in edges.items()
             if dst not in ALLOWED.get(src, set())}
    assert wrong == {}
    graphlib.TopologicalSorter({src: {d for s, d in edges if s == src}
                                for src, _ in edges}).prepare()


def test_tasks_and_grading_meet_only_at_the_seam() -> None:
    """A task imports grading's seam alone; grading imports no task (its worker builds a run's
    task through the loader the task registry registers in the seam)."""
    edges = folder_edges()
    tasks_to_grading = {e for e in edges.get(("tasks", "grading"), set())
                        if not e.endswith(" -> a2rl.grading.seam")}
    assert tasks_to_grading == set()
    assert edges.get(("grading", "tasks"), set()) == set()


def file_of_module(module: str) -> Path:
    node = node_of_module(module)
    assert node is not None and node != "a2rl", module
    package = next(p for p, folder in PACKAGES.items() if folder == node)
    return REPO / node / (module.removeprefix(package + ".").replace(".", "/") + ".py")


def test_sandbox_backends_are_siblings_the_server_names_none() -> None:
    """A backend imports what every backend shares (base, client, cgroup, ...), never another
    backend, so a fix to one cannot change another; the server reaches a backend only through
    the registry, by the run's backend name, and names none itself."""
    modules = {target.partition(":")[0] for target in BUILTIN_BACKENDS.values()}
    assert len(modules) == len(BUILTIN_BACKENDS) >= 2
    for module in modules:
        imported = set(imports_of(file_of_module(module)))
        assert "a2rl.sandbox.client" in imported, module  # the walk sees its imports
        assert imported & (modules - {module}) == set(), module
    names = set(BUILTIN_BACKENDS) | {"bwrap", "bubblewrap"}
    found = []
    for path in sorted((REPO / "server").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        found += [f"{rel} imports {m}" for m in imports_of(path)
                  if any(m == b or m.startswith(b + ".") for b in modules)]
        found += [f"{rel}:{node.lineno} names {node.value!r}"
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Constant) and node.value in names]
    assert found == []


@pytest.mark.parametrize("program", ["supervisor", "recorder"])
def test_the_supervisor_needs_only_the_standard_library(program: str) -> None:
    """The supervisor runs inside the sandbox with only its own folder shown, and the access
    recorder starts from its folder alone on the host (`python -I`): each of their modules
    imports the standard library and, relatively, its siblings."""
    folder = REPO / "sandbox" / program
    outside = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            outside += [f"{path.name}: {n}" for n in names
                        if n.partition(".")[0] not in sys.stdlib_module_names]
    assert len(list(folder.glob("*.py"))) > 2 and outside == []


def test_architecture_doc_draws_the_allowed_edges() -> None:
    """docs/architecture.md's layer block and folder table say what this test enforces."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    block = doc.split("```\n")[1]
    drawn = {}
    for line in block.splitlines():
        folder, _, targets = line.partition("->")
        drawn[folder.strip()] = set(targets.split())
    assert drawn == ALLOWED
    for package, folder in {**PACKAGES, "a2rl": "a2rl"}.items():
        assert f"| `{folder}/` | `{package}` |" in doc, f"{folder}/ is not in the folder table"
