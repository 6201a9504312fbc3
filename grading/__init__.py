"""Grading: checkpoint validation, generation engines, evaluation, the queue and the baseline.

Flow: `copy_checkpoint` (grader-owned copy with file hashes, taken first) -> `validate_copy`
(on that copy) -> `enqueue` -> `process_one` (lease, subprocess worker, `Evaluation` row).
`ensure_baseline` scores the untouched base model once per (task, base model, grader,
engine). The engine is chosen by `engine_select` (vLLM, static-cache transformers or plain
`generate`).
"""

from a2rl.stats import wilson_interval  # re-exported: its home is a2rl.stats

from .baseline import baseline_key, ensure_baseline
from .checks import NEAR_COPY_L2, CheckpointCheck, validate_checkpoint, validate_copy
from .device_lock import DeviceBusy, device_lock
from .engine import GenerationEngine, TransformersEngine, cut_at_stop
from .engine_select import EngineUnavailable, choose_engine
from .engine_static import StaticCacheEngine
from .evaluate import GRADER_VERSION, EvalResult, evaluate
from .gpu_memory import GpuMemoryUnavailable
from .hashing import (
    CopyCaps,
    CopyRefused,
    copy_checkpoint,
    data_hash,
    sha256_file,
    tree_digest,
    tree_hashes,
)
from .queue import MAX_ATTEMPTS, claim, enqueue, process_one, run_worker, spec_for

__all__ = [
    "GRADER_VERSION", "MAX_ATTEMPTS", "NEAR_COPY_L2", "CheckpointCheck", "CopyCaps",
    "CopyRefused", "DeviceBusy",
    "EngineUnavailable", "EvalResult", "GenerationEngine", "GpuMemoryUnavailable",
    "StaticCacheEngine", "TransformersEngine", "baseline_key", "choose_engine", "claim",
    "copy_checkpoint", "cut_at_stop", "data_hash", "device_lock", "enqueue",
    "ensure_baseline", "evaluate", "process_one", "run_worker", "sha256_file", "spec_for",
    "tree_digest",
    "tree_hashes", "validate_checkpoint", "validate_copy", "wilson_interval",
]
