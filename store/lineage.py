"""Checkpoint lineage: where a submitted checkpoint came from, from the kernel's record.

Pure: given the run's jobs, the workspace files each job's processes read and wrote
(`JobFile`, with the sha256 of each file at its last write-close), the run's `edit_file`
calls and the submitted files' hashes, `build_lineage` says which job wrote each submitted
file and walks back from the submitted checkpoint to the base model, one stage per
checkpoint. `lineage_of` (store/lineage_query.py) loads those rows from the store.

Every file is matched by content, not by name: a file renamed, linked or copied since it was
written is still its writer's (`written_as` says under which name); a file whose content no
recorded job wrote is `edited` (an `edit_file` call wrote that path after every recorded
write of it) or `unattributed`, never guessed. A stage is the checkpoint's main writer (the
job that wrote most of its bytes) and how it made it: `trained` (content nobody wrote
before), `copied` (content another job had written first, under another name: `cp -r`),
`edited` (only `edit_file` wrote it). Where it started from comes from what that job read
(kernel): files under output/ an earlier job wrote, the base model; where its command or the
code it named names a checkpoint (`--init output/sft`), that is said too (`named_by_*`),
and used where the kernel's record is missing.
"""

from __future__ import annotations

import bisect
import hashlib
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from a2rl.layout import BASE_MODEL, OUTPUT

LINEAGE_VERSION = 1
MAX_STAGES = 50  # a chain longer than this is cut (and says so)
MAX_LISTED = 20  # paths listed per piece of evidence
#: a workspace path under output/ named in a command or code (`--init output/sft`)
NAMED = re.compile(r"(?<![\w./-])(?:\./)?(" + OUTPUT + r"/[A-Za-z0-9_.\-/]*[A-Za-z0-9_\-])")
#: a code file a command names (`python code/grpo.py`), read for the checkpoints it names
CODE_FILE = re.compile(r"(?<![\w./-])(?:\./)?([A-Za-z0-9_.\-/]+\.(?:py|sh|ya?ml|json|toml|cfg))")
#: what a checkpoint folder holds (one of these written there marks it as one)
CHECKPOINT_FILE = re.compile(r"(^|/)(config\.json|[^/]+\.(safetensors|bin|pt|pth|gguf))$")

How = Literal["trained", "copied", "edited", "unattributed"]
StageHow = Literal["trained", "copied", "edited", "base", "unknown"]


class LineageFile(BaseModel):
    """One submitted file and who wrote its content."""

    path: str = Field(description="its path in the checkpoint")
    sha256: str
    job_id: str | None = Field(description="the job that wrote this content; None: no job")
    how: How
    written_as: str | None = Field(None, description=(
        "the workspace path the job wrote it under, where not the submitted path (renamed, "
        "linked or copied since)"))
    copied_from: str | None = Field(None, description=(
        "how == copied: the path under which another job wrote this content first"))
    tool_call: int | None = Field(None, description="how == edited: the edit_file call (seq)")
    note: str = ""


class StageSource(BaseModel):
    """What a stage's job started from."""

    checkpoint: str | None = Field(description=(
        "an earlier checkpoint folder (output/...), `base_model`, or None: not known"))
    evidence: Literal["read", "named", "copied", "none"] = Field(description=(
        "read: the kernel saw the job read it; named: only its command or code names it; "
        "copied: the job copied its files"))
    read: list[str] = Field(default_factory=list, description="files of it the job read")
    named_by_command: list[str] = Field(default_factory=list)
    named_by_code: list[str] = Field(default_factory=list, description="`file: output/...`")
    other_outputs: list[str] = Field(default_factory=list, description=(
        "other files under output/ that earlier jobs wrote and this job read (data it made)"))


