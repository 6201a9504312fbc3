"""The store's tables. Each SQLModel class is both the table and its validated schema.

Times are timezone-aware UTC. JSON columns hold small structured values (arguments, metrics,
provenance); bulky content (file versions, job logs) lives in content-addressed `Blob` rows.
Status columns are plain strings holding the values of the enums in `status.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Dialect, LargeBinary, event
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from .run_config import ROW_FIELDS, RunConfig
from .status import (
    EvaluationKind,
    EvaluationStatus,
    GradeState,
    GradingClock,
    JobState,
    RunStatus,
    SubmissionStatus,
)

SCHEMA_VERSION = 8


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime | None) -> datetime | None:
    """A stored time as UTC-aware: SQLite hands back naive datetimes, and every time we store
    is UTC."""
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def _big() -> Any:
    """A nullable count that may pass 2**31 (bytes of memory, tokens): BIGINT, not
    PostgreSQL's 32-bit INTEGER."""
    return Field(default=None, sa_type=BigInteger)


def _json(default: Any = None) -> Any:
    if callable(default):
        return Field(default_factory=default, sa_column=Column(JSON))
    return Field(default=default, sa_column=Column(JSON))


class RunConfigColumn(TypeDecorator[RunConfig]):
    """`Run.config`: a JSON column read and written as a `RunConfig` (the SQL type is plain
    JSON, as before: no schema change). What any version of a2rl stored loads
    (`RunConfig.from_stored`); a plain dict given to a new row is validated on the way in."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        config = value if isinstance(value, RunConfig) else RunConfig.from_stored(value)
        return config.stored()

    def process_result_value(self, value: Any, dialect: Dialect) -> RunConfig | None:
        return None if value is None else RunConfig.from_stored(value)


class Meta(SQLModel, table=True):
    """Key/value facts about the store itself, such as `schema_version`."""

    key: str = Field(primary_key=True)
    value: str


class Run(SQLModel, table=True):
    id: str = Field(primary_key=True)
    task_id: str = Field(index=True)
    status: str = Field(default=RunStatus.created, index=True)  # a RunStatus
    backend: str = "local"
    protocol: str = "heldout"  # heldout|paper
    workspace: str
    token_hash: str | None = Field(default=None, index=True)
    budget_s: float
    grading_clock: str = GradingClock.counted
    max_submissions: int | None = None
    seed: int | None = None
    agent: str | None = None
    agent_version: str | None = None
    driver_model: str | None = None
    base_model: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None  # the budget clock's start
    deadline: datetime | None = None
    ended_at: datetime | None = None
    end_reason: str | None = None
    baseline_dev: float | None = None
    baseline_test: float | None = None
    final_score: float | None = None
    final_submission_id: str | None = None
    # the run's configuration (`RunConfig`): its knobs, and what `create_run` settled; the
    # fields that are also columns above are the columns' (`_config_matches_row`)
    config: RunConfig = Field(default_factory=RunConfig, sa_column=Column(RunConfigColumn))
    # schema v2: the agent process as the orchestrator saw it
    agent_status: str | None = None  # an AgentStatus
    agent_exit_code: int | None = None
    agent_transcript_sha: str | None = None  # its stdout (a JSONL stream where it emits one)
    agent_stderr_sha: str | None = None
    # schema v3: membership of an `a2rl fleet` (the resume key is fleet, task, agent, driver
    # model and repeat index) and the node that ran it
    fleet_id: str | None = Field(default=None, index=True)
    fleet_repeat: int | None = None
    fleet_node: str | None = None
    # schema v4: the evaluation profile (a2rl.tasks.profiles): a2rl (ours) or paper (the
    # reference harness's evaluation); independent of `protocol`
    profile: str = "a2rl"
    # schema v6: why the run ended, an EndKind, set when it closes (null on rows closed
    # before v6 and on runs still going: `a2rl.store.outcome.end_kind` derives it)
    end_kind: str | None = None
    # schema v6: the process responsible for finalizing the run, `host:pid:start`
    # (a2rl.server.run.owner): a run past its deadline whose owner is gone is finalized
    owner: str | None = None
    # schema v8: what made the run (a RunKind: `agent`, or `replay`, a re-run of another
    # run's recipe without its agent, `a2rl replay`) and, for a replay, the run it re-runs;
    # the agent's last error (an HTTP status, an option error, a turn limit) when it failed
    kind: str = Field(default="agent", index=True,
                      sa_column_kwargs={"server_default": "agent"})
    replay_of: str | None = Field(default=None, index=True)
    agent_error: str | None = None

    def __init__(self, **data: Any) -> None:
        """A new row: its config typed (a dict given loads as stored ones do) and saying what
        its columns say, like a row read back (`_config_matches_row`)."""
        super().__init__(**data)
        self.config = _row_config(self)

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> Run:  # type: ignore[override]
        """A row from a document (an archive's, a copy's): as `__init__` makes one."""
        run = super().model_validate(*args, **kwargs)
        run.config = _row_config(run)
        return run

    @property
    def task_options(self) -> dict[str, Any]:
        """The task's options the run was made with (`a2rl.tasks.options`, resolved; runs
        made before options existed: {}, the defaults then)."""
        return dict(self.config.task_options)

    @property
    def readonly_paths(self) -> list[str] | None:
        """The workspace inputs the run's task declared read-only; None for a run made before
        runs recorded them (`a2rl.layout.LEGACY_READONLY_INPUTS` applies)."""
        paths = self.config.setup.readonly_paths
        return list(paths) if paths is not None else None


def _row_config(run: Run) -> RunConfig:
    """The run's config with the row's own columns laid over it (`ROW_FIELDS`; a null in a
    column the config requires leaves the config's value). Only what the instance holds is
    read (an event must not load attributes); the agent's options do not come along (a dump
    leaves them out), so a row never holds them."""
    held = run.__dict__
    config = held.get("config")
    if not isinstance(config, RunConfig):  # a new row given a dict, or none
        config = RunConfig.from_stored(config)
    row = {k: held[k] for k in ROW_FIELDS
           if k in held and (held[k] is not None or RunConfig.model_fields[k].default is None)}
    return RunConfig.parse(config.model_dump() | row)


@event.listens_for(Run, "load")
def _config_matches_row(run: Run, _context: Any) -> None:
    """A row read back: its config says what its columns say. A row stored before the config
    held these fields (older stores and archives) reads whole; set as committed, so reading
    writes nothing."""
    if "config" in run.__dict__:
        set_committed_value(run, "config", _row_config(run))


@event.listens_for(Run, "refresh")
def _config_matches_refreshed_row(run: Run, _context: Any, _attrs: Any) -> None:
    if "config" in run.__dict__:
        set_committed_value(run, "config", _row_config(run))


@event.listens_for(Run, "before_insert")
@event.listens_for(Run, "before_update")
def _config_from_row(_mapper: Any, _connection: Any, run: Run) -> None:
    """A row written: its stored config says what its columns say (a config not loaded is
    left as stored: read back, the columns are laid over it)."""
    if "config" in run.__dict__:
        run.config = _row_config(run)


class ToolCall(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    tool: str = Field(index=True)
    arguments: dict[str, Any] = _json(dict)
    result_summary: str = ""
    is_error: bool = False
    error: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    duration_ms: float = 0.0
    transport: str | None = None
    # schema v6: the call's number within its run (1, 2, ...), the one shown to people (`id`
    # counts every run's calls in the store); filled at insert, older rows by the migration
    seq: int | None = None
    # schema v8: the sha256 of a Blob holding the whole arguments as JSON, when `arguments`
    # holds a value cut to `recording.tool_arg_keep_bytes` (the sandbox ran the whole one: the
    # audit reads it); None when nothing was cut, or the run's
    # `recording.tool_arg_run_keep_bytes` were used
    arguments_blob: str | None = None


class Blob(SQLModel, table=True):
    """Content-addressed bytes, deduplicated by sha256 of the uncompressed content."""

    sha256: str = Field(primary_key=True)
    size: int
    encoding: str = "zlib"  # zlib|raw
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class Revision(SQLModel, table=True):
    """One change to one workspace file; `blob_sha` is None when the file was deleted.

    `blob_sha` is the sha256 of the file's new content; that content is a `Blob` unless
    `content_stored` is False (the run's `recording.revision_run_max_bytes` were used up: the
    change is recorded by path, size and hash only). `size` is None for rows older than schema
    v5."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    path: str = Field(index=True)
    blob_sha: str | None = None
    size: int | None = None
    content_stored: bool = True
    prev_blob_sha: str | None = None
    source: str = "scan"  # edit_file|command|job|scan
    tool_call_id: int | None = None
    job_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class Snapshot(SQLModel, table=True):
    """The workspace's code at one moment (for instance when a checkpoint was submitted)."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    reason: str = ""
    tool_call_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)


class SnapshotFile(SQLModel, table=True):
    snapshot_id: int = Field(primary_key=True, foreign_key="snapshot.id")
    path: str = Field(primary_key=True)
    blob_sha: str


class Job(SQLModel, table=True):
    id: str = Field(primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    command: str
    state: str = JobState.running
    exit_code: int | None = None
    is_background: bool = False  # True once it outlived run_command's wait
    log_path: str = ""
    log_blob_sha: str | None = None
    log_bytes: int = 0
    tool_call_id: int | None = None
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    # schema v6: why it ended (a JobEndCause), and the evidence for it, one line (who sent
    # the kill, the cgroup's OOM count, the limit reached); null for a row of an older version
    end_cause: str | None = None
    end_evidence: str | None = None
    # schema v7: what the job's processes used (the cost ledger, `a2rl.store.ledger`); null
    # where it was not measured (rows of older versions, a supervisor that never reported).
    # CPU seconds (user and system) of its whole process tree and the peak resident memory of
    # its largest process, from the kernel's accounting of the processes its shim reaped
    cpu_s: float | None = None
    memory_peak_bytes: int | None = _big()
    # GPU seconds (each sample: the run's devices the job had a process on, times the sample's
    # length) and the peak GPU memory its processes held together, sampled through NVML
    # (`a2rl.tools.gpu_usage`); null: not measured (no NVML), 0: never on a GPU
    gpu_s: float | None = None
    gpu_memory_peak_bytes: int | None = _big()
    # schema v8: the code snapshot the job ran with (the workspace's code when it started;
    # checkpoint lineage and `a2rl replay` read it); null for rows of older versions
    snapshot_id: int | None = None
    # schema v8: whether the kernel's record of the workspace files its processes opened
    # (`JobFile` rows) covers the job, set when it settles: "complete" (an access recorder
    # watched it from its start to its end), "partial: <why>" or "none: <why>" (no volume, not
    # root, the recorder died); null for rows of older versions
    files_recorded: str | None = None


class JobFile(SQLModel, table=True):
    """A workspace file a job's processes opened, as the kernel reported it: one row per
    (job, path), whatever the folder, name, size or encoding (schema v8: a new table, made by
    `create_all`). Written from the run's access record (fanotify on the run's own workspace
    filesystem, outside the sandbox); read by checkpoint lineage (which job wrote each
    submitted file) and the audit (what the jobs read). `job_id` None: the kernel saw the
    access but it could not be tied to a job (kept as such, never guessed). Accesses by
    processes outside the sandbox (the server's own reads, a grader's) are not recorded.

    `path` is workspace-relative. One starting with "/" is not a path: `/unnamed/inode/N`,
    an access whose file could not be named (deeper than PATH_MAX and not reached from the
    process's working folder, or deleted once its sandbox was gone); N is its inode. A name
    that is not UTF-8 keeps its bytes as backslash escapes. The rows of a job are complete once
    it settles, for every process of it that ended (leftovers it left running add to them
    later); `Job.files_recorded` says whether a recorder watched it whole."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    job_id: str | None = Field(default=None, index=True)
    path: str  # workspace-relative, as the kernel named the file when it was opened
    read: bool = False  # a process of the job read it (opened it without writing)
    written: bool = False  # a process of the job wrote it (closed it after writing)
    first_at: datetime = Field(default_factory=utcnow)
    last_at: datetime = Field(default_factory=utcnow)
    # the file's size and sha256 when the job last closed it after writing (None: not
    # written, or gone before it could be read)
    size: int | None = _big()
    sha256: str | None = None


class Submission(SQLModel, table=True):
    id: str = Field(primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    path: str
    note: str | None = None
    status: str = SubmissionStatus.queued
    error: str | None = None
    checkpoint_dir: str | None = None  # the grader-owned copy
    file_hashes: dict[str, str] = _json(dict)
    snapshot_id: int | None = None
    l2_distance: float | None = None
    near_copy: bool = False
    tool_call_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    # schema v8: where the checkpoint came from (`a2rl.store.lineage.Lineage`, built when it is
    # submitted): the job that wrote each file, its command and code snapshot, the checkpoint
    # it started from, back to the base model; {} for rows of older versions and refusals
    lineage: dict[str, Any] = _json(dict)


class Evaluation(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, index=True)
    submission_id: str | None = Field(default=None, index=True)
    # an EvaluationKind; stores from before the queue may also hold "final"
    kind: str = EvaluationKind.submission
    split: str  # dev|test
    status: str = EvaluationStatus.done
    score: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    metrics: dict[str, Any] = _json(dict)
    items: list[dict[str, Any]] = _json(list)
    provenance: dict[str, Any] = _json(dict)
    error: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    # schema v8: `a2rl regrade`: the regrade that made this evaluation, and the evaluation
    # that replaced this one as the run's current score (null: current); a replaced
    # evaluation is kept whole
    regrade_id: int | None = None
    superseded_by: int | None = None


class GradeRequest(SQLModel, table=True):
    """The grading queue: one row per (submission, split) to evaluate, claimed with a lease."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    submission_id: str = Field(index=True)
    split: str
    state: str = Field(default=GradeState.queued, index=True)
    lease_owner: str | None = None
    lease_until: datetime | None = None
    attempts: int = 0
    evaluation_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)


class Regrade(SQLModel, table=True):
    """One `a2rl regrade` of a run: its final checkpoint's stored copy and its base model
    scored again on the test split with the grader code of the day (schema v8: a new table).
    Nothing is overwritten: the old evaluations stay, the new ones name this row
    (`Evaluation.regrade_id`). A regrade under the run's frozen evaluation config is
    `current`: its evaluations become the run's scores (the replaced final evaluation names
    its successor, the run points at the new baseline) and `reason` says why; a second
    reading under another profile (`--profile`) is kept beside them, never current."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    created_at: datetime = Field(default_factory=utcnow)
    reason: str = ""
    profile: str = "a2rl"
    current: bool = False
    a2rl_version: str = ""
    grader_version: str = ""
    old_final_id: int | None = None
    new_final_id: int | None = None
    old_baseline_id: int | None = None
    new_baseline_id: int | None = None
    old_final: float | None = None
    new_final: float | None = None
    old_baseline: float | None = None
    new_baseline: float | None = None
    # the items whose verdict changed: [{"evaluation": "final"|"baseline", "id", "old", "new"}]
    changed: list[dict[str, Any]] = _json(list)
    error: str | None = None


class BaselineCache(SQLModel, table=True):
    key: str = Field(primary_key=True)  # task version, base model hash, grader, engine
    split: str = Field(primary_key=True)
    evaluation_id: int


class Audit(SQLModel, table=True):
    """A run's cheating audit (`a2rl.audit`): the flags it raised, as the audit version that
    computed them saw the record. One row per run, replaced when the audit is recomputed.
    `flags` holds `a2rl.audit.Flag` dumps; `high` counts the high-severity ones so a query can
    leave flagged runs out without reading the JSON. (schema v6: a new table, made by
    `create_all` on every store, old ones included.)"""

    run_id: str = Field(primary_key=True, foreign_key="run.id")
    audit_version: int
    computed_at: datetime = Field(default_factory=utcnow)
    high: int = Field(default=0, index=True)
    flags: list[dict[str, Any]] = _json(list)
    checks: dict[str, Any] = _json(dict)  # check name -> what it looked at (counts, n, ...)


class Ledger(SQLModel, table=True):
    """A run's cost ledger (`a2rl.store.ledger`): what its driver model used and cost, what its
    jobs and sandbox used, and its grading time. One row per run, written in parts: the
    driver's by the orchestrator from the agent's transcript (null: unknown, such as a run of
    an agent the user started), the rest when the run is finalized. (Schema v7: a new table,
    made by `create_all`.)"""

    run_id: str = Field(primary_key=True, foreign_key="run.id")
    computed_at: datetime = Field(default_factory=utcnow)
    # the driver model: input tokens (cached ones included), output tokens, the part of the
    # input read from (and written to) the provider's cache, and what they were read from
    input_tokens: int | None = _big()
    output_tokens: int | None = _big()
    cached_tokens: int | None = _big()
    cache_write_tokens: int | None = _big()
    usage_source: str | None = None
    # its cost in USD and how it is known: reported (by the agent), computed (the price
    # table's `prices` for the driver model), unknown; the note says from what
    cost_usd: float | None = None
    cost_basis: str = "unknown"
    cost_note: str | None = None
    # the jobs, from their rows: how many, CPU seconds summed, the largest peak memory, GPU
    # seconds summed and the largest peak GPU memory (null: none was measured)
    jobs: int = 0
    jobs_cpu_s: float | None = None
    jobs_memory_peak_bytes: int | None = _big()
    gpu_s: float | None = None
    gpu_memory_peak_bytes: int | None = _big()
    # the run's sandbox as its cgroup (or container) counted it: every process of its jobs'
    # group, the supervisor's shims included; `sandbox_source` says which counters
    sandbox_cpu_s: float | None = None
    sandbox_memory_peak_bytes: int | None = _big()
    sandbox_source: str | None = None
    # the wall time of the run's own evaluations (its submissions on dev and test)
    grading_s: float = 0.0
    evaluations: int = 0
    # its submissions' checks, refused ones too (v8): how many, and the CPU seconds they took
    # as the kernel counted them (the serving thread's and the validating process's; null:
    # none measured)
    validations: int = 0
    validation_cpu_s: float | None = None


class BudgetEvent(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True, foreign_key="run.id")
    kind: str  # a BudgetEventKind
    at: datetime = Field(default_factory=utcnow)
    detail: dict[str, Any] = _json(dict)


def _defer_foreign_keys() -> None:
    """Check foreign keys at commit, not per statement.

    Why: a session flushes the rows of different tables in an order of SQLAlchemy's choosing
    (the models declare no relationships), so a run and its first budget event added in one
    transaction may reach the database child first. SQLite does not enforce foreign keys by
    default; PostgreSQL does, and with deferred constraints it checks them when the
    transaction commits, where the order no longer matters.
    """
    for table in SQLModel.metadata.tables.values():
        if table.name in _OURS:
            for fk in table.foreign_key_constraints:
                fk.deferrable, fk.initially = True, "DEFERRED"


_OURS = {m.__tablename__ for m in (Meta, Run, ToolCall, Blob, Revision, Snapshot, SnapshotFile,
                                   Job, JobFile, Submission, Evaluation, GradeRequest,
                                   BaselineCache, BudgetEvent, Audit, Ledger, Regrade)}
_defer_foreign_keys()
