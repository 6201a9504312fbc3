"""Grading: checkpoint validation, generation engines, evaluation, the queue and the baseline.

Flow: the submit tool copies the checkpoint out of the workspace first (grader-owned, with
file hashes: `a2rl.tools.checkpoint_copy`) -> `validate_copy` (on that copy) -> `enqueue` ->
`process_one` (lease, subprocess worker, `Evaluation` row). Grading never reads a workspace.
`ensure_baseline` scores the untouched base model once per (task, base model, grader,
engine). The engine is chosen by `engine_select` (vLLM, static-cache transformers or plain
`generate`). What a task sees of grading is `seam` alone.

The names below load lazily (PEP 562): a task importing `a2rl.grading.seam` must not pull in
the store, the queue or the engines, and importing them here eagerly would make every task
import depend on all of grading.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module (in this package, or its full name) that defines it
_HOMES: dict[str, str] = {
    "wilson_interval": "a2rl.stats",  # re-exported: its home is a2rl.stats
    "baseline_key": ".baseline", "ensure_baseline": ".baseline",
    "NEAR_COPY_L2": ".checks", "CheckpointCheck": ".checks",
    "validate_checkpoint": ".checks", "validate_copy": ".checks",
    "ValidationLimits": ".validate",
    "DeviceBusy": ".device_lock", "device_lock": ".device_lock",
    "GenerationEngine": ".seam", "TransformersEngine": ".engine", "cut_at_stop": ".engine",
    "EngineUnavailable": ".engine_select", "choose_engine": ".engine_select",
    "StaticCacheEngine": ".engine_static",
    "GRADER_VERSION": ".evaluate", "EvalResult": ".evaluate", "evaluate": ".evaluate",
    "GpuMemoryUnavailable": ".gpu_memory",
    "data_hash": ".hashing", "sha256_file": ".hashing", "tree_digest": ".hashing",
    "tree_hashes": ".hashing",
    "MAX_ATTEMPTS": ".queue", "claim": ".queue", "enqueue": ".queue",
    "lease_owner": ".queue", "outstanding": ".queue", "process_one": ".queue",
    "release_dead_leases": ".queue", "run_worker": ".queue", "spec_for": ".queue",
}

__all__ = sorted(_HOMES)

# Two names are also submodules' names: imported now, so that an `import
# a2rl.grading.evaluate` elsewhere can never leave the module where the function is expected.
# Both modules are light (no store, no engine).
from .device_lock import device_lock as device_lock  # noqa: E402
from .evaluate import evaluate as evaluate  # noqa: E402


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(home, __name__) if home.startswith(".") \
        else importlib.import_module(home)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