class LineageStage(BaseModel):
    """One checkpoint of the chain and the job that made it."""

    checkpoint: str
    how: StageHow
    job_id: str | None = None
    command: str | None = None
    snapshot_id: int | None = Field(None, description="the code snapshot the job ran with")
    started_at: str | None = None
    ended_at: str | None = None
    files_recorded: str | None = Field(None, description="the job's `Job.files_recorded`")
    source: StageSource | None = None
    other_writers: list[str] = Field(default_factory=list, description=(
        "other jobs that wrote files of this checkpoint"))
    tool_calls: list[int] = Field(default_factory=list, description=(
        "edit_file calls (seq) that wrote files of this checkpoint"))
    file_count: int = Field(0, description="its files (submitted, or as the next stage read "
                            "them)")
    files: dict[str, str] = Field(default_factory=dict, description=(
        "its files (paths within it) and their sha256, as submitted or as the next stage read "
        "them: what a copy kept later is checked against"))
    content_sha256: str | None = Field(None, description=(
        "the checkpoint's content then: sha256 of its `path<TAB>sha256` lines, sorted; None "
        "where a file was not hashed. A folder kept later holds that checkpoint only if its "
        "content hashes the same"))


class Lineage(BaseModel):
    """`Submission.lineage`: the submitted files' writers and the chain of stages, from the
    submitted checkpoint back to the base model."""

    version: int = LINEAGE_VERSION
    checkpoint: str
    complete: bool = Field(description=(
        "every file tied to a job or an edit, the chain reaches the base model, and every job "
        "of it was recorded whole"))
    note: str = ""
    files: list[LineageFile] = Field(default_factory=list)
    stages: list[LineageStage] = Field(default_factory=list)


@dataclass(frozen=True)
class JobInfo:
    id: str
    command: str
    snapshot_id: int | None
    started_at: float
    ended_at: float | None
    files_recorded: str | None


@dataclass(frozen=True)
class Access:
    """A `JobFile` row, times as UNIX seconds."""

    job_id: str | None
    path: str
    read: bool
    written: bool
    first_at: float
    last_at: float
    size: int | None
    sha256: str | None


@dataclass(frozen=True)
class Edit:
    """An `edit_file` call that succeeded: the path it wrote and when."""

    seq: int | None
    path: str
    at: float


@dataclass
class LineageInputs:
    checkpoint: str  # the submitted folder, workspace-relative (output/grpo)
    file_hashes: dict[str, str]  # path in the checkpoint -> sha256 (the stored copy's)
    submitted_at: float
    jobs: dict[str, JobInfo]
    accesses: list[Access]
    edits: list[Edit] = field(default_factory=list)
    #: the text of a file of a code snapshot, (snapshot id, path) -> text or None
    code_text: Callable[[int, str], str | None] = lambda _snapshot, _path: None


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def normalize(path: str) -> str:
    """A workspace path as the record writes it (no ./, no trailing slash)."""
    return posixpath.normpath(path.strip()).lstrip("/") if path.strip() else ""


