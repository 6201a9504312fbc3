"""The audit's checks, by name: every `check_<name>(record, **inputs) -> CheckResult`.

Every check receives the audit's common inputs by keyword (`hidden`, `settings`) and ignores
those it does not read; a check that needs more than the record (other runs' submissions, the
base model's outputs) names a loader in `INPUTS`, called as `loader(store, record)` just before
the check, so what it costs is paid only by the check that reads it.

A check whose module is missing (it ships on its own branch, or a plugin's was removed) is
listed as not available in the report's `checks` rather than failing the audit: "no flag"
and "not checked" must stay apart.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from a2rl.store import Store

from .record import Check, RunRecord

#: name -> "module:function" (in this package)
CHECKS: dict[str, str] = {
    "contamination": "contamination:check_contamination",
    "hidden_data_reach": "hidden_reach:check_hidden_reach",
    "reaching_out": "reaching_out:check_reaching_out",
    "model_identity": "identity:check_identity",
    "grader_gaming": "gaming:check_gaming",
    "dev_overfitting": "overfit:check_overfit",
    "coverage": "coverage:check_coverage",
}
#: name -> "module:function" returning the check's extra keyword inputs
INPUTS: dict[str, str] = {
    "model_identity": "identity:load_identity_inputs",
    "grader_gaming": "gaming:load_gaming_inputs",
}


def _load(target: str) -> Any:
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), func)


def load_checks() -> tuple[dict[str, Check], dict[str, str]]:
    """The checks that load, and for each one that does not, why."""
    found: dict[str, Check] = {}
    missing: dict[str, str] = {}
    for name, target in CHECKS.items():
        try:
            found[name] = _load(target)
        except (ImportError, AttributeError) as exc:
            missing[name] = f"not available: {exc}"
    return found, missing


def input_loader(name: str) -> Callable[[Store, RunRecord], dict[str, Any]] | None:
    """The loader of check `name`'s extra inputs, None when it reads only the common ones."""
    target = INPUTS.get(name)
    return _load(target) if target else None
