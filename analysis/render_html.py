"""The report as one self-contained HTML page: inline CSS, inline SVG plots, no scripts and
no network. Meant to be printable as a paper's appendix."""

from __future__ import annotations

from html import escape

from .fmt import (
    FAILURE_LABELS,
    ROUTE_LABELS,
    dur,
    evidence,
    metric_rows,
    narrative_note,
    summary_rows,
)
from .schema import Report, Timeline, Trajectory

CSS = """
body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#222;
 max-width:1100px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin-bottom:2px}h2{font-size:17px;border-bottom:1px solid #ddd;
 padding-bottom:3px;margin-top:28px}h3{font-size:14px;margin:16px 0 4px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;
 text-align:left;vertical-align:top}th{background:#f5f5f5}
code,pre{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace}
pre{background:#f8f8f8;border:1px solid #e3e3e3;padding:8px;overflow-x:auto;max-height:480px}
.muted{color:#777}.ev{margin:2px 0 2px 18px}.noise{color:#a60}.good{color:#080}.bad{color:#b00}
.narrative blockquote{border-left:3px solid #c9b;margin:6px 0;padding:2px 10px;
 white-space:pre-wrap}.add{color:#080}.del{color:#b00}.hunk{color:#06c}
svg{background:#fff;border:1px solid #e3e3e3}svg text{font:11px sans-serif;fill:#444}
"""
COLORS = {"graded": "#2a7", "refused": "#c33", "failed": "#e80", "queued": "#888",
          "grading": "#888", "exited": "#48c", "killed": "#c33", "timeout": "#c33",
          "lost": "#999", "running": "#8ac"}
W, PAD_L, PAD_R = 1000, 110, 20


def _x(t: float, end: float) -> float:
    return PAD_L + (W - PAD_L - PAD_R) * (t / end if end > 0 else 0.0)


def _axis(end: float, y: float) -> list[str]:
    out = [f'<line x1="{PAD_L}" y1="{y}" x2="{W - PAD_R}" y2="{y}" stroke="#999"/>']
    for i in range(6):
        t = end * i / 5
        x = _x(t, end)
        out += [f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>',
                f'<text x="{x:.1f}" y="{y + 16}" text-anchor="middle">{dur(t)}</text>']
    return out


def score_svg(tr: Trajectory, end: float) -> str:
    h, top, bottom = 300, 20, 260
    scores = [p.score for p in tr.points] + [p.ci_low for p in tr.points if p.ci_low is not None]
    scores += [p.ci_high for p in tr.points if p.ci_high is not None]
    scores += [tr.baseline] if tr.baseline is not None else []
    lo, hi = (min(scores), max(scores)) if scores else (0.0, 1.0)
    lo, hi = (lo - 0.05, hi + 0.05) if hi - lo < 0.1 else (lo - 0.05 * (hi - lo),
                                                              hi + 0.05 * (hi - lo))
    lo = max(lo, 0.0) if lo >= -0.05 else lo
    hi = min(hi, 1.0) if scores and max(scores) <= 1.0 else hi

    def y(v: float) -> float:
        return bottom - (bottom - top) * (v - lo) / ((hi - lo) or 1.0)

    out = [f'<svg id="score-plot" class="plot" '
           f'width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" '
           f'aria-label="score trajectory">']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        out += [f'<line x1="{PAD_L}" y1="{y(v):.1f}" x2="{W - PAD_R}" y2="{y(v):.1f}" '
                f'stroke="#eee"/>',
                f'<text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>']
    out += _axis(end, bottom)
    out.append(f'<text x="14" y="{(top + bottom) / 2}" transform="rotate(-90 14 '
               f'{(top + bottom) / 2})" text-anchor="middle">{tr.split} score</text>')
    if tr.baseline is not None:
        out += [f'<line class="baseline" x1="{PAD_L}" y1="{y(tr.baseline):.1f}" '
                f'x2="{W - PAD_R}" y2="{y(tr.baseline):.1f}" stroke="#c33" '
                f'stroke-dasharray="6 4"/>',
                f'<text x="{W - PAD_R - 4}" y="{y(tr.baseline) - 5:.1f}" text-anchor="end" '
                f'style="fill:#c33">baseline {tr.baseline:.3f}</text>']
    best_path = []
    for p in tr.points:
        if p.improved_best:
            best_path.append((_x(p.at_s, end), y(p.score)))
    if len(best_path) > 1:
        pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in best_path)
        out.append(f'<polyline points="{pts}" fill="none" stroke="#2a7" stroke-width="1.5"/>')
    for p in tr.points:
        x = _x(p.at_s, end)
        if p.ci_low is not None and p.ci_high is not None:
            out.append(f'<line x1="{x:.1f}" y1="{y(p.ci_low):.1f}" x2="{x:.1f}" '
                       f'y2="{y(p.ci_high):.1f}" stroke="#7a9"/>')
        fill = "#2a7" if p.improved_best else "#fff"
        out.append(f'<circle class="point" cx="{x:.1f}" cy="{y(p.score):.1f}" r="5" '
                   f'fill="{fill}" stroke="#2a7" stroke-width="2"><title>{escape(p.submission_id)}'
                   f' {p.score:.3f} at {dur(p.at_s)}</title></circle>')
    if not tr.points:
        out.append(f'<text x="{W / 2}" y="{h / 2}" text-anchor="middle">no graded submission'
                   '</text>')
    return "\n".join(out + ["</svg>"])


