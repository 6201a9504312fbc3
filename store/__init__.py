"""The run store: every run, tool call, revision, job, submission and score, in SQL.

See `docs/store.md` for the schema and the first queries an analyst runs.
"""

from .db import Store, StoreError, StoreMissing, StoreVersionError, display_url
from .models import (
    SCHEMA_VERSION,
    Audit,
    BaselineCache,
    Blob,
    BudgetEvent,
    Evaluation,
    GradeRequest,
    Job,
    JobFile,
    Ledger,
    Meta,
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Submission,
    ToolCall,
    aware,
    utcnow,
)
from .run_config import ROW_FIELDS, RunConfig, RunConfigError, RunKnobs, RunSetup
from .status import (
    AgentStatus,
    BudgetEventKind,
    EndKind,
    EvaluationKind,
    EvaluationStatus,
    GradeState,
    GradingClock,
    JobEndCause,
    JobState,
    Profile,
    Protocol,
    RunKind,
    RunStatus,
    SubmissionStatus,
)

__all__ = [
    "SCHEMA_VERSION", "AgentStatus", "Audit", "BaselineCache", "Blob", "BudgetEvent",
    "BudgetEventKind", "EndKind", "ROW_FIELDS", "Profile", "Protocol", "RunConfig",
    "RunConfigError", "RunKnobs", "RunSetup", "Evaluation", "EvaluationKind", "EvaluationStatus",
    "GradeRequest", "GradeState", "GradingClock", "Job", "JobEndCause", "JobFile", "JobState",
    "Ledger", "Meta", "Revision", "Run", "RunKind", "RunStatus", "Snapshot", "SnapshotFile",
    "Store", "StoreError", "StoreMissing", "StoreVersionError", "Submission", "SubmissionStatus",
    "ToolCall", "aware", "display_url", "utcnow",
]
