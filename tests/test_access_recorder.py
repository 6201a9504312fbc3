"""The access recorder's parts without a run: its event parsing, how a pid is tied to a job
(real processes), how an event's file is named, its hashes, and how the server reads its
journal into the store. tests/test_access_record.py drives the whole through real runs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.sandbox.recorder import fanotify, ledger, naming, procs
from a2rl.store import JobFile, Run, Store
from a2rl.tools.access_record import Coverage, ingest

from .helpers import wait_for


def test_events_are_parsed_with_their_pidfd() -> None:
    pidfd_info = struct.pack("=BBHi", fanotify.FAN_EVENT_INFO_TYPE_PIDFD, 0, 8, 42)
    first = fanotify.METADATA.pack(fanotify.METADATA.size + len(pidfd_info), 3, 0,
                                   fanotify.METADATA.size, fanotify.FAN_OPEN_PERM, 7, 1234)
    second = fanotify.METADATA.pack(fanotify.METADATA.size, 3, 0, fanotify.METADATA.size,
                                    fanotify.FAN_CLOSE_WRITE, 8, 99)
    events = fanotify.parse(first + pidfd_info + second + b"\x01\x02")  # a torn tail: ignored
    assert [(e.mask, e.fd, e.pid, e.pidfd, e.permission) for e in events] == [
        (fanotify.FAN_OPEN_PERM, 7, 1234, 42, True), (fanotify.FAN_CLOSE_WRITE, 8, 99, -1, False)]
    broken = fanotify.METADATA.pack(4, 3, 0, 4, 0, 0, 0)  # a length the kernel never gives
    assert fanotify.parse(broken) == []


def test_a_wrap_of_the_pid_counter_forgets_every_verdict(tmp_path: Path) -> None:
    counter = procs.PidCounter()
    fake = tmp_path / "ns_last_pid"
    fake.write_text("500\n")
    counter._fd = os.open(fake, os.O_RDONLY)
    assert counter.tick() == counter.generation
    generation = counter.generation
    fake.write_text("900\n")
    assert counter.tick() == generation  # counting up: the same turn
    fake.write_text("300\n")
    assert counter.tick() == generation + 1  # down: it wrapped


_TREE = """
import ctypes, os, signal, sys, time
child = os.fork()
if child == 0:
    ctypes.CDLL(None).prctl(15, b"a2rl-job", 0, 0, 0)  # PR_SET_NAME, as a shim does
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(60)
        os._exit(0)
    os.write(1, b"g %d\\n" % grandchild)  # one write: the parent writes its line meanwhile
    os.waitpid(grandchild, 0)
    os._exit(0)
other = os.fork()  # a child of the supervisor that is no shim
if other == 0:
    time.sleep(60)
    os._exit(0)
