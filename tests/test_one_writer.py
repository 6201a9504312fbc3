"""One writer per table: only a table's owning module (`a2rl.store.records.WRITERS`) makes,
changes or deletes its rows.

An AST scan of every module of the package (not tests/, which build stores by hand) for the
ways Python code writes a row:

- constructing a row (`Run(...)`, `Submission(...)`): a row is made to be added;
- setting a column (`run.status = ...`, `row.state, row.exit_code = ...`, `x.attempts += 1`,
  `setattr(run, "deadline", ...)`, a `setattr` with a name only known at run time);
- SQL that writes (`update(GradeRequest)`, `insert(JobFile.__table__)`, a session's
  `delete(row)`, `"UPDATE toolcall SET ..."`).

Which table a column write is of comes from what the module says of the name (an annotation,
`s.get(Run, ...)`, `select(Job)`, `Run(...)`); where it does not say, every table that has a
column of that name is suspected, and the module must own one of them. Modules that never
import the store and name no table (a task's `episode.error`, the supervisor's `job.state`)
hold none of its rows by name, and their attributes of the same names are their own.

The unit tests below drive the record functions where they hold a rule: a transition refused
from a state it may not be made from.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import SQLModel, select

from a2rl.store import (
    Evaluation,
    EvaluationKind,
    GradeRequest,
    GradeState,
    Job,
    JobState,
    Run,
    RunStatus,
    Store,
    Submission,
    SubmissionStatus,
    models,
    utcnow,
)
from a2rl.store.records import WHOLE_RUN_COPIES, WRITERS, evaluations, grade_requests, jobs, runs
from a2rl.store.records import submissions as submission_rows
from a2rl.store.records.evaluations import NewEvaluation
from a2rl.store.records.jobs import JobEnd
from a2rl.store.records.transition import WrongState

from .test_import_graph import PACKAGES, REPO, module_of_file

#: table class name -> table name, for every table of the store
TABLES: dict[str, str] = {
    name: cls.__tablename__ for name, cls in vars(models).items()  # type: ignore[misc]
    if isinstance(cls, type) and issubclass(cls, SQLModel) and cls is not SQLModel
    and getattr(cls, "__tablename__", None) in models._OURS}
#: table name -> its columns
COLUMNS: dict[str, set[str]] = {
    table: set(getattr(models, name).model_fields) for name, table in TABLES.items()}
#: Where the tables are defined and migrated: the schema, not its rows' state.
SCHEMA = {"store/models.py"}
SCHEMA_FOLDERS = ("store/migrations/",)
#: SQL as this project writes it: keywords in capitals, tables by their lowercase names
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(" + "|".join(
    sorted(COLUMNS)) + r")\b")
SQL_FUNCTIONS = {"update", "insert", "delete"}
ROW_QUERIES = {"first", "one", "one_or_none", "all", "scalar_one", "scalar_one_or_none"}


def package_files() -> Iterator[tuple[str, Path]]:
    """Every module of the package, by its path from the repository."""
    for folder in ("a2rl", *PACKAGES.values()):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel not in SCHEMA and not rel.startswith(SCHEMA_FOLDERS):
                yield rel, path


@dataclass(frozen=True)
class Write:
    """One write found: where, of which tables (any of them, when the name does not say),
    and how."""

    rel: str
    line: int
    tables: frozenset[str]
    what: str

    def __str__(self) -> str:
        return f"{self.rel}:{self.line}: {self.what} ({' or '.join(sorted(self.tables))})"


class Scan(ast.NodeVisitor):
    """The writes of one module's source."""

    def __init__(self, rel: str, tree: ast.Module) -> None:
        self.rel, self.writes = rel, list[Write]()
        self.classes: dict[str, str] = {}  # local name -> table, for imported model classes
        self.modules: set[str] = set()  # local names of the store's modules (`store.Run`)
        self.imports_store = False
        module, _ = module_of_file(rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = self._absolute(node, module)
                if base in ("a2rl.store", "a2rl.store.models"):
                    for a in node.names:
                        if a.name in TABLES:
                            self.classes[a.asname or a.name] = TABLES[a.name]
                        elif a.name == "models":
                            self.modules.add(a.asname or a.name)
                if base.startswith("a2rl.store"):
                    self.imports_store = True
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("a2rl.store"):
                        self.imports_store = True
                        self.modules.add(a.asname or a.name)
        self.typed = self._typed_names(tree)
        self.sql_tables = {target.id: table for node in ast.walk(tree)
                           if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                           and node.value.attr == "__table__"
                           and (table := self.table_of_class(node.value))
                           for target in node.targets if isinstance(target, ast.Name)}
        self.visit(tree)

    @staticmethod
    def _absolute(node: ast.ImportFrom, module: str) -> str:
        if not node.level:
            return node.module or ""
        package = module if module.endswith(".__init__") else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def table_of_class(self, node: ast.AST) -> str | None:
        """The table of a model class named by `node` (`Run`, `store.Run`,
        `Run.__table__`)."""
        if isinstance(node, ast.Attribute) and node.attr == "__table__":
            return self.table_of_class(node.value)
        if isinstance(node, ast.Name):
            return self.classes.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr in TABLES and (
                isinstance(node.value, ast.Name) and node.value.id in self.modules
                or ast.unparse(node.value) in self.modules):
            return TABLES[node.attr]
        return None

    def _tables_in(self, node: ast.AST | None) -> set[str]:
        """The tables a value holds rows of, as far as its expression says."""
        if node is None:
            return set()
        found: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                table = self.table_of_class(sub.func)
                if table is not None:  # Run(...)
                    found.add(table)
                elif isinstance(sub.func, ast.Attribute) and sub.func.attr == "get" \
                        and sub.args and (table := self.table_of_class(sub.args[0])):
                    found.add(table)  # s.get(Run, ...)
                elif isinstance(sub.func, ast.Name) and sub.func.id == "select" \
                        and len(sub.args) == 1 and (table := self.table_of_class(sub.args[0])):
                    found.add(table)  # select(Run): its rows
            elif isinstance(sub, (ast.Name, ast.Attribute)) and (
                    table := self.table_of_class(sub)) is not None and not isinstance(
                        getattr(sub, "ctx", None), ast.Store):
                found.add(table)  # an annotation naming the class
        return found

    def _typed_names(self, tree: ast.Module) -> dict[str, set[str]]:
        """Names (`row`, `self.row`) the module binds to rows of a table: annotated, or
        assigned from a row lookup, a constructor or a query of the table, or looped over
        one. Names bound to something else (another class's instance, what a function of
        the module annotated as another type returns, an argument annotated so) are
        `self.others`."""
        typed: dict[str, set[str]] = {}
        self.others: set[str] = set()
        returns = {f.name: f.returns for f in ast.walk(tree)
                   if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        args = {a.arg: a.annotation for a in ast.walk(tree)
                if isinstance(a, ast.arg) and a.annotation is not None}

        def bind(target: ast.AST, tables: set[str]) -> None:
            if tables:
                for name in ast.walk(target):
                    if isinstance(name, (ast.Name, ast.Attribute)):
                        typed.setdefault(ast.unparse(name), set()).update(tables)

        def other(target: ast.AST, value: ast.AST | None, annotation: ast.AST | None) -> None:
            if annotation is None and isinstance(value, ast.Call):
                func = value.func
                called = func.attr if isinstance(func, ast.Attribute) else (
                    func.id if isinstance(func, ast.Name) else "")
                if called[:1].isupper() and self.table_of_class(func) is None:
                    annotation = func  # an instance of another class
                else:
                    annotation = returns.get(called)
            elif annotation is None and isinstance(value, ast.Name):
                annotation = args.get(value.id)
            if annotation is not None and not self._annotated(annotation):
                self.others.add(ast.unparse(target))

        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.annotation is not None:
                bind(ast.Name(node.arg), self._annotated(node.annotation))
                other(ast.Name(node.arg), None, node.annotation)
            elif isinstance(node, ast.AnnAssign):
                bind(node.target, self._annotated(node.annotation) | self._tables_in(node.value))
                other(node.target, None, node.annotation)
            elif isinstance(node, ast.Assign):
                bind(ast.Tuple(node.targets), self._row_value(node.value))
                for target in node.targets:
                    pairs = zip(target.elts, node.value.elts, strict=False) if isinstance(
                        target, ast.Tuple) and isinstance(node.value, ast.Tuple) else \
                        [(target, node.value)]
                    for one, value in pairs:
                        other(one, value, None)
            elif isinstance(node, (ast.For, ast.comprehension)):
                bind(node.target, self._row_value(node.iter))
        return typed

    def _annotated(self, annotation: ast.AST) -> set[str]:
        return {t for sub in ast.walk(annotation) if (t := self.table_of_class(sub))}

    def _row_value(self, value: ast.AST) -> set[str]:
        """The tables of the rows an assigned value holds (not of ids or columns selected)."""
        if isinstance(value, ast.BoolOp):
            return set().union(*(self._row_value(v) for v in value.values))
        if isinstance(value, ast.Call):
            if self.table_of_class(value.func) is not None:
                return self._tables_in(value.func)
            func = value.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and value.args:
                table = self.table_of_class(value.args[0])
                return {table} if table else set()
            if isinstance(func, ast.Attribute) and func.attr in ROW_QUERIES | {"exec"}:
                return self._selected(value)
            if isinstance(func, (ast.Name, ast.Attribute)) and \
                    ast.unparse(func).endswith(("list", "sorted")) and value.args:
                return self._row_value(value.args[0])
        return set()

    def _selected(self, node: ast.AST) -> set[str]:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) \
                    and sub.func.id == "select" and len(sub.args) == 1:
                table = self.table_of_class(sub.args[0])
                return {table} if table else set()
        return set()

    def add(self, node: ast.AST, tables: set[str], what: str) -> None:
        self.writes.append(Write(self.rel, getattr(node, "lineno", 0), frozenset(tables), what))

    def set_column(self, node: ast.AST, target: ast.Attribute) -> None:
        attr = target.attr
        holders = {t for t, cols in COLUMNS.items() if attr in cols}
        if not holders:
            return
        base = target.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls") and target.value is base:
            return  # an object's own attribute
        held = ast.unparse(target.value)
        named = self.typed.get(held, set())
        tables = (named & holders) or holders
        if not named and (held in self.others or not self.imports_store):
            return  # another object, or a module that holds no row by name
        self.add(node, tables, f"sets {ast.unparse(target)}")

    def _targets(self, node: ast.AST) -> Iterator[ast.Attribute]:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                yield sub

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            for attr in self._targets(target):
                self.set_column(node, attr)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        for attr in self._targets(node.target):
            self.set_column(node, attr)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            for attr in self._targets(node.target):
                self.set_column(node, attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        table = self.table_of_class(func)
        if table is not None:
            self.add(node, {table}, f"constructs {ast.unparse(func)}")
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else "")
        if name == "setattr" and len(node.args) >= 2:
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                self.set_column(node, ast.Attribute(node.args[0], key.value, ast.Store()))
            elif self.classes or self.imports_store:
                self.add(node, set(self.classes.values()) or set(COLUMNS),
                         f"sets a column named at run time on {ast.unparse(node.args[0])}")
        if name in SQL_FUNCTIONS and node.args:
            written = self._sql_target(node.args[0])
            if written:
                self.add(node, written, f"{name}s in SQL")
        if isinstance(func, ast.Attribute) and func.attr in SQL_FUNCTIONS and \
                (table := self.table_of_class(func.value)) is not None:
            self.add(node, {table}, f"{func.attr}s in SQL")  # Run.__table__.update()
        if isinstance(func, ast.Attribute) and func.attr == "delete" and len(node.args) == 1 \
                and not isinstance(node.args[0], ast.Constant):
            arg = node.args[0]
            named = self.typed.get(ast.unparse(arg), set())
            if named or self.imports_store:
                self.add(node, named or set(COLUMNS), f"deletes {ast.unparse(arg)}")
        self.generic_visit(node)

    def _sql_target(self, node: ast.AST) -> set[str]:
        table = self.table_of_class(node)
        if table is None and isinstance(node, ast.Name):  # `table = JobFile.__table__`
            table = self.sql_tables.get(node.id)
        return {table} if table else set()

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and (match := SQL_WRITE.search(node.value)):
            self.add(node, {match.group(2).lower()}, f"writes {match.group(0)!r} in SQL")


def writes_of(rel: str, source: str) -> list[Write]:
    return Scan(rel, ast.parse(source)).writes


def wrong_writes(rel: str, source: str) -> list[str]:
    """The writes of a module at `rel` that its module may not make."""
    module, _ = module_of_file(rel)
    if module in WHOLE_RUN_COPIES:
        return []
    return [str(w) for w in writes_of(rel, source)
            if not any(WRITERS.get(t) == module for t in w.tables)]


def test_every_table_has_one_writer_that_exists() -> None:
    assert set(WRITERS) == set(models._OURS)
    for module in set(WRITERS.values()) | set(WHOLE_RUN_COPIES):
        rel = module.replace("a2rl.store", "store").replace(".", "/") + ".py"
        assert (REPO / rel).is_file(), module


def test_only_the_owner_writes_a_table() -> None:
    found: list[str] = []
    owners_write = {m: 0 for m in set(WRITERS.values())}
    for rel, path in package_files():
        source = path.read_text()
        found += wrong_writes(rel, source)
        module, _ = module_of_file(rel)
        if module in owners_write:
            owners_write[module] += len(writes_of(rel, source))
    assert found == []
    assert all(owners_write.values()), owners_write  # the scan sees the owners' own writes


@pytest.mark.parametrize(("source", "expected"), [
    ("from a2rl.store import Run\ndef f(s):\n    run = s.get(Run, 'r')\n    run.status = 'x'\n",
     "sets run.status (run)"),
    ("from a2rl.store import Job, GradeRequest\ndef f(row: Job):\n    row.state = 'x'\n",
     "sets row.state (job)"),
    ("from a2rl.store import Store\ndef f(row):\n    row.state, row.attempts = 'x', 1\n",
     "sets row.attempts (graderequest)"),
    ("from a2rl.store import Submission\ndef f(s):\n"
     "    for sub in s.exec(select(Submission)):\n        sub.error += 'x'\n",
     "sets sub.error (submission)"),
    ("from a2rl.store import models as m\nx = m.Evaluation(split='dev')\n",
     "constructs m.Evaluation (evaluation)"),
    ("from a2rl.store import Run\ndef f(run: Run, k):\n    setattr(run, k, 1)\n",
     "sets a column named at run time on run"),
    ("from a2rl.store import GradeRequest\nfrom sqlalchemy import update\n"
     "q = update(GradeRequest).values(state='x')\n", "updates in SQL (graderequest)"),
    ("import sqlalchemy as sa\nfrom a2rl.store import JobFile\n"
     "sa.insert(JobFile.__table__)\n", "inserts in SQL (jobfile)"),
    ("from a2rl.store import Submission\ndef f(s, row: Submission):\n    s.delete(row)\n",
     "deletes row (submission)"),
    ("def f(c):\n    c.execute('UPDATE submission SET status = 1')\n",
     "writes 'UPDATE submission' in SQL (submission)"),
])
def test_the_scan_sees_each_way_of_writing(source: str, expected: str) -> None:
    """Each way a module could write a row is found (so the rule above can fail)."""
    assert any(str(w).endswith(expected) or expected in str(w)
               for w in writes_of("tools/x.py", source)), writes_of("tools/x.py", source)
    assert wrong_writes("tools/x.py", source)


def test_the_scan_leaves_other_objects_alone() -> None:
    """An object's own attributes, and those of a module that holds no row, are not rows."""
    assert writes_of("tools/x.py", "class A:\n    def f(self):\n        self.status = 1\n") == []
    assert writes_of("tasks/x.py", "def f(ep):\n    ep.error, ep.state = 'x', 1\n") == []
    assert writes_of("tools/x.py", "from a2rl.store import Run\n"
                                   "def f(run: Run, d: dict):\n    d.update(run.id)\n") == []


# -- the record functions' rules -------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path) -> Iterator[tuple[Store, Run]]:
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    made = runs.create(store, id="r-1", task_id="arith", workspace=str(tmp_path / "ws"),
                       budget_s=60.0)
    yield store, made
    store.close()


def _submission(store: Store, run_id: str, sub_id: str = "s-1") -> Submission:
    return submission_rows.reserve(store, id=sub_id, run_id=run_id, path="output/a",
                                   note=None, tool_call_id=None, max_submissions=3,
                                   max_pending=2)


def test_a_submission_leaves_validating_once(run: tuple[Store, Run]) -> None:
    store, made = run
    _submission(store, made.id)
    submission_rows.accept(store, "s-1", checkpoint_dir="/c", file_hashes={"a": "1"},
                           l2_distance=0.1, near_copy=False, snapshot_id=None, lineage={})
    with pytest.raises(WrongState, match="cannot become refused from queued"):
        submission_rows.refuse(store, "s-1", "too late")
    with pytest.raises(WrongState):
        submission_rows.drop(store, "s-1")
    with pytest.raises(WrongState):
        submission_rows.accept(store, "s-1", checkpoint_dir="/d", file_hashes={},
                               l2_distance=None, near_copy=False, snapshot_id=None, lineage={})
    with store.session() as s:
        row = s.get(Submission, "s-1")
    assert row is not None and row.status == SubmissionStatus.queued
    assert row.checkpoint_dir == "/c" and row.error is None


def test_reserving_counts_what_the_run_may_have(run: tuple[Store, Run]) -> None:
    """The limit counts every submission but refused ones; the pending cap counts the ones
    being checked or waiting for their grade."""
    store, made = run
    _submission(store, made.id, "s-1")
    _submission(store, made.id, "s-2")
    with pytest.raises(submission_rows.TooManyPending):
        _submission(store, made.id, "s-3")
    submission_rows.refuse(store, "s-1", "not a checkpoint")
    submission_rows.refuse(store, "s-2", "not a checkpoint")
    _submission(store, made.id, "s-3")
    submission_rows.accept(store, "s-3", checkpoint_dir="/c", file_hashes={},
                           l2_distance=None, near_copy=False, snapshot_id=None, lineage={})
    _submission(store, made.id, "s-4")  # the second of two: refused ones do not count
    with pytest.raises(submission_rows.SubmissionLimit):
        submission_rows.reserve(store, id="s-5", run_id=made.id, path="p", note=None,
                                tool_call_id=None, max_submissions=2, max_pending=5)
    with store.session() as s:
        counted = s.exec(select(Submission.id).where(Submission.run_id == made.id)).all()
    assert sorted(counted) == ["s-1", "s-2", "s-3", "s-4"]


def test_a_job_settles_once(run: tuple[Store, Run]) -> None:
    store, made = run
    jobs.open_job(store, id="j-1", run_id=made.id, command="true", log_path="logs/j-1.log",
                  tool_call_id=None, snapshot_id=None)
    end = JobEnd(state=JobState.exited, exit_code=0, ended_at=utcnow(), end_cause="exited",
                 end_evidence="", log_blob_sha=None, log_bytes=0, files_recorded="complete")
    row, wrote = jobs.settle(store, "j-1", end)
    assert wrote and row.state == JobState.exited and row.exit_code == 0
    later = JobEnd(state=JobState.killed, exit_code=None, ended_at=utcnow(),
                   end_cause="job_kill", end_evidence="", log_blob_sha=None, log_bytes=9,
                   files_recorded=None)
    row, wrote = jobs.settle(store, "j-1", later)  # a second look: the first end stays
    assert not wrote and row.state == JobState.exited and row.end_cause == "exited"
    with pytest.raises(ValueError, match="running job"):
        jobs.settle(store, "j-1", JobEnd(**{**end.__dict__, "state": JobState.running}))


def test_a_run_ends_once_and_keeps_its_end(run: tuple[Store, Run]) -> None:
    store, made = run
    started, now = runs.start_clock(store, made.id)
    assert now and started.status == RunStatus.running
    assert runs.start_clock(store, made.id)[1] is False  # one clock
    assert runs.move_deadline(store, made.id, 30) is not None
    closed = runs.close(store, made.id, "agent finished")
    assert closed.status == RunStatus.finished and closed.end_kind is not None
    again = runs.close(store, made.id, "lost", status=RunStatus.failed)
    assert again.status == RunStatus.finished and again.end_reason == "agent finished"
    assert runs.set_status(store, made.id, RunStatus.finalizing) is False
    assert runs.move_deadline(store, made.id, 30) is None  # an ended run's deadline stays
    with pytest.raises(ValueError, match="not agent fields"):
        runs.record_agent(store, made.id, final_score=1.0)


def test_a_lease_is_given_back_only_by_its_holder(run: tuple[Store, Run]) -> None:
    store, made = run
    _submission(store, made.id)
    submission_rows.accept(store, "s-1", checkpoint_dir="/c", file_hashes={},
                           l2_distance=None, near_copy=False, snapshot_id=None, lineage={})
    req_id = grade_requests.enqueue(store, made.id, "s-1", "dev")
    req = grade_requests.claim(store, "me", lease_s=60)
    assert req is not None and req.id == req_id and req.attempts == 1
    assert grade_requests.claim(store, "you", lease_s=60) is None  # leased: not claimable
    with store.session() as s:
        submission_rows.start_grading(s, "s-1")
    assert not grade_requests.give_back(store, req_id, "you")
    assert grade_requests.give_back(store, req_id, "me")
    with store.session() as s:
        back, sub = s.get(GradeRequest, req_id), s.get(Submission, "s-1")
    assert back is not None and back.state == GradeState.queued and back.attempts == 0
    assert sub is not None and sub.status == SubmissionStatus.queued
    again = grade_requests.claim(store, "you", lease_s=60)
    assert again is not None
    ev = grade_requests.finish(store, req_id, NewEvaluation(
        run_id=made.id, submission_id="s-1", kind=EvaluationKind.submission, split="dev",
        started_at=utcnow() - timedelta(seconds=1), ended_at=utcnow(), error="it broke"))
    with store.session() as s:
        done, sub = s.get(GradeRequest, req_id), s.get(Submission, "s-1")
    assert done is not None and done.state == GradeState.failed and done.evaluation_id == ev.id
    assert sub is not None and sub.status == SubmissionStatus.failed and sub.error == "it broke"
    assert ev.status == "failed" and ev.score is None


def test_an_evaluation_is_superseded_once(run: tuple[Store, Run]) -> None:
    store, made = run
    with store.session() as s:
        ids = [evaluations.record(s, NewEvaluation(
            split="test", kind=EvaluationKind.submission, run_id=made.id,
            started_at=utcnow(), ended_at=utcnow())).id for _ in range(3)]
    assert all(isinstance(i, int) for i in ids)
    with store.session() as s:
        evaluations.supersede(s, ids[0], ids[1])  # type: ignore[arg-type]
    with pytest.raises(WrongState, match="superseded"), store.session() as s:
        evaluations.supersede(s, ids[0], ids[2])  # type: ignore[arg-type]
    with store.session() as s:
        first = s.exec(select(Evaluation).where(Evaluation.id == ids[0])).one()
    assert first.superseded_by == ids[1]


def test_job_rows_made_here_are_what_the_tools_read(run: tuple[Store, Run]) -> None:
    """`open_job` makes the row the command tools read back: running, not background."""
    store, made = run
    jobs.open_job(store, id="j-2", run_id=made.id, command="sleep 1", log_path="logs/j-2.log",
                  tool_call_id=None, snapshot_id=3)
    jobs.mark_background(store, "j-2")
    with store.session() as s:
        row = s.get(Job, "j-2")
    assert row is not None and row.state == JobState.running and row.is_background
    assert row.snapshot_id == 3
