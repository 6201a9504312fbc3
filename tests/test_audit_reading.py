"""What the contamination check reads (issue 43): exactly the files the jobs opened, whatever
their folder, name, depth or format, within the read budget; the whole commands, arguments and
logs; and what it could not read, said so. Real store rows and real files; the JobFile rows
are inserted as the kernel's record would write them."""

from __future__ import annotations

import base64
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from a2rl.audit import Severity
from a2rl.audit.contamination import check_contamination
from a2rl.audit.decode import unescape
from a2rl.audit.hidden import HiddenData, HiddenItem, train_file_sha
from a2rl.audit.record import load_record
from a2rl.settings import Settings
from a2rl.store import Evaluation, Job, JobFile, Revision, Run, Store, ToolCall
from a2rl.store.queries import INITIAL_SOURCE

from .conftest import require

#: a code item shaped like HumanEval's: newlines, and a `'\n'` inside its own strings
PROMPT = ('def join_lines(lines: list) -> str:\n    """Join the given lines with newlines, '
          'dropping the empty ones.\n    >>> join_lines(["a", "", "b"])\n    \'a\\nb\'\n    """\n')
SOLUTION = ("    kept = [line for line in lines if line]\n    return '\\n'.join(kept)  "
            "# the kept lines, one per row\n")
OTHER = HiddenItem("test", "HumanEval/99", "def closest_integer(value):\n    '''Create a "
                   "function that takes a value (string) representing a number and returns "
                   "the closest integer to it.'''\n", "    return round(float(value))\n")
ITEM = HiddenItem("test", "HumanEval/90", PROMPT, SOLUTION)
HIDDEN = HiddenData(task_id="humaneval", items=[ITEM, OTHER])
CHAT = json.dumps({"messages": [{"role": "user", "content": PROMPT},
                                {"role": "assistant", "content": SOLUTION}]}) + "\n"


def _run(store: Store, ws: Path, files: list[str] | None = None, *, run_id: str = "r-read",
         **run: object) -> None:
    """A run whose workspace is `ws`; `files`: the JobFile rows of one job (read and
    written), None: no access record (the audit walks the workspace)."""
    with store.session() as s:
        s.add(Run(id=run_id, task_id="humaneval", workspace=str(ws), budget_s=60, **run))
    with store.session() as s:
        for path in files or []:
            s.add(JobFile(run_id=run_id, job_id="j-1", path=path, read=True))


def _check(store: Store, hidden: HiddenData = HIDDEN, run_id: str = "r-read",
           **recording: object):  # type: ignore[no-untyped-def]
    return check_contamination(load_record(store, run_id), hidden=hidden,
                               settings=Settings(recording=recording))  # type: ignore[arg-type]


def _high(result) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [f.evidence.paths for f in result.flags if f.severity == Severity.high]


def test_unescape_keeps_utf8_and_undoes_json_and_python_escapes() -> None:
    raw = json.dumps({"a": "x\n\t\"y\" caf\u00e9 \\d"}).encode()  # ensure_ascii: \u00e9
    assert unescape(raw) == '{"a": "x\n\t"y" café \\d"}'.encode()
    assert unescape("raw é stays".encode()) == "raw é stays".encode()
    assert unescape(b"a trailing backslash \\") == b"a trailing backslash "


def test_a_chat_jsonl_of_code_items_is_matched_after_unescaping(store: Store,
                                                                 tmp_path: Path) -> None:
    """The issue's case: hidden code items with their solutions as chat-format JSON lines,
    where every newline is `\\n`, written under `.cache/` (which the old walk skipped)."""
    ws = tmp_path / "ws"
    (ws / ".cache" / "notes").mkdir(parents=True)
    (ws / ".cache" / "notes" / "he.jsonl").write_text(CHAT * 3)
    _run(store, ws, [".cache/notes/he.jsonl"])
    result = _check(store)
    assert _high(result) == [[".cache/notes/he.jsonl"]], result.flags
    assert result.summary["files"]["source"] == "access record"
    assert "json" in result.summary["files"]["formats"]


