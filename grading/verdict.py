"""What checking a submitted checkpoint concludes: the verdict (`CheckpointCheck`), the
refusal raised on the way (`CheckpointRefused`) and the thresholds and hints both sides of
the check share. Its own module because both the server's side (`checks`) and the validating
process (`validate`) use them, and neither should import the other's.

`l2_relative` is ||w - w0|| / ||w0|| over all parameters (the flattened state dict, tied
weights counted once per name). A checkpoint with `l2_relative < NEAR_COPY_L2` (1e-3: about
what a handful of small optimizer steps give) is accepted but flagged `near_copy`, so reports
can tell "trained" from "barely touched".
"""

from __future__ import annotations

from pydantic import BaseModel

NEAR_COPY_L2 = 1e-3
SAVE_HINT = ("save both with model.save_pretrained(dir) and tokenizer.save_pretrained(dir)")


class CheckpointCheck(BaseModel):
    """The verdict on one checkpoint directory."""

    ok: bool
    error: str | None = None
    path: str | None = None  # the resolved directory
    l2_relative: float | None = None
    near_copy: bool = False
    n_params: int | None = None
    #: CPU seconds the validating process used, as the kernel counted them (its rusage once
    #: reaped); None where no process ran (refused by the server's own checks)
    cpu_s: float | None = None


class CheckpointRefused(Exception):
    """Raised inside validation; its message is what the agent reads."""
