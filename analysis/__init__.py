"""Post-hoc analysis: structured run reports and comparisons, computed from the store.

    from a2rl.analysis import build_report, render_markdown, render_html, compare
    report = build_report(store, run_id)          # a pydantic `Report` (schema_version inside)
    report.model_dump_json(indent=2)              # JSON, schema in analysis/report.schema.json

Everything here reads the store and returns values; only callers write files, except
`export_run`/`import_run` (run archives, `archive.py`) and `a2rl export`'s other formats
(`export.py`, `formats/`: ATIF and Inspect logs), whose job is a file and a store load.
"""

import json

from .archive import ArchiveError, export_run, import_run
from .compare import Comparison, compare, render_csv, render_json, render_text
from .improvement import paired_improvement
from .render_html import Curves, render_html, training_curves
from .render_md import render_markdown
from .report import build_report
from .routes import classify
from .schema import SCHEMA_PATH, SCHEMA_VERSION, Report, json_schema

__all__ = [
    "SCHEMA_PATH", "SCHEMA_VERSION", "ArchiveError", "Comparison", "Report", "build_report",
    "classify", "compare", "export_run", "import_run", "json_schema", "paired_improvement",
    "render", "render_csv", "render_html", "render_json", "render_markdown", "render_text",
    "training_curves",
]


def render(report: Report, fmt: str, curves: Curves | None = None) -> str:
    """The report as `json`, `md` or `html` text; `curves` (`training_curves(store, run_id)`)
    are drawn in the HTML."""
    if fmt == "json":  # every non-ASCII character escaped: exact data, inert on a terminal
        return json.dumps(json.loads(report.model_dump_json()), indent=2) + "\n"
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report, curves)
    raise ValueError(f"unknown report format {fmt!r}: json, md or html")