def _formats(ws: Path) -> dict[str, bytes]:
    """The leak in every format the field stores training data in, one file each; none
    named for its format."""
    text = CHAT.encode()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w:gz") as t:
        info = tarfile.TarInfo("inner/train.jsonl")
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a/b.jsonl", text)
    npz = io.BytesIO()
    np.savez_compressed(npz, prompts=np.array([PROMPT]), solutions=np.array([SOLUTION]))
    npy = io.BytesIO()
    np.save(npy, np.array([PROMPT + SOLUTION]))
    out = {"gz": gzip.compress(text), "bz": bz2.compress(text), "xz": lzma.compress(text),
           "tgz": tar.getvalue(), "zip": zipped.getvalue(), "npz": npz.getvalue(),
           "npy": npy.getvalue(), "b64": b"blob = '" + base64.b64encode(text) + b"'\n"}
    try:  # the dev extra brings it (through inspect-ai); the audit reads zstd where it is
        import zstandard
        out["zst"] = zstandard.ZstdCompressor().compress(text)
    except ImportError:
        pass
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": [90], "messages": [[{"role": "user", "content": PROMPT},
                                                 {"role": "assistant", "content": SOLUTION}]]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    out["parquet"] = sink.getvalue()
    stream = io.BytesIO()  # as the datasets library caches a dataset: an Arrow stream
    with pa.ipc.new_stream(stream, table.schema) as writer:
        writer.write_table(table)
    out["arrow"] = stream.getvalue()
    from safetensors.numpy import save

    out["st"] = save({"weights": np.zeros(1000, np.float32),
                      "notes": np.frombuffer(text, np.uint8)})
    import torch

    pt = io.BytesIO()
    torch.save({"w": torch.zeros(1000), "text": torch.frombuffer(bytearray(text),
                                                                  dtype=torch.uint8)}, pt)
    out["pt"] = pt.getvalue()
    for name, data in out.items():
        (ws / "blobs" / f"part_{name}.bin").write_bytes(data)
    return out


@pytest.mark.parametrize("name", ["gz", "bz", "xz", "zst", "tgz", "zip", "npz", "npy", "b64",
                                  "parquet", "arrow", "st", "pt"])
def test_every_format_is_decoded_by_its_bytes_not_its_name(name: str, store: Store,
                                                           tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "blobs").mkdir(parents=True)
    require(name in _formats(ws), "zstandard is not installed: pip install -e '.[dev]'")
    rel = f"blobs/part_{name}.bin"
    _run(store, ws, [rel])
    result = _check(store)
    assert _high(result) == [[rel]], (name, result.flags, result.summary["files"])
    assert not [f for f in result.flags if f.severity == Severity.medium], result.flags


def test_numeric_arrays_cost_nothing_and_a_bomb_costs_its_share(store: Store,
                                                                tmp_path: Path) -> None:
    """A checkpoint's float tensors are skipped by their dtype (not read as text); a gzip that
    inflates a thousandfold (512 MB) is cut at its share of the budget and named as not
    read."""
    from safetensors.numpy import save

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "model.safetensors").write_bytes(save({"w": np.ones((1000, 1000), np.float32)}))
    with gzip.open(ws / "zeros.gz", "wb", compresslevel=1) as f:
        block = b"\0" * (32 << 20)
        for _ in range(16):
            f.write(block)
    (ws / "leak.txt").write_text(CHAT.replace("\\n", "\n"))
    _run(store, ws, ["model.safetensors", "zeros.gz", "leak.txt"])
    started = time.monotonic()
    result = _check(store, audit_read_bytes=64 << 20)
    assert time.monotonic() - started < 30
    files = result.summary["files"]
    assert files["numeric_bytes_skipped"] == 4_000_000
    assert _high(result) == [["leak.txt"]]
    unread = [f for f in result.flags if f.severity == Severity.medium]
    assert len(unread) == 1 and unread[0].evidence.paths == ["zeros.gz"], result.flags
    assert result.summary["bytes"] < 70 << 20


def test_exactly_the_files_the_jobs_opened_are_read(store: Store, tmp_path: Path) -> None:
    """With the kernel's record, a file no job opened is not read (it trained nothing), and
    folders the old walk skipped by name (`__pycache__`, `.git`, `base_model` below the top)
    are read when a job opened them."""
    ws = tmp_path / "ws"
    for folder in ("code/__pycache__", "code/.git", "gen/base_model", "idle"):
        (ws / folder).mkdir(parents=True)
    for folder in ("code/__pycache__", "code/.git", "gen/base_model"):
        (ws / folder / "x.pyc").write_text(CHAT)
    (ws / "idle" / "never_opened.jsonl").write_text(CHAT)
    _run(store, ws, ["code/__pycache__/x.pyc", "code/.git/x.pyc", "gen/base_model/x.pyc"])
    result = _check(store)
    assert _high(result) == [["code/.git/x.pyc", "code/__pycache__/x.pyc",
                              "gen/base_model/x.pyc"]]
    assert result.summary["files"]["files"] == 3


