"""The report's pydantic models: one versioned document, rendered as JSON, Markdown or HTML.

Bump `SCHEMA_VERSION` on any incompatible change and regenerate `report.schema.json`:
`python -c "from a2rl.analysis.schema import write_schema; write_schema()"`. Times are ISO
8601 UTC; `*_s` fields are seconds from the budget clock's start (the run's creation when the
clock never started).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from a2rl.store.lineage import Lineage

# 1.1: the optional `narrative`; 1.2: paired improvement interval; 1.3: evidence's `call_id`,
# `summary.profile`, and what a run's store caps left out (`revisions_without_content`,
# `job_logs_not_stored`); 1.4: `summary.end_kind`, `summary.result`, `summary.final_note` (and
# no final score nor improvement for a run without a final submission), failure types from a
# job's stored cause (`killed_by_signal`, `resource_limit`, `job_killed`, `interrupted`,
# `job_lost`), and the optional `audit`; 1.5: `summary.published`; 1.6: the optional `ledger`;
# 1.7: `summary.evaluation_config` (the run's frozen evaluation config), `summary.regrades`,
# `summary.agent_status`, `summary.agent_error`, the ledger's `validations` and
# `validation_cpu_s`, the optional `lineage` (where the submitted checkpoints came from) and
# `attribution` (each stage's gain); 1.8: `summary.evaluation_config.grading`, the run's
# `[grading]` section recorded whole, in place of its flat `engine`, `max_new_tokens_cap`,
# `check_memory_gib` and `check_timeout_s`
SCHEMA_VERSION = "1.8"
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")

RouteName = Literal["sft", "grpo", "ppo", "dpo", "rloo_reinforce", "reward_model",
                    "distillation", "copy_of_base", "no_training", "unknown"]
FailureType = Literal["runtime_error", "out_of_memory", "budget_kill", "invalid_checkpoint",
                      "grader_error", "diverged", "no_submission",
                      # 1.4: a job's stored cause (`Job.end_cause`), each its own kind
                      "killed_by_signal", "resource_limit", "job_killed", "interrupted",
                      "job_lost"]


class Evidence(BaseModel):
    """One line that supports a claim: a code line, a command, a log line or a record."""

    kind: Literal["code", "command", "log", "submission", "evaluation", "run"]
    text: str
    file: str | None = None
    line: int | None = None
    job_id: str | None = None
    submission_id: str | None = None
    call_id: int | None = Field(None, description="the tool call it rests on: the run_command "
                                "that started the job, or the submit_checkpoint (schema 1.3)")
    call_seq: int | None = Field(None, description="that call's number within the run, the "
                                 "one shown as #n (call_id counts the whole store's calls)")


class Interval(BaseModel):
    """An improvement with its paired 95% interval (see `analysis/improvement.py`)."""

    estimate: float
    low: float
    high: float
    within_noise: bool = Field(description="the 95% interval contains 0")
    method: str = Field(description="how the interval was computed (schema 1.2: paired over "
                                    "items; 1.0-1.1: two independent proportions)")
    n_paired: int | None = Field(None, description="items matched by id in both evaluations "
                                                   "(schema 1.2)")


class PublishedBeside(BaseModel):
    """A figure the paper or its harness publishes, beside the run's measured one (schema
    1.5; `a2rl.tasks.published`, docs/paper-fidelity.md)."""

    kind: Literal["baseline", "final", "improvement"]
    published: float = Field(description="the published figure on our scale (a fraction)")
    as_published: str = Field(description="as the source prints it (percent)")
    measured: float | None = Field(description="the run's own: baseline test, final test or "
                                   "the improvement; null when the run has none")
    difference_points: float | None = Field(description="(measured - published) x 100")
    base_model: str
    metric: str
    label: str = Field(description="the source in a few words")
    source: str = Field(description="paper version and place, or the harness's file and "
                                    "commit")
    checked: str = Field(description="how the figure was verified, or that it was not")
    note: str = ""


class RegradeNote(BaseModel):
    """One `a2rl regrade` of the run (schema 1.7): its final checkpoint and base model scored
    again on test; `current` when its scores are the run's (under the run's frozen config),
    not for a second reading under another profile."""

    id: int
    at: str
    reason: str
    profile: str
    current: bool
    grader_version: str
    old_final: float | None
    new_final: float | None
    old_baseline: float | None
    new_baseline: float | None
    changed_items: int = Field(description="items whose verdict changed, final and baseline")
    error: str | None = None


class Summary(BaseModel):
    run_id: str
    task: str
    agent: str | None
    agent_version: str | None
    driver_model: str | None
    base_model: str | None
    protocol: str
    profile: str = Field("a2rl", description="the evaluation profile every score of the run was "
                                             "computed under: a2rl or paper (schema 1.3; "
                                             "older documents: a2rl)")
    status: str
    end_reason: str | None
    agent_status: str | None = Field(None, description="how the agent's process ended, as "
                                     "`a2rl run` saw it: finished, crashed, budget, "
                                     "interrupted; null for a run made with `a2rl create` "
                                     "(schema 1.7)")
    agent_error: str | None = Field(None, description="why the agent failed or stopped at its "
                                    "own limit: its last error line (an HTTP status, an option "
                                    "error) or its turn limit (schema 1.7)")
    end_kind: str | None = Field(None, description="why the run ended: agent_finished, "
                                 "budget_exhausted, interrupted, agent_crashed or "
                                 "infrastructure; null while it runs (schema 1.4)")
    result: bool | None = Field(None, description="whether the run counts as a result in "
                                "comparisons: it ended by the agent or the budget, was "
                                "finalized and has a baseline (schema 1.4)")
    budget_s: float
    budget_used_s: float | None
    started_at: str | None
    ended_at: str | None
    baseline_dev: float | None
    baseline_test: float | None
    best_dev: float | None = Field(description="best graded score on the feedback split "
                                                 "(dev under heldout, test under paper)")
    best_submission_id: str | None
    final_test: float | None = Field(description="the final submission's test score; null "
                                     "without a final submission (from schema 1.4; before, "
                                     "the baseline's)")
    final_submission_id: str | None
    final_note: str | None = Field(None, description="why `final_test` is null: no "
                                   "submission, no graded submission, not finalized "
                                   "(schema 1.4)")
    improvement: Interval | None = Field(description="final test minus baseline test")
    improvement_note: str | None = Field(
        None, description="why `improvement` is null although both scores exist (schema 1.2)")
    submissions_total: int
    submissions_valid: int
    submissions_refused: int
    submissions_failed: int
    final_provenance: dict[str, object] = Field(default_factory=dict)
    published: list[PublishedBeside] = Field(
        default_factory=list, description="the paper's and its harness's figures for this "
        "task and base model beside the run's: only for a run of the paper profile, finals "
        "and improvements only under the paper protocol (schema 1.5)")
    evaluation_config: dict[str, object] | None = Field(
        None, description="everything that decided the run's scores besides the checkpoint, "
        "frozen when it was made (task, versions, its `[grading]` section as `grading`, the "
        "engine's name and version, generation settings, judge; read from its first "
        "evaluation for older runs); null when neither exists (schema 1.7; `grading` 1.8)")
    regrades: list[RegradeNote] = Field(
        default_factory=list, description="the run's regrades, oldest first; the scores above "
        "are the latest current one's (schema 1.7)")


class ToolCallEvent(BaseModel):
    id: int
    tool: str
    start_s: float
    duration_s: float
    is_error: bool


class JobEvent(BaseModel):
    id: str
    command: str
    state: str
    exit_code: int | None
    start_s: float
    end_s: float | None
    # 1.4: why it ended (`job.end_cause`), with its evidence; null for older rows or running
    cause: str | None = None
    cause_evidence: str | None = None


class SubmissionEvent(BaseModel):
    id: str
    path: str
    status: str
    at_s: float


class Span(BaseModel):
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


class Timeline(BaseModel):
    origin: str | None = Field(description="the time every *_s field counts from")
    end_s: float
    tool_calls: list[ToolCallEvent]
    jobs: list[JobEvent]
    submissions: list[SubmissionEvent]
    grading: list[Span] = Field(description="evaluations of the run's submissions")
    idle_gaps: list[Span] = Field(description="no tool call and no job running")
    idle_threshold_s: float
    grading_s: float
    idle_s: float


class ScorePoint(BaseModel):
    submission_id: str
    at_s: float
    split: str
    score: float
    ci_low: float | None
    ci_high: float | None
    improved_best: bool


class Trajectory(BaseModel):
    split: str
    baseline: float | None
    points: list[ScorePoint]


class FileChange(BaseModel):
    path: str
    change: Literal["added", "deleted", "changed"]
    diff: str = ""
    truncated: bool = False


class CodeVersion(BaseModel):
    submission_id: str
    snapshot_id: int | None
    files: dict[str, str] = Field(description="path -> blob sha256")
    changes: list[FileChange] = Field(description="since the previous submission's snapshot")


class Route(BaseModel):
    submission_id: str
    path: str
    route: RouteName
    also: list[RouteName] = Field(default_factory=list,
                                  description="other routes seen in the same code")
    evidence: list[Evidence]


class Failure(BaseModel):
    type: FailureType
    message: str
    at_s: float | None = None
    job_id: str | None = None
    submission_id: str | None = None
    evidence: list[Evidence]


class ProcessMetrics(BaseModel):
    valid_submission_rate: float | None
    time_to_first_valid_s: float | None
    time_to_first_improvement_s: float | None
    time_to_best_s: float | None
    improving_share: float | None = Field(
        description="share of graded submissions that beat the previous best (or baseline)")
    job_running_share: float | None = Field(description="share of the budget with a job running")
    tool_calls: int
    tool_errors: int
    tool_calls_by_kind: dict[str, int]
    jobs: int
    revisions: int
    revisions_without_content: int = Field(
        0, description="changes recorded by path, size and sha256 only: the run's revision "
                       "bytes (recording.revision_run_max_bytes) were used up (schema 1.3)")
    job_logs_not_stored: int = Field(
        0, description="jobs whose log is not in the store (its size is): the run's job log "
                       "bytes (recording.job_log_run_keep_bytes) were used up (schema 1.3)")


class Narrative(BaseModel):
    """Prose an LLM wrote over the computed report, asked for with `--narrative`.

    Never an input to any other field: the report is computed first and the narrative only
    reads it. When the endpoint is not configured or fails, `text` is null and `reason` says
    why in one line.
    """

    status: Literal["generated", "failed", "not_configured"]
    text: str | None = Field(None, description="the generated prose; null unless generated")
    model: str | None = Field(None, description="the model that wrote it, as the endpoint "
                                                "named it")
    endpoint: str | None = Field(None, description="scheme://host[:port] of the endpoint")
    prompt_version: str
    generated_at: str | None = None
    reason: str | None = Field(None, description="why there is no text (one line)")


AuditSeverity = Literal["info", "low", "medium", "high"]


class AuditEvidence(BaseModel):
    """Where in the record an audit finding is: ids the viewer links to (schema 1.4).

    The report's own copy of `a2rl.audit.Evidence`: the report is a versioned document, so its
    shape changes only with `SCHEMA_VERSION`, whatever the audit's model grows."""

    tool_calls: list[int] = Field(default_factory=list)
    revisions: list[int] = Field(default_factory=list)
    jobs: list[str] = Field(default_factory=list)
    submissions: list[str] = Field(default_factory=list)
    evaluations: list[int] = Field(default_factory=list)
    items: list[str] = Field(default_factory=list, description='hidden item ids, "split:id"')
    paths: list[str] = Field(default_factory=list, description="workspace paths")
    excerpts: list[str] = Field(default_factory=list,
                                description="short quotes of the agent's own text")


