"""The report as one self-contained HTML page, from the same Jinja2 templates and SVG plots as
the viewer's run page (`analysis/templates/`, `analysis/plots.py`): inline CSS, inline SVG, no
scripts and no network, so that it prints as a paper's appendix and opens offline.

This module is also the templates' one home: `environment()` is the Jinja2 environment (and
filters) the viewer renders its pages with, and `report_context` the values both give the
report's sections (report_top, report_bottom).

That environment is the pages' one output seam for agent text: every `{{ ... }}` a template
prints passes through `_shown` (Jinja's `finalize`) before it is HTML-escaped, which shows
control and bidi characters as escapes (`a2rl.display.printable`). Escaping HTML is not
enough: a U+202E in a command or a file name reorders the line a reader sees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape
from markupsafe import Markup, escape

from a2rl.display import printable
from a2rl.store import Store

from . import fmt, plots
from .audit_view import section_of
from .data import job_logs
from .ledger_view import ledger_rows
from .lineage_view import stage_rows
from .schema import Report, Summary

TEMPLATES = Path(__file__).resolve().parent / "templates"

#: (job id, metric, SVG) of each training curve drawn (`plots.curves`)
Curves = list[tuple[str, str, str]]


def environment() -> Environment:
    """The Jinja2 environment of the report and the viewer's pages (and its filters)."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(
        ["jinja", "html"], default_for_string=True, default=True), trim_blocks=True,
        lstrip_blocks=True, finalize=_shown)
    env.filters["endkind"] = fmt.end_kind_words  # "agent crashed", for an EndKind
    env.filters.update(dur=fmt.dur, num=fmt.num, pct=fmt.pct, interval=fmt.interval,
                       evidence=fmt.evidence, pretty=_pretty, short=_short,
                       diff_html=_diff_html, pretty_text=_pretty_text,
                       extract=lambda key, mapping: mapping.get(key, key),
                       audit_headline=fmt.audit_headline,
                       when=lambda d: d.strftime("%Y-%m-%d %H:%M") if d else "–")
    env.globals.update(ROUTE_LABELS=fmt.ROUTE_LABELS, FAILURE_LABELS=fmt.FAILURE_LABELS)
    return env


def _shown(value: Any) -> Any:
    """What a template prints, with its control and bidi characters as visible escapes; HTML
    already made (`Markup`: a plot, a diff) keeps its markup, its text escaped the same way."""
    if hasattr(value, "__html__"):
        return Markup(printable(str(value.__html__())))
    if value is None or isinstance(value, (Undefined, bool, int, float)):
        return value
    return printable(str(value))


def _pretty(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    return json.dumps(x, indent=2, ensure_ascii=False, default=str)


def _diff_html(diff: str) -> Markup:
    """A unified diff, one line per line, with added, removed and hunk lines marked."""
    out = []
    for line in diff.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+")
               else "del" if line.startswith("-") else "")
        out.append(Markup('<span class="{}">{}</span>').format(cls, line) if cls
                   else escape(line))
    return Markup("\n").join(out)


def _pretty_text(text: str | None) -> str:
    """A result as the server stored it; JSON indented so that it reads line by line."""
    if not text:
        return text or ""
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text


def _short(x: Any, n: int = 120) -> str:
    text = x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, default=str)
    return text if len(text) <= n else text[:n - 1] + "…"


def training_curves(store: Store, run_id: str) -> Curves:
    """The curves (loss, reward...) the run's job logs print, drawn."""
    return plots.curves(job_logs(store, run_id))


def improvement_class(s: Summary) -> str:
    """The CSS class of the improvement: within noise, better, worse, or none."""
    if s.improvement is None:
        return "muted"
    if s.improvement.within_noise:
        return "noise"
    return "good" if s.improvement.estimate > 0 else "bad"


def report_context(r: Report, curves: Curves, standalone: bool) -> dict[str, Any]:
    """What report_top and report_bottom render from. `standalone` (the HTML report): no job
    or call is listed on the page, so the plots and the evidence do not link to them."""
    return dict(r=r, s=r.summary, summary_rows=fmt.summary_rows(r),
                audit=r.audit or section_of(None), run_id=r.summary.run_id,
                ledger_rows=ledger_rows(r.ledger), lineage=r.lineage,
                lineage_rows=stage_rows(r.lineage.shown) if r.lineage else [],
                attribution=r.attribution, attribution_rows=fmt.attribution_rows(r.attribution),
                metric_rows=fmt.metric_rows(r.metrics), curves=curves, standalone=standalone,
                improvement_class=improvement_class(r.summary),
                score_svg=plots.score_plot(r.trajectory, r.timeline.end_s, r.summary.final_test),
                timeline_svg=plots.timeline_plot(r.timeline, job_links=not standalone))


def render_html(r: Report, curves: Curves | None = None,
                env: Environment | None = None) -> str:
    """The report page. `curves`: the run's training curves (`training_curves`); the report
    itself does not carry the job logs they are read from."""
    env = env or environment()
    ctx = report_context(r, curves or [], standalone=True)
    if r.narrative is not None:
        ctx["narrative_note"] = fmt.narrative_note(r.narrative)
    return env.get_template("report.html.jinja").render(**ctx)