def test_a_chain_deeper_than_path_max_is_read_in_both_modes(store: Store,
                                                            tmp_path: Path) -> None:
    """ENAMETOOLONG crashed the check before: a folder chain of 6,000 characters (PATH_MAX is
    4,096) with the leak at its bottom is walked and read, and so is its JobFile path."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY)
    parts = [f"deep-folder-{i:04d}" for i in range(350)]
    for name in parts:
        os.mkdir(name, dir_fd=fd)
        nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    leak = os.open("leak.jsonl", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(leak, CHAT.encode())
    os.close(leak)
    os.close(fd)
    rel = "/".join([*parts, "leak.jsonl"])
    assert len(str(ws / rel)) > 4096
    _run(store, ws, None)
    walked = _check(store)
    assert [len(p[0]) for p in _high(walked)] == [len(rel)]
    assert walked.summary["files"]["source"] == "walk"
    _run(store, ws, [rel], run_id="r-read2")
    recorded = _check(store, run_id="r-read2")
    assert _high(recorded) == [[rel]], recorded.flags


def test_links_gone_files_and_a_missing_workspace_are_said_not_clean(store: Store,
                                                                     tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "x.txt").write_text(CHAT)
    (ws / "via").symlink_to(ws / "real")
    os.mkfifo(ws / "pipe")
    _run(store, ws, ["via/x.txt", "pipe", "deleted.jsonl"])
    result = _check(store)
    by = {f.severity: f for f in result.flags}
    assert set(by) == {Severity.medium, Severity.low}, result.flags
    assert by[Severity.medium].evidence.paths == ["pipe", "via/x.txt"]
    assert "not readable" in by[Severity.medium].finding
    assert by[Severity.low].evidence.paths == ["deleted.jsonl"]
    assert result.summary["complete"] is True
    # the run's workspace no longer mounted (an empty mount point): incomplete, not clean
    empty = tmp_path / "detached"
    empty.mkdir()
    _run(store, empty, ["x.txt"], run_id="r-gone")
    gone = _check(store, run_id="r-gone")
    assert gone.summary["complete"] is False and gone.summary["files"]["source"] == "unavailable"
    assert any("not mounted" in f.finding for f in gone.flags)


def test_the_tasks_unchanged_inputs_are_recognised_by_hash(store: Store,
                                                           tmp_path: Path) -> None:
    """The base model as the grader hashed it, the train file as the task writes it and the
    task's initial files are not read again when unchanged; changed, they are read."""
    ws = tmp_path / "ws"
    (ws / "base_model").mkdir(parents=True)
    (ws / "data").mkdir()
    weights = b"weights " * 1000
    (ws / "base_model" / "model.bin").write_bytes(weights)
    rows = [{"prompt": "1+1", "answer": "2"}]
    (ws / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (ws / "TASK.md").write_text("the task")
    (ws / "code").mkdir()
    (ws / "code" / "train.py").write_text(CHAT)  # an initial file the agent changed
    with store.session() as s:
        ev = Evaluation(kind="baseline", split="test", score=0.25, provenance={
            "task_id": "humaneval", "checkpoint_hashes": {
                "model.bin": hashlib.sha256(weights).hexdigest()}})
        s.add(ev)
    _run(store, ws, ["base_model/model.bin", "data/train.jsonl", "TASK.md", "code/train.py"],
         baseline_test=0.25, config={"readonly_paths": ["base_model", "data"]})
    with store.session() as s:
        for path, text in (("TASK.md", "the task"), ("code/train.py", "print()")):
            s.add(Revision(run_id="r-read", path=path, source=INITIAL_SOURCE,
                           blob_sha=hashlib.sha256(text.encode()).hexdigest(), size=len(text)))
    hidden = HiddenData(task_id="humaneval", items=HIDDEN.items,
                        shipped={"data/train.jsonl": train_file_sha(rows)})
    result = _check(store, hidden)
    files = result.summary["files"]
    assert files["files"] == 1 and _high(result) == [["code/train.py"]]
    assert files["inputs_unchanged_bytes"] == len(weights) + len("the task") + len(
        json.dumps(rows[0]) + "\n")


def test_whole_arguments_commands_and_logs_are_read(store: Store, tmp_path: Path) -> None:
    """The sandbox ran the whole command: past a 64 KB cut (the whole kept as a blob), in a
    job's command, and in the middle of a 12 MB log whose stored blob keeps head and tail."""
    home = tmp_path / "run"
    ws = home / "workspace"
    ws.mkdir(parents=True)
    (ws / "x").write_text("x")
    logs = home / "control" / "joblogs"
    logs.mkdir(parents=True)
    filler = b"step 1 loss 0.5\n" * (6 << 16)
    (logs / "j-log.log").write_bytes(filler + CHAT.encode() + filler)
    _run(store, ws, ["x"])
    padded = {"command": "true; " * 20_000 + "cat > /tmp/x <<'EOF'\n" + CHAT + "EOF"}
    with store.session() as s:
        whole = store.put_blob(json.dumps(padded).encode())
        s.add(ToolCall(run_id="r-read", tool="run_command", arguments_blob=whole, arguments={
            "command": padded["command"][:65536], "_truncated": {"command": {"size": 1}}}))
        s.add(Job(id="j-cmd", run_id="r-read", command="python - <<'EOF'\n" + CHAT + "EOF"))
        s.add(Job(id="j-log", run_id="r-read", command="python train.py",
                  log_path="logs/j-log.log",
                  log_blob_sha=store.put_blob(filler[:1000] + filler[-1000:])))
    result = _check(store)
    ev = next(f.evidence for f in result.flags if f.severity == Severity.high)
    assert ev.tool_calls and ev.jobs == ["j-cmd", "j-log"], result.flags


def test_a_file_that_fakes_a_format_is_read_as_it_is(store: Store, tmp_path: Path) -> None:
    """Bytes that start like a zip, a gzip or an Arrow stream but are none: the decoder's
    failure is noted in the summary and the file is read raw, never left unread."""
    ws = tmp_path / "ws"
    ws.mkdir()
    leak = CHAT.replace("\\n", "\n").encode()
    for name, magic in (("a", b"PK\x03\x04"), ("b", b"\x1f\x8b"), ("c", b"\xff\xff\xff\xff")):
        (ws / name).write_bytes(magic + b"\n" + leak)
    _run(store, ws, ["a", "b", "c"])
    result = _check(store)
    assert _high(result) == [["a", "b", "c"]], result.flags
    assert [f for f in result.flags if f.severity != Severity.high] == []
    assert len(result.summary["files"]["decode_errors"]) == 3


def test_whole_arguments_past_the_runs_allowance_are_named_unchecked(store: Store,
                                                                    tmp_path: Path) -> None:
    """A run keeps whole arguments up to `recording.tool_arg_run_keep_bytes`; a cut call past it
    keeps its cut copy only, and the coverage check names it (refused calls ran nothing)."""
    from a2rl.audit.coverage import check_coverage
    from a2rl.server.recording import end_call, start_call

    _run(store, tmp_path / "none", None)
    big = {"command": "echo " + "x" * 100_000}
    first = start_call(store, "r-read", "run_command", big, "memory", 65_536, None, 150_000)
    second = start_call(store, "r-read", "run_command", big | {"note": "y"}, "memory", 65_536,
                        None, 150_000)
    refused = start_call(store, "r-read", "run_command", big | {"n": 1}, "memory", 65_536,
                         None, 150_000)
    end_call(store, refused, time.perf_counter(), "refused", "refused")
    result = check_coverage(load_record(store, "r-read"))
    with store.session() as s:
        blobs = [s.get(ToolCall, i).arguments_blob for i in (first, second)]  # type: ignore[union-attr]
    assert blobs[0] is not None and blobs[1] is None
    assert [f.evidence.tool_calls for f in result.flags] == [[second]]
    assert "kept only the first bytes" in result.flags[0].finding


def test_an_exported_run_carries_its_whole_arguments(store: Store, tmp_path: Path) -> None:
    from a2rl.store.transfer import dump_run, load_run

    _run(store, tmp_path / "none", None)
    whole = json.dumps({"command": "echo " + "x" * 100_000}).encode()
    with store.session() as s:
        s.add(ToolCall(run_id="r-read", tool="run_command", arguments={"command": "echo x"},
                       arguments_blob=store.put_blob(whole)))
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    load_run(other, dump_run(store, "r-read"))
    call = load_record(other, "r-read").tool_calls[0]
    assert other.get_blob(call.arguments_blob) == whole  # type: ignore[arg-type]


def test_the_issues_chat_jsonl_of_every_hidden_humaneval_problem_is_matched(
        store: Store, tmp_path: Path, settings: Settings) -> None:
    """Issue 43's case with the real items: the 82 hidden test problems with their solutions
    as chat JSON lines (the ordinary SFT format) were matched for well under half; all are."""
    from a2rl.audit.hidden import load_hidden

    hidden = load_hidden(Run(id="probe", task_id="humaneval", workspace=""), settings)
    require(hidden.error is None, f"HumanEval's items cannot be read here: {hidden.error}")
    test = [it for it in hidden.items if it.split == "test"]
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sft.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": it.input},
        {"role": "assistant", "content": it.answer}]}) + "\n" for it in test))
    _run(store, ws, ["sft.jsonl"])
    result = check_contamination(load_record(store, "r-read"), hidden=hidden,
                                 settings=Settings())
    high = [f for f in result.flags if f.severity == Severity.high]
    assert len(test) == 82 and high, result.flags
    assert high[0].finding.startswith("82 of 82 hidden test items")


