"""The improvement of a run with its paired 95% interval: final test minus base model's test
score, on the same items matched by id from the two evaluations' per-item results.

Pure. What every interval needs is checked here: both evaluations kept per-item results, with
unique ids, of the same items (the same ids and, where both recorded it, the same data hash),
graded under the same engine, generation settings and grader and task versions (`GRADED_UNDER`),
scored under the same profile. Which interval then depends on
what the score is, and that is the task's to say (`Task.paired_interval`, a2rl.tasks.improvement):
by default the share of items correct (Newcombe's paired method 10); a task whose score is
something else declares its own (AlpacaEval's length-controlled win rate). A task that cannot be
loaded here (a plugin missing from this machine) gets the default, which refuses a score that is
not a share of items correct. Where no interval can be computed, the interval is None and the
returned note says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from a2rl.registry import RegistryError
from a2rl.tasks import get_task
from a2rl.tasks.improvement import IntervalResult, Scored, proportion_interval

from .schema import Interval

__all__ = ["Scored", "interval_of", "paired_improvement"]

#: How a task pairs two evaluations into an interval (`Task.paired_interval`).
PairedMethod = Callable[[Scored, Scored], IntervalResult]


#: What two evaluations must share to be paired, as their provenance records it: the engine
#: and its version, the generation settings, and the grader's and the task's versions (a run's
#: frozen evaluation config: `a2rl.grading.frozen`). A key an older record lacks is not held
#: against it.
GRADED_UNDER = ("engine", "engine_version", "generation", "grader_version", "task_version",
                "prompt_version")


def _shown(value: Any) -> str:
    return str(value) if not isinstance(value, dict) else ", ".join(
        f"{k}={v}" for k, v in sorted(value.items()))


def _by_id(items: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    out = {str(it.get("id")): it for it in items if "id" in it}
    return out if len(out) == len(items) else None


def interval_of(task_id: str | None) -> PairedMethod:
    """The paired interval task `task_id` declares; the default for proportions when the task
    cannot be loaded here (its stored scores are then checked against that definition)."""
    if task_id is None:
        return proportion_interval
    try:
        return get_task(task_id).paired_interval
    except RegistryError:  # unknown here, or a plugin that does not load
        return proportion_interval


def paired_improvement(final: Scored, base: Scored, task_id: str | None = None,
                       method: PairedMethod | None = None, *, same_settings: bool = True,
                       ) -> tuple[Interval | None, str | None]:
    """(interval, None), or (None, why there is none), of the run of task `task_id` (its
    declared interval) or by `method`. `same_settings` False pairs evaluations graded under
    different settings on purpose: a regrade's new score against its old one."""
    if not final.items or not base.items:
        which = "final" if not final.items else "baseline"
        return None, (f"no interval: the {which} test evaluation kept no per-item results "
                      "(recorded by an older a2rl)")
    f_ids, b_ids = _by_id(final.items), _by_id(base.items)
    if f_ids is None or b_ids is None:
        return None, "no interval: per-item results without unique item ids"
    if set(f_ids) != set(b_ids):
        return None, (f"no interval: the final and baseline evaluations scored different items "
                      f"({len(set(f_ids) ^ set(b_ids))} ids in only one of them)")
    f_data, b_data = final.provenance.get("data_hash"), base.provenance.get("data_hash")
    if f_data and b_data and f_data != b_data:
        return None, ("no interval: the final and baseline evaluations scored different items "
                      "under the same ids (their data hashes differ: the hidden split changed, "
                      "a new secret seed say)")
    differ = [key for key in GRADED_UNDER if key in final.provenance and key in base.provenance
              and final.provenance[key] != base.provenance[key]] if same_settings else []
    if differ:
        return None, ("no interval: the final and baseline evaluations were graded under "
                      "different settings (" + "; ".join(
                          f"{k}: {_shown(final.provenance[k])} vs {_shown(base.provenance[k])}"
                          for k in differ) + "): `a2rl regrade` scores both again under one")
    if final.profile != base.profile:
        return None, (f"no interval: the final evaluation was scored under the "
                      f"{final.profile!r} profile and the baseline under {base.profile!r}")
    order = sorted(f_ids)
    paired = (dataclasses.replace(final, items=[f_ids[i] for i in order]),
              dataclasses.replace(base, items=[b_ids[i] for i in order]))
    interval, note = (method or interval_of(task_id))(*paired)
    if interval is None:
        return None, note
    return Interval(estimate=interval.estimate, low=interval.low, high=interval.high,
                    within_noise=interval.within_noise, method=interval.method,
                    n_paired=interval.n_paired), None
