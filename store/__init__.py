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
    Regrade,
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Submission,
    ToolCall,
    aware,
    utcnow,
)
from .run_config import (
    ROW_FIELDS,
    EvaluationConfig,
    JudgeIdentity,
    RunConfig,
    RunConfigError,
    RunKnobs,
    RunSetup,
)
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
    "ROW_FIELDS", "SCHEMA_VERSION", "AgentStatus", "Audit", "aware", "BaselineCache", "Blob",
    "BudgetEvent", "BudgetEventKind", "display_url", "EndKind", "Evaluation", "EvaluationConfig",
    "EvaluationKind", "EvaluationStatus", "GradeRequest", "GradeState", "GradingClock", "Job",
    "JobEndCause", "JobFile", "JobState", "JudgeIdentity", "Ledger", "Meta", "Profile", "Protocol",
    "Regrade", "Revision", "Run", "RunConfig", "RunConfigError", "RunKind", "RunKnobs", "RunSetup",
    "RunStatus", "Snapshot", "SnapshotFile", "Store", "StoreError", "StoreMissing",
    "StoreVersionError", "Submission", "SubmissionStatus", "ToolCall", "utcnow",
]
