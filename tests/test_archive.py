"""Run archives: a run made through the real server is exported, its workspace deleted, and the
archive imported into another installation, where `a2rl report` and `a2rl compare` give the
same results. Tampered, foreign, newer and duplicate archives are handled as documented."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlmodel import select

from a2rl.analysis import build_report, compare
from a2rl.analysis.archive import ArchiveError, export_run, import_run, read_archive
from a2rl.settings import Settings
from a2rl.store import (
    Evaluation,
    GradeRequest,
    Job,
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Store,
    Submission,
    ToolCall,
)

from .conftest import require_bwrap
from .test_report import _scenario

pytestmark = pytest.mark.timeout(600)
A2RL = str(Path(sys.executable).parent / "a2rl")


def _a2rl(home: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(home), A2RL_DB_URL=db)
    return subprocess.run([A2RL, *args], env=env, capture_output=True, text=True, timeout=120)


def _normalized(doc: dict[str, Any]) -> dict[str, Any]:
    """A report without what legitimately differs between installations: the time it was
    computed and the store-assigned integer ids (replaced by their rank)."""
    doc = json.loads(json.dumps(doc))
    doc.pop("generated_at")
    calls = doc["timeline"]["tool_calls"]
    rank = {c["id"]: i for i, c in enumerate(sorted(calls, key=lambda c: c["id"]))}
    for c in calls:
        c["id"] = rank[c["id"]]
    # Evidence names the call it rests on by the same store id: by its rank too, so that a
    # remapped id must still point at the same call.
    for item in doc["failures"] + doc["routes"]:
        for ev in item.get("evidence", []):
            if ev.get("call_id") is not None:
                ev["call_id"] = rank[ev["call_id"]]
    snaps = sorted({c["snapshot_id"] for c in doc["code_history"] if c["snapshot_id"]})
    for c in doc["code_history"]:
        c["snapshot_id"] = snaps.index(c["snapshot_id"]) if c["snapshot_id"] else None
    return doc


def _add_graded_submission(store: Store, run_id: str) -> None:
    """The rows a graded submission leaves (snapshot, submission, evaluation, grading request).

    The real server writes them only after about 30 s of grading a trained checkpoint, too slow
    for this test; the rest of the run (tool calls, revisions, a job and its log, budget events,
    the baseline evaluations) comes from the real server.
    """
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.ended_at is not None
        rev = s.exec(select(Revision).where(Revision.run_id == run_id,
                                            Revision.path == "code/train.py")).first()
        call = s.exec(select(ToolCall).where(ToolCall.run_id == run_id)
                      .order_by(ToolCall.id.desc())).first()  # type: ignore[union-attr]
        assert rev is not None and rev.blob_sha and call is not None
        snap = Snapshot(run_id=run_id, reason="submission s-0archive", tool_call_id=call.id,
                        created_at=run.ended_at)
        s.add(snap)
        s.flush()
        assert snap.id is not None
        s.add(SnapshotFile(snapshot_id=snap.id, path="code/train.py", blob_sha=rev.blob_sha))
        # as the real scanner's snapshot: the task's own files, untouched, are in it too
        for initial in s.exec(select(Revision).where(Revision.run_id == run_id,
                                                     Revision.source == "initial")).all():
            if initial.blob_sha and initial.path != "code/train.py":
                s.add(SnapshotFile(snapshot_id=snap.id, path=initial.path,
                                   blob_sha=initial.blob_sha))
        s.add(Submission(id="s-0archive", run_id=run_id, path="output/ck", status="graded",
                         snapshot_id=snap.id, tool_call_id=call.id, created_at=run.ended_at,
                         file_hashes={"model.safetensors": "0" * 64}))
        ev = Evaluation(run_id=run_id, submission_id="s-0archive", split="dev", score=0.5,
                        ci_low=0.3, ci_high=0.7, n_items=20, started_at=run.ended_at,
                        ended_at=run.ended_at, items=[{"id": "1", "correct": True}])
        s.add(ev)
        s.flush()
        s.add(GradeRequest(run_id=run_id, submission_id="s-0archive", split="dev",
                           state="done", evaluation_id=ev.id))


@pytest.fixture(scope="module")
def exported(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run made through the real server, exported through the CLI; its workspace and
    checkpoints then deleted."""
    require_bwrap()
    tmp = tmp_path_factory.mktemp("archive")
    db = f"sqlite:///{tmp / 'origin.db'}"
    settings = Settings(home=a2rl_home, db_url=db)
    store = Store(db)
    run_id = anyio.run(_scenario, settings, store, "crash")
    _add_graded_submission(store, run_id)
    report = build_report(store, run_id).model_dump(mode="json")
    row = compare(store).rows[0].model_dump()
    store.close()
    archive = tmp / "out" / "run.tar.gz"
    p = _a2rl(a2rl_home, db, "export", run_id, "--out", str(archive), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["path"] == str(archive)
    for folder in (settings.runs_dir / run_id, settings.home_dir / "checkpoints" / run_id):
        shutil.rmtree(folder, ignore_errors=True)
    return {"run_id": run_id, "archive": archive, "report": report, "row": row, "tmp": tmp,
            "db": db}


def test_manifest_lists_every_member_with_its_hash(exported: dict[str, Any]) -> None:
    manifest, members = read_archive(exported["archive"])
    assert manifest.run_id == exported["run_id"] and manifest.format_version == 1
    assert set(members) == set(manifest.members)
    assert {"report.json", "report.md", "rows/run.jsonl", "rows/toolcall.jsonl"} <= set(members)
    c = manifest.counts
    assert c["run"] == 1 and c["submission"] == 1 and c["snapshot"] >= 1 and c["blob"] >= 2
    assert c["evaluation"] == 3 and c["graderequest"] == 1  # the submission's, 2 baselines
    assert c["job"] >= 1 and c["revision"] >= 1 and c["budgetevent"] >= 1
    assert json.loads(members["rows/run.jsonl"])["token_hash"] is None
    archived = json.loads(members["report.json"])
    assert _normalized(archived) == _normalized(exported["report"])


def test_import_elsewhere_reports_the_same(exported: dict[str, Any]) -> None:
    """Another home and store, the original workspace gone: report and compare still work."""
    home = exported["tmp"] / "elsewhere"
    db = f"sqlite:///{home / 'a2rl.db'}"
    home.mkdir()
    # The target already has a run, so the archive's integer ids collide and must be remapped.
    with _Seeded(db) as seeded:
        seeded.add_run("r-local")
    run_id = exported["run_id"]
    p = _a2rl(home, db, "import", str(exported["archive"]))
    assert p.returncode == 0, p.stderr
    assert "imported" in p.stdout
    p = _a2rl(home, db, "report", run_id, "--format", "json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert _normalized(rep) == _normalized(exported["report"])
    # What needed blobs and the baseline's rows came over: a traceback from the job's log,
    # the code diff from the snapshot, the improvement's interval from the baseline's n.
    assert any(f["type"] == "runtime_error" and f["evidence"][0]["kind"] == "log"
               for f in rep["failures"]), rep["failures"]
    assert "+print(batch[\"labels\"])" in rep["code_history"][0]["changes"][0]["diff"]
    assert rep["trajectory"]["points"]
    s = rep["summary"]  # no final submission: no improvement, and why (report schema 1.4)
    assert s["improvement"] is not None if s["final_submission_id"] else (
        s["improvement"] is None and s["improvement_note"].startswith("no improvement: "))
    p = _a2rl(home, db, "compare", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["run_id"]: r for r in json.loads(p.stdout)["rows"]}
    # The command line adds "task_id" to every row (the library's rows name it "task").
    assert rows[run_id] == {"task_id": exported["row"]["task"], **exported["row"]}
    store = Store(db)
    with store.session() as s:  # references point at the run's own rows
        sub = s.exec(select(Submission).where(Submission.run_id == run_id)).one()
        snap = s.get(Snapshot, sub.snapshot_id)
        assert snap is not None and snap.run_id == run_id
        for job in s.exec(select(Job).where(Job.run_id == run_id)).all():
            call = s.get(ToolCall, job.tool_call_id)
            assert call is not None and call.run_id == run_id and call.tool == "run_command"
    # Importing again is a no-op.
    again = import_run(store, exported["archive"])
    assert not again.imported and "already present" in again.detail
    store.close()
    p = _a2rl(home, db, "import", str(exported["archive"]))
    assert p.returncode == 0 and "already present" in p.stdout, p.stderr


class _Seeded:
    """A store holding one unrelated run with a few tool calls and a snapshot."""

    def __init__(self, db: str) -> None:
        self.store = Store(db)

    def add_run(self, run_id: str, task: str = "arith") -> None:
        with self.store.session() as s:
            s.add(Run(id=run_id, task_id=task, workspace="/elsewhere", budget_s=60,
                      status="finished"))
            s.add_all(ToolCall(run_id=run_id, tool="read_file") for _ in range(5))
            s.add(Snapshot(run_id=run_id))

    def __enter__(self) -> _Seeded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def _rewrite(src: Path, dst: Path, change: dict[str, bytes]) -> Path:
    with tarfile.open(src, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    members |= change
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dst


def test_bad_archives_are_refused(exported: dict[str, Any]) -> None:
    tmp, src = exported["tmp"], exported["archive"]
    manifest, members = read_archive(src)
    blob = next(n for n in members if n.startswith("blobs/"))
    tampered = _rewrite(src, tmp / "tampered.tar.gz", {blob: members[blob] + b"# evil\n"})
    newer = manifest.model_dump() | {"format_version": 99, "a2rl_version": "9.0"}
    future = _rewrite(src, tmp / "future.tar.gz",
                      {"manifest.json": json.dumps(newer).encode()})
    junk = tmp / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    store = Store(f"sqlite:///{tmp / 'refuse.db'}")
    for path, says in ((tampered, "does not match its sha256"), (future, "newer a2rl"),
                       (junk, "not a readable")):
        with pytest.raises(ArchiveError, match=says):
            import_run(store, path)
    with store.session() as s:
        assert s.exec(select(Run)).all() == []  # nothing was written
    store.close()
    home = tmp / "cli-refuse"
    home.mkdir()
    p = _a2rl(home, f"sqlite:///{home / 'a2rl.db'}", "import", str(tampered))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "sha256" in p.stderr


def test_a_different_run_under_the_same_id_is_refused(exported: dict[str, Any]) -> None:
    db = f"sqlite:///{exported['tmp'] / 'clash.db'}"
    with _Seeded(db) as seeded:
        seeded.add_run(exported["run_id"], task="gsm8k")
        with pytest.raises(ArchiveError, match="different run"):
            import_run(seeded.store, exported["archive"])


def test_export_refuses_missing_and_unfinished_runs(exported: dict[str, Any]) -> None:
    tmp = exported["tmp"]
    db = f"sqlite:///{tmp / 'live.db'}"
    store = Store(db)
    with store.session() as s:
        s.add(Run(id="r-live", task_id="arith", workspace="/w", budget_s=60, status="running"))
    with pytest.raises(ArchiveError, match="not finished"):
        export_run(store, "r-live", tmp / "live.tar.gz")
    store.close()
    p = _a2rl(tmp, db, "export", "r-nope", "--out", str(tmp / "nope.tar.gz"))
    assert p.returncode != 0 and p.stderr.strip() == "a2rl: run 'r-nope' does not exist " \
        "(see a2rl runs)"
