"""Typed results of the tools. Each becomes the tool's MCP output schema."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CommandResult(BaseModel):
    status: str = Field(description="'exited' when the command finished, else 'running' (a job)")
    exit_code: int | None = None
    job_id: str = Field(description="id of the job running the command (for job_status/job_kill)")
    output: str = Field(description="stdout and stderr together, bounded (head and tail)")
    output_bytes: int
    truncated: bool
    log_path: str = Field(description="the full output, readable with read_file")
    hint: str = ""


class JobInfo(BaseModel):
    job_id: str
    command: str
    state: str = Field(description="running, exited, killed, timeout or lost")
    exit_code: int | None = None
    started_at: str
    ended_at: str | None = None
    log_path: str
    log_bytes: int = 0
    end_cause: str | None = Field(None, description=(
        "why it ended: exited, signal, out_of_memory, limit, job_kill, deadline, budget, "
        "interrupted, run_finished or lost; null while it runs"))
    end_evidence: str | None = None


class JobStatusResult(BaseModel):
    job: JobInfo | None = None
    output: str = ""
    output_offset: int = Field(0, description="byte offset in the log where `output` starts")
    next_offset: int = Field(0, description="pass as offset to get only newer output")
    truncated: bool = False
    jobs: list[JobInfo] = Field(default_factory=list, description="all jobs when no id is given")


class FileEntry(BaseModel):
    path: str
    type: str  # file|dir|symlink
    size: int | None = None
    read_only: bool = False


class ListFilesResult(BaseModel):
    path: str
    entries: list[FileEntry]
    truncated: bool = False


class ReadFileResult(BaseModel):
    path: str
    content: str = Field("", description="lines prefixed with their 1-based line number")
    offset: int = 0
    lines_returned: int = 0
    total_lines: int | None = None
    next_offset: int | None = Field(None, description="offset of the next page, if any")
    size: int
    binary: bool = False
    description: str = ""


class EditFileResult(BaseModel):
    path: str
    created: bool
    replacements: int
    diff: str
    bytes_written: int


class BudgetStatus(BaseModel):
    budget_s: float
    used_s: float
    remaining_s: float
    clock_started: bool
    deadline: str | None
    exhausted: bool
    jobs_running: int
    submissions_used: int = 0
    max_submissions: int | None = None
    grading_s: float = 0.0
    #: under a paused grading clock: seconds its jobs were frozen for its evaluations, all
    #: given back to the clock, and the most that may be (0 under a counted clock)
    grading_pause_credit_s: float = 0.0
    grading_pause_cap_s: float = 0.0
    #: seconds its requests waited behind other runs' evaluations (a span waited through by
    #: two requests once), given back to the clock
    grading_wait_credit_s: float = 0.0
    #: the most grading gives back in all, pause and wait credits together
    grading_credit_cap_s: float = 0.0
    max_pending_grades: int | None = None
    #: submit_checkpoint calls checked in any 60 s, refused ones included
    submission_checks_per_minute: int | None = None
