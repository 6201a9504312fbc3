"""`[recording]`: what the store keeps of a run (tool calls, revisions, job logs, the audit's
reading, the stages kept, GPU samples; `tools/`, `server/run/`, `audit/`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from a2rl.layout import BASE_MODEL, DATA, ENV, LOGS, OUTPUT
from a2rl.units import Size

from .base import Section


class RecordingSettings(Section):
    output_head_bytes: int = Field(8_000, ge=0, description="bytes of output kept from the start")
    output_tail_bytes: int = Field(8_000, ge=0, description="bytes of output kept from the end")
    revision_max_bytes: int = Field(1_000_000, ge=0, description="larger files are not "
                                    "revisioned")
    revision_run_max_bytes: int = Field(
        256 << 20, ge=0, description="file content bytes one run's revisions may store; past it "
        "a change is recorded by path, size and sha256 without its content (0: no limit)")
    revision_exclude: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [
            f"{OUTPUT}/*", f"{LOGS}/*", f"{BASE_MODEL}/*", f"{DATA}/*", f"{ENV}/*", ".cache/*",
            "*/__pycache__/*", "__pycache__/*", "*.pyc", ".a2rl/*",
        ],
        description="glob patterns (workspace-relative) never revisioned",
    )
    job_log_keep_bytes: int = Field(10_000_000, ge=0,
                                    description="job log bytes stored (head+tail)")
    job_log_run_keep_bytes: int = Field(
        256 << 20, ge=0, description="job log bytes stored for one run, all its jobs together; "
        "past it a job's log keeps its size only (0: no limit)")
    tool_arg_keep_bytes: int = Field(65_536, ge=1, description="bytes of one tool argument stored "
                                     "(longer ones: cut, with their sha256 and size)")
    tool_arg_run_keep_bytes: int = Field(
        256 << 20, ge=0, description="bytes of whole tool arguments one run keeps as blobs where "
        "the stored ones were cut (the audit reads them); past it a cut call keeps its cut "
        "copy only and the audit says so (0: no limit)")
    max_tool_args_bytes: int = Field(8_000_000, ge=1, description="largest tool call (all its "
                                     "arguments, UTF-8 bytes); larger calls are refused")
    audit_read_bytes: int = Field(
        2 << 30, ge=0, description="workspace file bytes the end-of-run audit reads at most, "
        "holes not counted; past it a file is flagged as not fully read (0: no limit)")
    stage_keep_bytes: Size = Field(
        "20g", description="bytes of checkpoints one run keeps at its finish for the stages of "
        "its final checkpoint's lineage the agent never submitted, to score them (stage "
        "attribution; 0: no cap)")
    gpu_sample_s: float = Field(
        1.0, gt=0, description="seconds between two NVML samples of a run's GPUs while its jobs "
        "run (the jobs' GPU seconds and peak GPU memory in the cost ledger; needs the "
        "nvidia-ml-py package and a driver, else not measured)")

    @field_validator("revision_exclude", mode="before")
    @classmethod
    def _patterns(cls, value: Any) -> Any:
        """A variable holds the patterns comma-separated."""
        return [p for p in value.split(",") if p] if isinstance(value, str) else value