class _Record:
    """The inputs, indexed: by content, by path (in order of their last close), by job, and
    the folders that hold a checkpoint file (a run writing 100,000 files stays linear)."""

    def __init__(self, inputs: LineageInputs) -> None:
        self.inputs = inputs
        self.writes = sorted((a for a in inputs.accesses if a.written),
                             key=lambda a: (a.last_at, a.first_at))
        self.by_sha: dict[str, list[Access]] = {}
        self.by_path: dict[str, list[Access]] = {}
        self.sizes: dict[str, int] = {}
        self.checkpoint_folders: set[str] = set()
        for w in self.writes:
            self.by_path.setdefault(w.path, []).append(w)
            if w.sha256:
                self.by_sha.setdefault(w.sha256, []).append(w)
                self.sizes[w.sha256] = w.size or 0
            if CHECKPOINT_FILE.search(w.path):
                folder = posixpath.dirname(w.path)
                while folder and folder not in self.checkpoint_folders:
                    self.checkpoint_folders.add(folder)
                    folder = posixpath.dirname(folder)
        self.reads: dict[str | None, list[Access]] = {}
        for a in inputs.accesses:
            if a.read:
                self.reads.setdefault(a.job_id, []).append(a)
        self._read_paths: dict[str | None, set[str]] = {}

    def read_paths(self, job_id: str | None) -> set[str]:
        if job_id not in self._read_paths:
            self._read_paths[job_id] = {a.path for a in self.reads.get(job_id, [])}
        return self._read_paths[job_id]

    def copied_from(self, writer: Access) -> Access | None:
        """Another job's earlier write of the content `writer` wrote under another name: the
        one whose path `writer`'s job read (the kernel saw the copy's source), else the
        earliest; None when no other job wrote it first."""
        earlier = [w for w in self.by_sha.get(writer.sha256 or "", [])
                   if w.job_id != writer.job_id and w.path != writer.path
                   and w.first_at <= writer.first_at]
        if not earlier:
            return None
        read = self.read_paths(writer.job_id)
        return min(earlier, key=lambda w: (w.path not in read, w.first_at))

    def latest_write(self, path: str, before: float) -> Access | None:
        """The write of `path` that closed last before `before`."""
        writes = self.by_path.get(path, [])
        i = bisect.bisect_right([w.last_at for w in writes], before) if len(writes) > 1 else (
            1 if writes and writes[0].last_at <= before else 0)
        return writes[i - 1] if i else None

    def files_at(self, folder: str, before: float) -> dict[str, str | None]:
        """The files under `folder` as the record last saw them written before `before`:
        path -> the sha256 of that write (None: not hashed)."""
        found: dict[str, str | None] = {}
        for path in sorted(p for p in self.by_path if _under(p, folder)):
            w = self.latest_write(path, before)
            if w is not None:
                found[path] = w.sha256
        return found


def _attribute(rec: _Record, path: str, sha: str | None, before: float) -> LineageFile:
    """Who wrote this content of `path` (workspace-relative) before `before`."""
    rel = path
    if sha is None:
        last = rec.latest_write(path, before)
        return LineageFile(path=rel, sha256="", job_id=last.job_id if last else None,
                           how="unattributed" if last is None or last.job_id is None
                           else "trained",
                           note="its content was not hashed (it changed while it was read)")
    candidates = [w for w in rec.by_sha.get(sha, []) if w.last_at <= before]
    last_here = rec.latest_write(path, before)
    edits = [e for e in rec.inputs.edits if e.path == path and e.at <= before
             and (last_here is None or e.at >= last_here.last_at)]
    if candidates:
        same = [w for w in candidates if w.path == path]
        writer = (same or candidates)[-1]
        origin = rec.copied_from(writer)
        how: How = "trained"
        copied_from = None
        if writer.job_id is None:
            how = "unattributed"
        elif origin is not None:
            how, copied_from = "copied", origin.path
        note = "" if writer.job_id else "the kernel saw it written but could not tie it to a job"
        return LineageFile(path=rel, sha256=sha, job_id=writer.job_id, how=how,
                           written_as=None if writer.path == path else writer.path,
                           copied_from=copied_from, note=note)
    if edits:
        return LineageFile(path=rel, sha256=sha, job_id=None, how="edited",
                           tool_call=edits[-1].seq,
                           note="edit_file wrote this path after every recorded job write")
    note = "no recorded write of this content"
    if last_here is not None:
        note += (f"; the last recorded write of this path ({last_here.job_id or 'no job'}) "
                 "held other content")
    return LineageFile(path=rel, sha256=sha, job_id=None, how="unattributed", note=note)


def _checkpoint_of(path: str) -> str:
    return posixpath.dirname(path) or path


def _named(text: str, own: str) -> list[str]:
    found = []
    for m in NAMED.finditer(text):
        name = normalize(m.group(1))
        if name and name != own and not _under(own, name) and name not in found:
            found.append(name)
    return found[:MAX_LISTED]


