"""The published figures beside a run's measured ones: pure functions over the figures
(`a2rl.tasks.published`) and the run's summary, shared by the report and `a2rl compare`.

A baseline is set beside any `paper`-profile run's baseline with the same base model. A final
or an improvement only beside a run under the `paper` protocol too: the harness's figures are
a run's best test score over its submissions, which the `heldout` protocol never computes
(it scores one checkpoint chosen on dev).
"""

from __future__ import annotations

from collections.abc import Iterable

from a2rl.tasks.published import published_figures
from a2rl.tasks.spec import PublishedFigure

from .schema import PublishedBeside, Summary


def beside(figures: Iterable[PublishedFigure], protocol: str, baseline: float | None,
           final: float | None, improvement: float | None) -> list[PublishedBeside]:
    """Each figure with the run's measured counterpart and the difference in points."""
    measured = {"baseline": baseline, "final": final, "improvement": improvement}
    out = []
    for f in figures:
        if f.kind != "baseline" and protocol != "paper":
            continue
        m = measured[f.kind]
        out.append(PublishedBeside(
            kind=f.kind, published=f.value, as_published=f.as_published, measured=m,
            difference_points=None if m is None else round((m - f.value) * 100, 4),
            base_model=f.base_model, metric=f.metric, label=f.label, source=f.source,
            checked=f.checked, note=f.note))
    return out


def summary_published(s: Summary) -> list[PublishedBeside]:
    """The figures beside the run whose summary is `s` (its task, profile, base model)."""
    figures = published_figures(s.task, s.profile, s.base_model)
    if not figures:
        return []
    improvement = s.improvement.estimate if s.improvement else (
        s.final_test - s.baseline_test
        if s.final_test is not None and s.baseline_test is not None else None)
    return beside(figures, s.protocol, s.baseline_test, s.final_test, improvement)


def published_line(p: PublishedBeside) -> str:
    """"baseline 0.2161 published (harness README, Qwen2.5-1.5B) vs 0.2050 measured: -1.1
    points"."""
    model = p.base_model.rsplit("/", 1)[-1]
    sign = "+" if p.kind == "improvement" else ""
    measured = "–" if p.measured is None else f"{p.measured:{sign}.4f}"
    diff = "" if p.difference_points is None else f": {p.difference_points:+.1f} points"
    return (f"{p.kind} {p.published:{sign}.4f} published ({p.label}, {model}) vs {measured} "
            f"measured{diff}")