def _bar(cls: str, start: float, stop: float, end: float, y0: float, lane_h: float,
         style: str) -> str:
    a, b = _x(start, end), _x(stop, end)
    return (f'<rect class="{cls}" x="{a:.1f}" y="{y0 + 8}" width="{max(b - a, 1.5):.1f}" '
            f'height="{lane_h - 16}" {style}/>')


def timeline_svg(t: Timeline) -> str:
    end = t.end_s or 1.0
    lanes = ["tool calls", "jobs", "grading", "submissions", "idle"]
    lane_h, top = 34, 10
    h = top + lane_h * len(lanes) + 30
    out = [f'<svg id="timeline-plot" class="plot" '
           f'width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" aria-label="timeline">']
    for i, name in enumerate(lanes):
        y0 = top + i * lane_h
        out += [f'<text x="{PAD_L - 8}" y="{y0 + lane_h / 2 + 4}" text-anchor="end">{name}</text>',
                f'<line x1="{PAD_L}" y1="{y0 + lane_h}" x2="{W - PAD_R}" y2="{y0 + lane_h}" '
                f'stroke="#f0f0f0"/>']
    # Tool calls: one mark per pixel column (a run can have 10,000 calls), red if any failed.
    cols: dict[int, bool] = {}
    for c in t.tool_calls:
        col = int(_x(c.start_s, end))
        cols[col] = cols.get(col, False) or c.is_error
    for col, err in sorted(cols.items()):
        out.append(f'<rect class="call" x="{col}" y="{top + 6}" width="1.5" height="{lane_h - 12}"'
                   f' fill="{"#c33" if err else "#555"}"/>')
    y1 = top + lane_h
    for j in t.jobs:
        a, b = _x(j.start_s, end), _x(j.end_s if j.end_s is not None else end, end)
        color = COLORS.get(j.state, "#48c") if j.exit_code in (0, None) else "#c33"
        out.append(f'<rect class="job" x="{a:.1f}" y="{y1 + 8}" width="{max(b - a, 2):.1f}" '
                   f'height="{lane_h - 16}" fill="{color}" opacity="0.8"><title>'
                   f'{escape(j.id)} {escape(j.command[:80])} ({j.state}, exit {j.exit_code})'
                   f'</title></rect>')
    out += [_bar("grading", g.start_s, g.end_s, end, top + 2 * lane_h, lane_h, 'fill="#a7c"')
            for g in t.grading]
    y3 = top + 3 * lane_h
    for s in t.submissions:
        x = _x(s.at_s, end)
        out.append(f'<path class="submission" d="M{x:.1f},{y3 + 8} l6,9 l-6,9 l-6,-9 z" '
                   f'fill="{COLORS.get(s.status, "#888")}"><title>{escape(s.id)} {escape(s.path)}'
                   f' {s.status}</title></path>')
    out += [_bar("idle", g.start_s, g.end_s, end, top + 4 * lane_h, lane_h,
                 'fill="#ddd" stroke="#bbb"') for g in t.idle_gaps]
    out += _axis(end, top + len(lanes) * lane_h)
    return "\n".join(out + ["</svg>"])


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{f'<tr>{th}</tr>' if any(head) else ''}{body}</table>"