os.write(1, b"c %d %d\\n" % (child, other))
time.sleep(60)
"""


def test_a_process_is_its_shims_job_and_a_stranger_is_outside() -> None:
    sup = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    started: list[int] = []
    try:
        assert sup.stdout is not None
        said = dict((line.split()[0], line.split()[1:]) for line in
                    (sup.stdout.readline(), sup.stdout.readline()))  # in either order
        assert set(said) == {"g", "c"}, said
        grandchild = int(said["g"][0])
        shim, other = (int(x) for x in said["c"])
        started += [grandchild, shim, other]
        asked = []
        resolver = procs.Resolver(sup.pid, lambda: asked.append(1) or {shim: "j-1"})
        pidfd = os.pidfd_open(grandchild)
        assert resolver.verdict(grandchild, pidfd) == "j-1"
        assert resolver.verdict(shim, os.pidfd_open(shim)) == "j-1"  # cached: not asked again
        assert len(asked) == 1
        assert resolver.verdict(other, os.pidfd_open(other)) is None  # the run's, no job's
        assert resolver.verdict(sup.pid, os.pidfd_open(sup.pid)) is None  # the supervisor
        assert resolver.verdict(os.getpid(), os.pidfd_open(os.getpid())) == procs.OUTSIDE
        # reaped: its pid's verdict stands while the pid counter has not wrapped
        os.kill(grandchild, signal.SIGKILL)
        assert wait_for(lambda: not Path(f"/proc/{grandchild}").exists())
        assert resolver.verdict(grandchild, -1) == "j-1"
        resolver.counter.generation += 1  # as a wrap does
        resolver._known.clear()
        assert resolver.verdict(grandchild, -1) is None and resolver.unknown == 1
        # a pidfd whose process was reaped meanwhile: /proc may be a stranger's, not read
        assert resolver.verdict(grandchild, pidfd) is None
    finally:
        for pid in started:  # the processes this test made, by their ids
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        sup.kill()
        sup.wait()


def test_names_are_checked_against_the_file(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "output").mkdir(parents=True)
    (root / "base_model").mkdir()
    f = root / "output" / "a.txt"
    f.write_text("a")
    namer = naming.Namer(str(root), ["/workspace"], ["base_model"])
    fd = os.open(f, os.O_RDONLY)
    try:
        assert namer.name(fd, os.fstat(fd)) == "output/a.txt"
        os.rename(f, root / "output" / "b.txt")  # the kernel follows a rename
        assert namer.name(fd, os.fstat(fd)) == "output/b.txt"
        # a name that is another file's now is not this one's
        other = os.open(root / "output" / "b.txt", os.O_RDONLY)
        os.rename(root / "output" / "b.txt", root / "output" / "c.txt")
        (root / "output" / "b.txt").write_text("new")
        assert not namer._is("output/b.txt", os.fstat(other))
        os.close(other)
        (root / "output" / "c.txt").unlink()  # deleted: its last name, where it was shown
        st = os.fstat(fd)
        assert st.st_nlink == 0 and namer.name(fd, st) == "output/c.txt"
    finally:
        os.close(fd)
    assert naming.unnamed(os.stat(root)) == f"{naming.UNNAMED_PREFIX}{os.stat(root).st_ino}"


def test_a_name_longer_than_path_max_is_rebuilt_from_the_folder(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    namer = naming.Namer(str(root), [], [])
    here = os.getcwd()
    top = os.open(root, os.O_RDONLY)
    try:
        os.chdir(root)
        for _ in range(1100):  # 1100 * len("dir/") > PATH_MAX
            os.mkdir("dir")
            os.chdir("dir")
        fd = os.open("f", os.O_WRONLY | os.O_CREAT, 0o600)
        st = os.fstat(fd)
        assert namer.shown(fd) is None  # the kernel cannot print it
        name = namer.deep_name(os.getpid(), st)
        assert name == "dir/" * 1100 + "f"
        assert namer.checked(name, st) == name and namer.checked("dir/f", st) is None
        os.close(fd)
    finally:
        os.chdir(here)
        os.close(top)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_a_hash_is_dropped_when_the_file_changed_before_it_was_read(tmp_path: Path) -> None:
    f = tmp_path / "w"
    f.write_bytes(b"x" * 1000)
    fd = os.open(f, os.O_RDONLY)
    before = os.fstat(fd)
    assert ledger._digest(fd, before) == hashlib.sha256(b"x" * 1000).hexdigest()
    time.sleep(0.01)
    f.write_bytes(b"y" * 1000)  # same size, written after the close being hashed
    assert ledger._digest(fd, before) is None
    os.close(fd)


def test_the_ledger_keeps_one_row_per_job_and_path(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    book = ledger.Ledger(str(journal))
    f = tmp_path / "w"
    f.write_bytes(b"one")
    fd = os.open(f, os.O_RDONLY)
    book.note("j-1", "output/w", False, fd, os.fstat(fd))
    book.note("j-1", "output/w", True, fd, os.fstat(fd))
    book.note(None, "output/w", False, fd, os.fstat(fd))
    os.close(fd)
    assert book.hashes_done(5)
    book.flush()
    book.flush()  # nothing new: no line
    lines = [json.loads(x) for x in journal.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["t"] == "rows"
    rows = {(r[0], r[1]): r for r in lines[0]["rows"]}
    assert rows[("j-1", "output/w")][2:4] == [True, True]
    assert rows[("j-1", "output/w")][6:] == [3, hashlib.sha256(b"one").hexdigest()]
    assert rows[(None, "output/w")][2:4] == [True, False] and rows[(None, "output/w")][7] is None


def test_hashing_costs_the_recorder_what_the_run_wrote_at_most(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sparse file (a 1 GB hole) is not hashed; a close that changed nothing is not hashed
    again; past the hashing budget a write is recorded without its hash, never a wrong one."""
    book = ledger.Ledger(str(tmp_path / "journal.jsonl"))
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(1 << 30)
    fd = os.open(sparse, os.O_RDONLY)
    book.note("j-1", "output/sparse", True, fd, os.fstat(fd))
    os.close(fd)
    dense = tmp_path / "dense"
    dense.write_bytes(b"z" * 4096)
    fd = os.open(dense, os.O_RDONLY)
    book.note("j-1", "output/dense", True, fd, os.fstat(fd))
    tokens = book._tokens
    book.note("j-2", "output/dense", True, fd, os.fstat(fd))  # the same bytes: known
    assert book._tokens == tokens
    monkeypatch.setattr(book, "_tokens", 0.0)
    monkeypatch.setattr(ledger, "HASH_RATE", 0)
    dense.write_bytes(b"q" * 4096)
    book.note("j-3", "output/dense", True, fd, os.fstat(fd))  # over the budget
    os.close(fd)
    assert book.hashes_done(5)
    rows = book.rows
    assert rows[("j-1", "output/sparse")].sha is None and rows[("j-1", "output/sparse")].written
    assert rows[("j-1", "output/dense")].sha == hashlib.sha256(b"z" * 4096).hexdigest()
    assert rows[("j-2", "output/dense")].sha == rows[("j-1", "output/dense")].sha
    assert rows[("j-3", "output/dense")].sha is None


