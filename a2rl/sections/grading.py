"""`[grading]`: the grader (`grading/`) and the checks of a submission before it is queued
(`tools/submissions.py`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from .base import NAME_PATTERN, OwnerTables


class GradingSettings(OwnerTables):
    owns: ClassVar[str] = "grading"
    engine: str = Field(
        "auto", pattern=NAME_PATTERN, description="generation engine of the grader: auto (vLLM "
        "if installed and CUDA, else static-cache transformers), or force one: transformers, "
        "static, vllm, or one an installed package adds (entry point `a2rl.engines`; "
        "grading/engine_select.py)")
    max_new_tokens: int = Field(
        0, ge=0, description="cap on every task's generation length for smoke runs (0: the task's "
        "own; a capped evaluation records it in its provenance)")
    checkpoint_check_memory_gib: float = Field(
        0.0, ge=0, description="address space (GiB) of the process that loads a submission to "
        "compare it with the base (0: 4 GiB plus 24 bytes per parameter of the base model)")
    checkpoint_check_timeout_s: float = Field(
        600.0, gt=0, description="seconds that process may take before it is killed and the "
        "submission refused")
    pause_cap_fraction: float = Field(
        0.25, ge=0, le=1, description="the most grading gives back to a run's clock, as a "
        "share of its budget: under a paused grading clock the time its jobs were frozen for "
        "its own evaluations, and under either clock the time its requests waited behind other "
        "runs' evaluations, together (its jobs are frozen for that long at most; past it "
        "grading time counts)")
    max_pending_grades: int = Field(
        2, ge=1, description="a run's submissions queued or being graded at once; one more is "
        "refused at submit_checkpoint until one is graded")
    submission_checks_per_minute: int = Field(
        12, ge=1, description="submit_checkpoint calls a run may have checked (copied, "
        "compared, validated) in any 60 seconds, refused ones included; one more is refused "
        "at once, unchecked, with the seconds to wait")