class AuditFlag(BaseModel):
    kind: str = Field(description="the check that raised it (contamination, "
                                  "hidden_data_reach, model_identity, ...)")
    severity: AuditSeverity
    finding: str
    evidence: AuditEvidence = Field(default_factory=AuditEvidence)


class AuditSection(BaseModel):
    """The run's stored cheating audit (`a2rl audit`), as the report shows it (schema 1.4)."""

    status: Literal["not_audited", "clean", "flags", "flagged"] = Field(
        description="not_audited: no audit stored; clean: audited, no flag; flags: flags, "
                    "none of high severity; flagged: a high flag stands (not a result)")
    audit_version: int | None = None
    computed_at: str | None = None
    by_severity: dict[str, int] = Field(default_factory=dict,
                                        description="severity -> number of flags")
    flags: list[AuditFlag] = Field(default_factory=list,
                                   description="worst first, then in the audit's order")
    checks: dict[str, object] = Field(default_factory=dict,
                                      description="check -> what it looked at")


class LedgerSection(BaseModel):
    """What the run cost (`a2rl.store.ledger`, the store's `ledger` row; schema 1.6). Null
    fields were not measured or are not known."""

    input_tokens: int | None = Field(None, description="the driver model's input tokens, "
                                     "cached ones included")
    output_tokens: int | None = None
    cached_tokens: int | None = Field(None, description="the part of the input read from the "
                                      "provider's cache")
    cache_write_tokens: int | None = None
    usage_source: str | None = Field(None, description="what the counts were read from")
    cost_usd: float | None = Field(None, description="the driver model's cost in USD")
    cost_basis: Literal["reported", "computed", "unknown"] = Field(
        "unknown", description="reported: by the agent or its endpoint; computed: from the "
        "price table (settings' prices); unknown")
    cost_note: str | None = None
    jobs: int = 0
    jobs_cpu_s: float | None = Field(None, description="the jobs' CPU seconds, summed")
    jobs_memory_peak_bytes: int | None = Field(None, description="the largest job's peak "
                                               "resident memory")
    gpu_s: float | None = Field(None, description="the jobs' GPU seconds (NVML), summed")
    gpu_memory_peak_bytes: int | None = None
    grading_s: float = Field(0.0, description="wall time of the run's own evaluations")
    evaluations: int = 0
    validations: int = Field(0, description="(1.7) the run's submissions checked, refused "
                             "ones included")
    validation_cpu_s: float | None = Field(None, description="(1.7) the CPU seconds those "
                                           "checks took, as the kernel counted them (the "
                                           "server's thread and the validating process)")


