"""Shared code names no task and no agent: what is particular to one lives in its own module.

Why: knowledge of one task or agent in shared code is knowledge a plugin cannot give (its
interval, its transcript format, its grading) and an edit of shared code for every new one.
Tasks and agents declare what the harness needs (`Task.paired_interval`,
`Task.has_paper_profile`, `TaskSpec.graded_by`, `Connector.parse_transcript`,
`Connector.missing_config`, ...), and shared code asks them.

The check reads the source, as the import-graph test does: in every shared file, a string
literal that is a built-in task id or agent name (or a dotted path into one's module), or an
import of one's module, is a finding. Docstrings and comments are prose and may name them
(an example, a reference to the paper). The names come from the two registries, so a new
built-in is covered without editing this test. Shared code is everything but the task
packages, the connector modules and the two registries that register them.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

from a2rl.clients.registry import BUILTIN_AGENTS
from a2rl.tasks.registry import BUILTIN_TASKS

from .test_import_graph import imports_in

REPO = Path(__file__).resolve().parents[1]
SHARED_FOLDERS = ("a2rl", "analysis", "audit", "cli", "clients", "fleet", "grading", "sandbox",
                  "server", "store", "tasks", "tools")
#: where the names are registered: naming them is their job
REGISTRIES = {"tasks/registry.py", "clients/registry.py"}

#: (file glob, name) -> why it is still there. Each says what would remove it; keep it short.
ALLOWED: dict[tuple[str, str], str] = {
    # not the agent: a field of AlpacaEval's items, among the fields the audit reads answers from
    ("audit/hidden.py", "reference"): "an item field's name, not the agent",
}


def _module(target: str) -> str:
    """The module a registration's `"module:attr"` target lives in."""
    return target.split(":", 1)[0]


NAMES = set(BUILTIN_TASKS) | set(BUILTIN_AGENTS)
#: a task's package (`a2rl.tasks.arith`) and an agent's module (`a2rl.clients.codex`)
MODULES = ({_module(t).rsplit(".", 1)[0] for t in BUILTIN_TASKS.values()}
           | {_module(t) for t in BUILTIN_AGENTS.values()})


def _rel_of_module(module: str) -> str:
    """The source path of a2rl module `module` (a package: its folder, ending in /)."""
    parts = module.split(".")[1:]
    path = REPO.joinpath(*parts)
    return f"{path.relative_to(REPO).as_posix()}/" if path.is_dir() else \
        f"{path.relative_to(REPO).as_posix()}.py"


OWN_FILES = {_rel_of_module(m) for m in MODULES}


def shared_files() -> list[Path]:
    out = []
    for folder in SHARED_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in REGISTRIES or any(rel == own or (own.endswith("/") and rel.startswith(own))
                                        for own in OWN_FILES):
                continue
            out.append(path)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _named(value: str) -> str | None:
    """The task or agent `value` names: equal to one, or a dotted path into one's module."""
    if value in NAMES:
        return value
    return next((m for m in MODULES if value == m or value.startswith((m + ".", m + ":"))),
                None)


def findings(source: str, rel: str) -> list[tuple[int, str]]:
    """(line, name) for each task or agent named in the code of `source`, the file at `rel`."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = [(node.lineno, name) for node in ast.walk(tree)
           if isinstance(node, ast.Constant) and isinstance(node.value, str)
           and id(node) not in docs and (name := _named(node.value)) is not None]
    imported = {name for module in imports_in(tree, rel, names=True)
                if (name := _named(module)) is not None}
    return out + [(0, name) for name in sorted(imported)]


def _allowed(rel: str, name: str) -> bool:
    return any(fnmatch.fnmatch(rel, glob) and name == allowed for glob, allowed in ALLOWED)


def test_the_check_sees_what_it_looks_for() -> None:
    """The check finds literals, module paths and imports, and leaves prose alone."""
    probe = ('"""Prose may say arith."""\n'
             "from a2rl.tasks.alpacaeval.length_control import lc_statistic\n"
             "from ..clients import codex  # a relative import counts too\n"
             "from .web import app  # the gemini-cli viewer\n"
             'PAPER = {"gsm8k", "humaneval"}\n'
             'if agent == "reference":\n    pass\n'
             'TARGET = "a2rl.clients.llm:LlmConnector"\n'
             'OTHER = "arithmetic"\n')
    found = sorted(name for _, name in findings(probe, "analysis/probe.py"))
    assert found == ["a2rl.clients.codex", "a2rl.clients.llm", "a2rl.tasks.alpacaeval",
                     "gsm8k", "humaneval", "reference"]


def test_shared_code_names_no_task_and_no_agent() -> None:
    files = shared_files()
    rels = {p.relative_to(REPO).as_posix() for p in files}
    # the walk reaches the shared code and skips what belongs to one task or agent
    assert {"analysis/improvement.py", "clients/orchestrator.py", "tasks/base.py",
            "audit/gaming.py", "cli/demo.py"} <= rels
    assert not rels & {"clients/codex.py", "tasks/registry.py", "tasks/arith/task.py"}
    wrong = [f"{rel}:{line}: {name}" for path in files
             for rel in [path.relative_to(REPO).as_posix()]
             for line, name in findings(path.read_text(), rel) if not _allowed(rel, name)]
    assert wrong == [], "\n".join(wrong)
