"""The revision scan cannot be capped into lying (issue 43): links are passed over without
counting against its cap, and a walk that still stops records that it did (a `scan_stopped`
event), calls nothing it did not see deleted, and looks up the files the jobs wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.store import BudgetEvent, JobFile, Run, Store
from a2rl.tools import revisions
from a2rl.tools.revisions import RevisionScanner


def _scanner(store: Store, ws: Path) -> RevisionScanner:
    with store.session() as s:
        if s.get(Run, "r-scan") is None:
            s.add(Run(id="r-scan", task_id="arith", workspace=str(ws), budget_s=60))
    return RevisionScanner(store, "r-scan", ws, [], 1_000_000)


def test_links_do_not_count_against_the_scans_cap(store: Store, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    (ws / "aaa").mkdir(parents=True)
    (ws / "code").mkdir()
    (ws / "code" / "train.py").write_text("print(1)\n")
    scanner = _scanner(store, ws)
    scanner.scan("initial")
    monkeypatch.setattr(revisions, "SCAN_MAX_ENTRIES", 50)
    for i in range(500):  # a folder that sorts first, full of links
        os.symlink("x", ws / "aaa" / f"l{i:04d}")
    (ws / "code" / "peek.py").write_text("open('/proc/1/environ')\n")
    got = {r.path: r.blob_sha for r in scanner.scan("command")}
    assert list(got) == ["code/peek.py"] and got["code/peek.py"]
    with store.session() as s:
        assert s.exec(select(BudgetEvent).where(BudgetEvent.kind == "scan_stopped")).all() == []


def test_a_stopped_walk_says_so_deletes_nothing_unseen_and_finds_what_jobs_wrote(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    (ws / "aaa").mkdir(parents=True)
    (ws / "zzz").mkdir()
    (ws / "zzz" / "kept.py").write_text("kept\n")
    scanner = _scanner(store, ws)
    scanner.scan("initial")
    monkeypatch.setattr(revisions, "SCAN_MAX_ENTRIES", 50)
    for i in range(100):  # real files this time: they count
        (ws / "aaa" / f"f{i:03d}.txt").write_text(str(i))
    (ws / "zzz" / "new.py").write_text("a job wrote me\n")
    (ws / "zzz" / "unseen.py").write_text("nobody says I exist\n")
    with store.session() as s:
        s.add(JobFile(run_id="r-scan", job_id="j-1", path="zzz/new.py", written=True))
    got = {r.path: r.blob_sha for r in scanner.scan("job", job_id="j-1")}
    assert "zzz/kept.py" not in got  # known, looked up by name: not "deleted"
    assert got.get("zzz/new.py") and "zzz/unseen.py" not in got
    with store.session() as s:
        stops = s.exec(select(BudgetEvent).where(BudgetEvent.kind == "scan_stopped")).all()
    assert [(e.detail["reason"], e.detail["job_id"], e.detail["looked_up"]) for e in stops] == [
        ("entries", "j-1", 2)]
    (ws / "zzz" / "kept.py").unlink()  # really gone: looked up, not found, deleted
    got = {r.path: r.blob_sha for r in scanner.scan("command")}
    assert got == {"zzz/kept.py": None}