def test_coverage_says_whether_a_job_was_watched_whole() -> None:
    cov = Coverage(spans=[[10.0, 20.0, "the run's supervisor exited", 19.0],
                          [30.0, None, None, 35.0]])
    assert cov.note(11, 19, live=False) == "complete"
    assert cov.note(15, 25, live=False) == (
        "partial: the access recorder ended during the job (the run's supervisor exited)")
    assert cov.note(31, 50, live=True) == "complete"  # the latest answers: watching still
    assert cov.note(31, 50, live=False) == (
        "partial: the access recorder ended during the job (it stopped without a word)")
    assert cov.note(36, 50, live=False) == (
        "none: the access recorder ended before the job (it stopped without a word)")
    assert cov.note(5, 12, live=False) == "partial: the access recorder started after the job"
    assert Coverage(errors=[[1.0, "the server is not root"]]).note(5, 6, live=False) == (
        "none: the server is not root")
    assert Coverage().note(5, 6, live=False) == "none: no access recorder watched this run"


def test_the_journal_is_read_once_into_rows(tmp_path: Path, store: Store) -> None:
    with store.session() as s:
        s.add(Run(id="r-1", workspace=str(tmp_path / "ws"), token_hash="x", budget_s=60,
                  task_id="fixture", backend="local"))
    lines = [
        {"t": "start", "at": 100.0, "pid": 1, "supervisor": 2},
        {"t": "rows", "at": 101.0, "rows": [["j-1", "output/w", False, True, 100.5, 100.5, 3,
                                             None], [None, ".cache/x", True, False, 100.6,
                                                     100.6, None, None]]},
        {"t": "rows", "at": 102.0, "rows": [["j-1", "output/w", True, True, 100.5, 101.5, 3,
                                             "abc"]]},
    ]
    journal = tmp_path / "journal.jsonl"
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"t": "rows", "at"')
    cov = ingest(store, "r-1", tmp_path)
    assert cov.spans == [[100.0, None, None, 102.0]]
    ingest(store, "r-1", tmp_path)  # nothing new: nothing changes
    with store.session() as s:
        rows = {(r.job_id, r.path): r for r in s.exec(select(JobFile)).all()}
    assert set(rows) == {("j-1", "output/w"), (None, ".cache/x")}
    w = rows[("j-1", "output/w")]
    assert (w.read, w.written, w.size, w.sha256) == (True, True, 3, "abc")
    assert w.last_at.timestamp() == pytest.approx(101.5)
    # the torn line, once whole, and a later recorder's row add to the same row
    with open(journal, "a") as f:
        f.write(': 103.0, "rows": []}\n')
        f.write(json.dumps({"t": "end", "at": 104.0, "why": "the run's supervisor exited"}) + "\n")
        f.write(json.dumps({"t": "start", "at": 110.0}) + "\n")
        f.write(json.dumps({"t": "rows", "at": 111.0, "rows": [
            ["j-1", "output/w", True, False, 110.5, 110.5, None, None]]}) + "\n")
    cov = ingest(store, "r-1", tmp_path)
    assert cov.spans == [[100.0, 104.0, "the run's supervisor exited", 103.0],
                         [110.0, None, None, 111.0]]
    with store.session() as s:
        w = s.exec(select(JobFile).where(JobFile.path == "output/w")).one()
    assert (w.read, w.written, w.size, w.sha256) == (True, True, 3, "abc")  # still its write's
    assert w.first_at.timestamp() == pytest.approx(100.5)
    assert w.last_at.timestamp() == pytest.approx(110.5)