def _source(rec: _Record, job: JobInfo, own: str) -> StageSource:
    """What job `job` (which made checkpoint `own`) started from."""
    named_command = _named(job.command, own)
    named_code: list[str] = []
    if job.snapshot_id is not None:
        for m in CODE_FILE.finditer(job.command):
            code = normalize(m.group(1))
            text = rec.inputs.code_text(job.snapshot_id, code)
            if text:
                named_code += [f"{code}: {n}" for n in _named(text, own)]
    named_code = list(dict.fromkeys(named_code))[:MAX_LISTED]
    made: dict[str, list[str]] = {}  # folder -> files of it the job read that others wrote
    base: list[str] = []
    for a in rec.reads.get(job.id, []):
        if _under(a.path, BASE_MODEL):
            base.append(a.path)
            continue
        if not _under(a.path, OUTPUT):
            continue
        w = rec.latest_write(a.path, a.first_at)  # what it read: written before its read
        if w is not None and w.job_id != job.id:
            made.setdefault(_checkpoint_of(a.path), []).append(a.path)
    checkpoints = {folder: paths for folder, paths in made.items()
                   if folder in rec.checkpoint_folders}
    named = [n for n in named_command] + [c.split(": ", 1)[1] for c in named_code]
    chosen: str | None = None
    if checkpoints:
        # the folder it read most of; a tie goes to one its command or code names
        chosen = max(checkpoints, key=lambda f: (len(checkpoints[f]), f in named))
    other = sorted(p for folder, paths in made.items() if folder != chosen for p in paths)
    if chosen is not None:
        return StageSource(checkpoint=chosen, evidence="read",
                           read=sorted(checkpoints[chosen])[:MAX_LISTED],
                           named_by_command=named_command, named_by_code=named_code,
                           other_outputs=other[:MAX_LISTED])
    if base:
        return StageSource(checkpoint=BASE_MODEL, evidence="read", read=sorted(base)[:MAX_LISTED],
                           named_by_command=named_command, named_by_code=named_code,
                           other_outputs=other[:MAX_LISTED])
    written_before = [n for n in named if rec.files_at(n, job.started_at)]
    return StageSource(checkpoint=written_before[0] if written_before else None,
                       evidence="named" if written_before else "none",
                       named_by_command=named_command, named_by_code=named_code,
                       other_outputs=other[:MAX_LISTED])


