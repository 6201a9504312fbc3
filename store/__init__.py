"""The run store: every run, tool call, revision, job, submission and score, in SQL.

See `docs/store.md` for the schema and the first queries an analyst runs.
"""

from .db import Store, StoreError, StoreMissing, StoreVersionError, display_url
from .models import (
    SCHEMA_VERSION,
    BaselineCache,
    Blob,
    BudgetEvent,
    Evaluation,
    GradeRequest,
    Job,
    Meta,
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Submission,
    ToolCall,
    utcnow,
)

__all__ = [
    "SCHEMA_VERSION", "BaselineCache", "Blob", "BudgetEvent", "Evaluation", "GradeRequest",
    "Job", "Meta", "Revision", "Run", "Snapshot", "SnapshotFile", "Store", "StoreError",
    "StoreMissing", "StoreVersionError", "Submission", "ToolCall", "display_url", "utcnow",
]