def test_hidden_items_that_cannot_be_read_leave_the_check_incomplete(store: Store,
                                                                     tmp_path: Path) -> None:
    _run(store, tmp_path / "none", None)
    result = _check(store, HiddenData(task_id="humaneval", error="OSError: no data here"))
    assert result.summary["complete"] is False
    assert [f.severity for f in result.flags] == [Severity.medium]
    assert "could not be read here (OSError: no data here)" in result.flags[0].finding


def test_a_stored_text_that_inflates_is_bounded_too(store: Store, tmp_path: Path) -> None:
    """A revision is at most a megabyte; what it decompresses to is not: it draws on the
    audit's budget like the files, and a cut is named."""
    _run(store, tmp_path / "none", None)
    bomb = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
    with store.session() as s:
        s.add(Revision(run_id="r-read", path="code/x.gz", source="command",
                       blob_sha=store.put_blob(bomb), size=len(bomb)))
    result = _check(store, audit_read_bytes=1 << 20)
    assert result.summary["bytes"] <= (1 << 20) + len(bomb)
    unread = [f for f in result.flags if "not fully read" in f.finding]
    assert unread and unread[0].evidence.paths[0].startswith("revision:"), result.flags


def test_a_job_the_record_did_not_watch_whole_makes_the_audit_walk_everything(
        store: Store, tmp_path: Path) -> None:
    """The access record names one file, but one of the run's jobs was watched only in part
    (its recorder died): the audit cannot trust the record to name every file a job read, so
    it walks the whole workspace and finds the items the record never named."""
    ws = tmp_path / "ws"
    (ws / "code").mkdir(parents=True)
    (ws / "code" / "train.py").write_text("print('train')\n")
    (ws / ".cache").mkdir()
    (ws / ".cache" / "he.jsonl").write_text(CHAT * 3)
    _run(store, ws, ["code/train.py"])
    with store.session() as s:
        s.add(Job(id="j-1", run_id="r-read", command="python code/train.py",
                  files_recorded="partial: the recorder stopped without a word"))
    result = _check(store)
    assert result.summary["files"]["source"] == "walk"
    assert _high(result) == [[".cache/he.jsonl"]], result.flags


def test_a_run_that_only_looks_like_gzip_costs_no_second_read(store: Store,
                                                              tmp_path: Path) -> None:
    """Random bytes in base64 that start like a gzip (the magic, then junk): the failed
    decode is noted, the text around it is still read (a hidden item after it is found), and
    the file is never read a second time past its share of the budget."""
    import base64

    ws = tmp_path / "ws"
    ws.mkdir()
    fake = base64.b64encode(b"\x1f\x8b\x08\x00" + os.urandom(3000)).decode()
    (ws / "filler.txt").write_text(fake + "\n" + CHAT * 3 + "x" * 400_000)
    _run(store, ws, ["filler.txt"])
    result = _check(store, audit_read_bytes=300_000)
    errors = result.summary["files"]["decode_errors"]
    assert any(e.startswith("base64 run as gzip") for e in errors), errors
    assert not any(e.startswith("filler.txt") for e in errors), errors  # no raw second read
    assert _high(result) == [["filler.txt"]], result.flags
    size = (ws / "filler.txt").stat().st_size  # read once, within its share: the rest unread
    assert result.summary["unread_bytes"] == size - 300_000