def content_sha256(files: dict[str, str]) -> str:
    """A checkpoint's identity: sha256 of its `path<TAB>sha256` lines (paths within it),
    sorted."""
    text = "".join(f"{path}\t{sha}\n" for path, sha in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _content(checkpoint: str, files: list[LineageFile]) -> str | None:
    if any(not f.sha256 for f in files):
        return None
    return content_sha256({f.path.removeprefix(checkpoint + "/"): f.sha256 for f in files})


def _stage(rec: _Record, checkpoint: str, files: list[LineageFile]) -> LineageStage:
    """The stage that made `checkpoint` from its files' writers."""
    stage = _made_by(rec, checkpoint, files)
    stage.file_count, stage.content_sha256 = len(files), _content(checkpoint, files)
    stage.files = {f.path.removeprefix(checkpoint + "/"): f.sha256 for f in files if f.sha256}
    return stage


def _made_by(rec: _Record, checkpoint: str, files: list[LineageFile]) -> LineageStage:
    weight: dict[str, int] = {}
    sizes = rec.sizes
    for f in files:
        if f.job_id is not None:
            weight[f.job_id] = weight.get(f.job_id, 0) + sizes.get(f.sha256, 0) + 1
    edits = sorted({f.tool_call for f in files if f.how == "edited" and f.tool_call is not None})
    if not weight:
        how: StageHow = "edited" if any(f.how == "edited" for f in files) else "unknown"
        return LineageStage(checkpoint=checkpoint, how=how, tool_calls=edits)
    main = max(weight, key=lambda j: (weight[j], j))
    mine = [f for f in files if f.job_id == main]
    job = rec.inputs.jobs.get(main)
    copied = [f for f in mine if f.how == "copied"]
    how = "copied" if copied and len(copied) == len(mine) else "trained"
    stage = LineageStage(
        checkpoint=checkpoint, how=how, job_id=main, tool_calls=edits,
        other_writers=sorted(j for j in weight if j != main),
        command=job.command if job else None, snapshot_id=job.snapshot_id if job else None,
        started_at=_iso(job.started_at) if job else None,
        ended_at=_iso(job.ended_at) if job else None,
        files_recorded=job.files_recorded if job else None)
    if job is None:
        return stage
    if how == "copied":
        origin = max(copied, key=lambda f: sizes.get(f.sha256, 0))
        folder = _checkpoint_of(origin.copied_from or "")
        source = _source(rec, job, checkpoint)
        stage.source = StageSource(
            checkpoint=folder, evidence="copied",
            read=sorted(a.path for a in rec.reads.get(main, []) if _under(a.path, folder))[
                :MAX_LISTED],
            named_by_command=source.named_by_command, named_by_code=source.named_by_code)
    else:
        stage.source = _source(rec, job, checkpoint)
    return stage


def build_lineage(inputs: LineageInputs) -> Lineage:
    """The lineage of a submitted checkpoint (see the module's doc)."""
    rec = _Record(inputs)
    checkpoint = normalize(inputs.checkpoint)
    files = [_attribute(rec, f"{checkpoint}/{rel}", sha, inputs.submitted_at)
             for rel, sha in sorted(inputs.file_hashes.items())]
    for f in files:
        f.path = f.path.removeprefix(checkpoint + "/")
    lineage = Lineage(checkpoint=checkpoint, complete=False, files=files)
    notes: list[str] = []
    stage_files = [f.model_copy(update={"path": f"{checkpoint}/{f.path}"}) for f in files]
    seen: set[str] = set()
    current: str | None = checkpoint
    while current is not None:
        if len(lineage.stages) >= MAX_STAGES:
            notes.append(f"the chain is cut after {MAX_STAGES} stages")
            break
        if current == BASE_MODEL:
            lineage.stages.append(LineageStage(checkpoint=BASE_MODEL, how="base"))
            break
        stage = _stage(rec, current, stage_files)
        lineage.stages.append(stage)
        if stage.job_id is None or stage.job_id in seen or stage.source is None:
            break
        seen.add(stage.job_id)
        current = stage.source.checkpoint
        if current is None or current == BASE_MODEL:
            continue
        # the source as the job read it: its files' writes before the job's last read of it
        read_at = [a.first_at for a in rec.reads.get(stage.job_id, []) if _under(a.path, current)]
        job = inputs.jobs.get(stage.job_id)
        before = max(read_at) if read_at else (
            job.started_at if job is not None else inputs.submitted_at)
        stage_files = [_attribute(rec, path, sha, before)
                       for path, sha in rec.files_at(current, before).items()]
        if not stage_files:
            notes.append(f"nothing recorded was written under {current} before "
                         f"{stage.job_id} started")
            lineage.stages.append(LineageStage(checkpoint=current, how="unknown"))
            break
    unattributed = [f.path for f in files if f.how == "unattributed"]
    if unattributed:
        notes.append(f"{len(unattributed)} file(s) not tied to a job or an edit: "
                     + ", ".join(unattributed[:5]))
        unrecorded = sorted({j.files_recorded for j in inputs.jobs.values()
                             if j.files_recorded and j.files_recorded != "complete"})
        if unrecorded:
            notes.append(f"file accesses of the run's jobs were not all recorded "
                         f"({unrecorded[0]})")
    partial = sorted({s.job_id for s in lineage.stages
                      if s.job_id and s.files_recorded != "complete"})
    if partial:
        notes.append("not recorded whole: " + ", ".join(partial))
    last = lineage.stages[-1] if lineage.stages else None
    if last is None or last.how != "base":
        notes.append("the chain does not reach the base model")
    lineage.complete = not notes
    lineage.note = "; ".join(notes)
    return lineage