class SubmissionChain(BaseModel):
    """One submission's lineage in one line."""

    submission_id: str
    checkpoint: str
    complete: bool
    chain: str = Field(description="its stages newest first: `output/grpo (trained, j-2) <- "
                       "output/sft (trained, j-1) <- base_model`")


class LineageSection(BaseModel):
    """Where the submitted checkpoints came from (`a2rl.store.lineage`, schema 1.7): each
    submission's chain, and one lineage whole: the final submission's, else the last one's."""

    final_submission_id: str | None = None
    shown_submission_id: str
    shown: Lineage
    submissions: list[SubmissionChain] = Field(default_factory=list)


class StageGain(BaseModel):
    """One stage of the final checkpoint's lineage (schema 1.7): its score on the feedback
    split and its gain over the stage before (the base model for the first)."""

    checkpoint: str
    job_id: str | None
    how: str = Field(description="trained, copied or edited (the lineage's)")
    route: RouteName = Field(description="read from the code its job ran")
    route_evidence: str = ""
    command: str | None = None
    score: float | None = Field(description="on the feedback split; null: not scored")
    evaluation_id: int | None = None
    submission_id: str | None = Field(description="the agent's submission of this checkpoint; "
                                      "null: scored after the run, never seen by the agent")
    seen_by_agent: bool
    gain: float | None = Field(description="score minus the stage before's")
    interval: Interval | None = Field(None, description="paired 95% interval of the gain")
    note: str | None = None
    in_final: bool = Field(True, description="a stage of the final checkpoint; false: built "
                           "on top of it later by a submission that did not replace it")


