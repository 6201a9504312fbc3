"""The audit's checks, by name: every `check_<name>(record, **inputs) -> CheckResult`.

A check whose module is missing (it ships on its own branch, or a plugin's was removed) is
listed as not available in the report's `checks` rather than failing the audit: "no flag"
and "not checked" must stay apart.
"""

from __future__ import annotations

import importlib

from .record import Check

#: name -> "module:function" (in this package)
CHECKS: dict[str, str] = {
    "contamination": "contamination:check_contamination",
    "hidden_data_reach": "hidden_reach:check_hidden_reach",
    "reaching_out": "reaching_out:check_reaching_out",
    "model_identity": "identity:check_identity",
    "grader_gaming": "gaming:check_gaming",
    "dev_overfitting": "overfit:check_overfit",
}


def load_checks() -> tuple[dict[str, Check], dict[str, str]]:
    """The checks that load, and for each one that does not, why."""
    found: dict[str, Check] = {}
    missing: dict[str, str] = {}
    for name, target in CHECKS.items():
        module, _, func = target.partition(":")
        try:
            found[name] = getattr(importlib.import_module(f"{__package__}.{module}"), func)
        except (ImportError, AttributeError) as exc:
            missing[name] = f"not available: {exc}"
    return found, missing