def _diff_html(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+")
               else "del" if line.startswith("-") else "")
        out.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return "<pre>" + "\n".join(out) + "</pre>"


def render_html(r: Report) -> str:
    s, m, t, e = r.summary, r.metrics, r.timeline, escape
    imp_cls = "muted" if s.improvement is None else "noise" if s.improvement.within_noise \
        else "good" if s.improvement.estimate > 0 else "bad"
    rows = [[e(k), f'<span class="{imp_cls}">{e(v)}</span>' if k == "improvement" else e(v)]
            for k, v in summary_rows(r)]
    rows.append(["final evaluation provenance", "<br>".join(
        f"{e(k)}: <code>{e(str(v)[:200])}</code>" for k, v in s.final_provenance.items()) or "–"])
    parts = [f"<h1>Run report: {e(s.run_id)}</h1>",
             f'<div class="muted">schema {e(r.schema_version)} · generated {e(r.generated_at)}'
             "</div>"]
    if r.narrative is not None:
        paras = [x.strip() for x in (r.narrative.text or "").split("\n\n") if x.strip()]
        parts += ['<section class="narrative"><h2>Narrative (LLM-generated)</h2>',
                  f'<p class="muted generated">{e(narrative_note(r.narrative))}</p>',
                  *(f"<blockquote>{e(x)}</blockquote>" for x in paras), "</section>"]
    parts += ["<h2>Summary</h2>", _table(["", ""], rows)]
    parts += ["<h2>Score trajectory</h2>", score_svg(r.trajectory, t.end_s),
              "<h2>Timeline</h2>", timeline_svg(t),
              f'<p class="muted">{len(t.tool_calls)} tool calls, {len(t.jobs)} jobs, '
              f"{len(t.submissions)} submissions over {dur(t.end_s)}; grading {dur(t.grading_s)};"
              f" idle {dur(t.idle_s)} (gaps over {dur(t.idle_threshold_s)} with no tool call and "
              "no job running).</p>"]
    parts.append("<h2>Training routes</h2>")
    for rt in r.routes:
        also = f" (also: {', '.join(ROUTE_LABELS[a] for a in rt.also)})" if rt.also else ""
        parts.append(f"<h3>{e(rt.submission_id)} <code>{e(rt.path)}</code>: "
                     f"{ROUTE_LABELS[rt.route]}{e(also)}</h3>")
        parts += [f'<div class="ev"><code>{e(evidence(x))}</code></div>' for x in rt.evidence]
    parts.append("<h2>Failures</h2>")
    for f in r.failures:
        parts.append(f'<h3 class="bad">{FAILURE_LABELS[f.type]} at {dur(f.at_s)}: '
                     f"{e(f.message)}</h3>")
        parts += [f'<div class="ev"><code>{e(evidence(x))}</code></div>' for x in f.evidence]
    if not r.failures:
        parts.append("<p>None detected.</p>")
    parts += ["<h2>Process metrics</h2>",
              _table(["metric", "value"], [[e(k), e(v)] for k, v in metric_rows(m)])]
    parts.append("<h2>Code history</h2>")
    for cv in r.code_history:
        parts.append(f"<h3>{e(cv.submission_id)} · snapshot {cv.snapshot_id} · "
                     f"{len(cv.files)} files</h3>")
        if cv.snapshot_id is None:
            parts.append("<p>No code snapshot (refused at once).</p>")
        elif not cv.changes:
            parts.append("<p>No change since the previous submission.</p>")
        for c in cv.changes:
            cut = " (truncated)" if c.truncated else ""
            parts.append(f"<div>{c.change}: <code>{e(c.path)}</code>{cut}</div>")
            if c.diff:
                parts.append(_diff_html(c.diff))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>a2rl run {e(s.run_id)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
