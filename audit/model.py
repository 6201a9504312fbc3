"""What an audit says: flags with a kind, a severity, a one-line finding and their evidence.

Why its own types: the audit is stored with the run (`a2rl.store.Audit`), shown by the CLI,
every report format, the viewer, `compare` and fleet summaries, and read back years later;
one pydantic shape keeps all of them in step, and `audit_version` says which checks made it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Severity(StrEnum):
    """How sure a check is. `high`: the record shows the cheat itself (an exact copy of a hidden
    answer, a graded output that acts on the grader); a run with a high flag standing is not a
    result. `medium`: strong suspicion a person should read. `low`/`info`: context."""

    info = "info"
    low = "low"
    medium = "medium"
    high = "high"


SEVERITY_ORDER = {Severity.info: 0, Severity.low: 1, Severity.medium: 2, Severity.high: 3}


class Evidence(BaseModel):
    """Where in the record a finding is: ids a reader (or the viewer) can open."""

    tool_calls: list[int] = Field(default_factory=list)
    revisions: list[int] = Field(default_factory=list)
    jobs: list[str] = Field(default_factory=list)
    submissions: list[str] = Field(default_factory=list)
    evaluations: list[int] = Field(default_factory=list)
    items: list[str] = Field(default_factory=list)  # hidden item ids, as "split:item_id"
    paths: list[str] = Field(default_factory=list)  # workspace paths
    excerpts: list[str] = Field(default_factory=list)  # short quotes of the agent's own text


class Flag(BaseModel):
    kind: str  # the check that raised it: contamination, hidden_data_reach, model_identity, ...
    severity: Severity
    finding: str  # one line a person can act on
    evidence: Evidence = Field(default_factory=Evidence)


class AuditReport(BaseModel):
    run_id: str
    audit_version: int
    computed_at: datetime
    flags: list[Flag] = Field(default_factory=list)
    #: check name -> what it looked at (items compared, n-gram size, texts read, ...), so that
    #: "no flag" can be told apart from "not checked"
    checks: dict[str, Any] = Field(default_factory=dict)

    @property
    def high(self) -> int:
        return sum(1 for f in self.flags if f.severity == Severity.high)

    @property
    def flagged(self) -> bool:
        """A high-severity flag stands: the run's score is not counted as a result."""
        return self.high > 0

    @property
    def incomplete(self) -> list[str]:
        """The checks that did not look at everything they should have: one that failed
        (an exception), one not available, or one that says it is not complete (what it had
        to read was not there). An incomplete audit is never clean: `a2rl audit` says so and
        exits with status 2 unless a high flag already stands."""
        return [name for name, c in self.checks.items() if isinstance(c, dict) and (
            "failed" in c or c.get("available") is False or c.get("complete") is False)]

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.flags), key=SEVERITY_ORDER.__getitem__,
                   default=None)