class Attribution(BaseModel):
    """Which stage of the final checkpoint's lineage earned how much (schema 1.7)."""

    split: str = Field(description="the feedback split the stages are scored on")
    baseline: float | None
    stages: list[StageGain] = Field(description="oldest first")
    complete: bool = Field(description="the lineage is complete and every stage was scored")
    note: str = ""


class Report(BaseModel):
    schema_version: str = SCHEMA_VERSION
    generated_at: str
    summary: Summary
    timeline: Timeline
    trajectory: Trajectory
    code_history: list[CodeVersion]
    routes: list[Route]
    failures: list[Failure]
    metrics: ProcessMetrics
    narrative: Narrative | None = Field(
        None, description="optional LLM-written prose, marked as generated (schema 1.1)")
    audit: AuditSection | None = Field(
        None, description="the run's cheating audit; null in documents before schema 1.4")
    ledger: LedgerSection | None = Field(
        None, description="what the run cost; null for a run with no ledger stored (not "
        "finished, or finished before it existed) and in documents before schema 1.6")
    lineage: LineageSection | None = Field(
        None, description="where the submitted checkpoints came from; null for a run whose "
        "submissions have no lineage (refused, made before it was recorded) and in documents "
        "before schema 1.7")
    attribution: Attribution | None = Field(
        None, description="each stage of the final checkpoint's lineage with its score and "
        "gain; null without a final submission with a lineage (schema 1.7)")


def json_schema() -> dict[str, object]:
    doc = Report.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["$id"] = f"a2rl-run-report/{SCHEMA_VERSION}"
    return doc


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    path.write_text(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(write_schema())
