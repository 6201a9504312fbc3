"""Inline SVG plots of the viewer and the HTML report: rounded ticks, the final test score,
training curves.

Pure functions: values in, SVG text out (no scripts, so they print and work offline).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from html import escape

from .fmt import dur
from .schema import Timeline, Trajectory

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 900, 260, 100, 20, 16, 34
# TRL/transformers print `{'loss': 1.23, ...}` dicts; many scripts print `loss=1.23` or
# `reward: 0.5`. A number after the key, quoted or not.
CURVE_KEYS = ("loss", "reward", "train_loss", "rewards/mean", "reward_mean", "eval_loss")
_NUM = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+))"
_PAT = {k: re.compile(r"(?<![A-Za-z_/])['\"]?" + re.escape(k) + r"['\"]?\s*[:=]\s*['\"]?"
                      + _NUM) for k in CURVE_KEYS}


def nice_step(span: float, target: int = 5) -> float:
    """A 1, 2 or 5 times a power of ten step giving about `target` ticks over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    step = nice_step(hi - lo, target)
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def time_ticks(end: float) -> list[float]:
    """Ticks at round seconds, minutes or hours."""
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600):
        if end / step <= 8:
            return [i * step for i in range(int(end // step) + 1)]
    step = 43200
    return [i * step for i in range(int(end // step) + 1)]


def _fmt(v: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{v:.{digits}f}" if step < 1 or v != int(v) else f"{int(v)}"


def _frame(label: str, x_end: float, lo: float, hi: float, x_label_fmt: str = "time") -> \
        tuple[list[str], Callable[[float], float], Callable[[float], float]]:
    def x(t: float) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * (t / x_end if x_end > 0 else 0.0)

    def y(v: float) -> float:
        return H - PAD_B - (H - PAD_B - PAD_T) * ((v - lo) / ((hi - lo) or 1.0))

    out = [f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" '
           'stroke="#999"/>']
    ticks = nice_ticks(lo, hi)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    for v in ticks:
        out += [f'<line x1="{PAD_L}" y1="{y(v):.1f}" x2="{W - PAD_R}" y2="{y(v):.1f}" '
                'stroke="#eee"/>',
                f'<text class="ytick" x="{PAD_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
                f'{_fmt(v, step)}</text>']
    xt = time_ticks(x_end) if x_label_fmt == "time" else nice_ticks(0, x_end)
    for t in xt:
        out += [f'<line x1="{x(t):.1f}" y1="{H - PAD_B}" x2="{x(t):.1f}" y2="{H - PAD_B + 4}" '
                'stroke="#999"/>',
                f'<text class="xtick" x="{x(t):.1f}" y="{H - PAD_B + 16}" '
                f'text-anchor="middle">{dur(t) if x_label_fmt == "time" else int(t)}</text>']
    out.append(f'<text x="14" y="{(H - PAD_B + PAD_T) / 2}" transform="rotate(-90 14 '
               f'{(H - PAD_B + PAD_T) / 2})" text-anchor="middle">{escape(label)}</text>')
    return out, x, y


def _range(values: list[float], clamp01: bool) -> tuple[float, float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = max(0.05 * (hi - lo), 0.02 if clamp01 else abs(hi) * 0.05 or 0.5)
    lo, hi = lo - pad, hi + pad
    if clamp01:
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    step = nice_step(hi - lo)
    return math.floor(lo / step) * step, math.ceil(hi / step) * step


def score_plot(tr: Trajectory, end_s: float, final_test: float | None,
               final_label: str = "final test") -> str:
    """Graded scores over time with their intervals, the baseline, and the final test score."""
    vals = [p.score for p in tr.points] + [v for p in tr.points for v in (p.ci_low, p.ci_high)
                                           if v is not None]
    vals += [v for v in (tr.baseline, final_test) if v is not None]
    lo, hi = _range(vals, clamp01=all(0 <= v <= 1 for v in vals))
    end = end_s or max((p.at_s for p in tr.points), default=1.0) or 1.0
    out, x, y = _frame(f"{tr.split} score", end, lo, hi)
    svg = [f'<svg id="score-plot" class="plot" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="score trajectory">', *out]
    if tr.baseline is not None:
        svg += [f'<line class="baseline" x1="{PAD_L}" y1="{y(tr.baseline):.1f}" '
                f'x2="{W - PAD_R}" y2="{y(tr.baseline):.1f}" stroke="#c33" '
                'stroke-dasharray="6 4"/>',
                f'<text x="{PAD_L + 4}" y="{y(tr.baseline) - 5:.1f}" style="fill:#c33">'
                f'baseline {tr.baseline:.3f}</text>']
    best = [(x(p.at_s), y(p.score)) for p in tr.points if p.improved_best]
    if len(best) > 1:
        svg.append('<polyline points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in best)
                   + '" fill="none" stroke="#2a7" stroke-width="1.5"/>')
    for p in tr.points:
        if p.ci_low is not None and p.ci_high is not None:
            svg.append(f'<line x1="{x(p.at_s):.1f}" y1="{y(p.ci_low):.1f}" x2="{x(p.at_s):.1f}"'
                       f' y2="{y(p.ci_high):.1f}" stroke="#7a9"/>')
        svg.append(f'<a href="#sub-{escape(p.submission_id)}"><circle class="point" '
                   f'cx="{x(p.at_s):.1f}" cy="{y(p.score):.1f}" r="4.5" '
                   f'fill="{"#2a7" if p.improved_best else "#fff"}" stroke="#2a7" '
                   f'stroke-width="2"><title>{escape(p.submission_id)} {p.score:.3f} at '
                   f'{dur(p.at_s)}</title></circle></a>')
    if final_test is not None:
        fy = y(final_test)
        svg += [f'<line class="final" x1="{PAD_L}" y1="{fy:.1f}" x2="{W - PAD_R}" '
                f'y2="{fy:.1f}" stroke="#26a" stroke-width="1.5"/>',
                f'<text class="final-label" x="{W - PAD_R - 4}" y="{fy - 5:.1f}" '
                f'text-anchor="end" style="fill:#26a">{escape(final_label)} '
                f'{final_test:.3f}</text>']
    if not tr.points:
        svg.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no graded submission'
                   '</text>')
    return "\n".join(svg + ["</svg>"])


#: one colour per run on the compare page's plot (a colour-blind-safe palette, Okabe-Ito)
RUN_COLORS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000",
              "#f0e442")


def compare_plot(runs: list[tuple[str, Trajectory, float, float | None]]) -> str:
    """Every run's graded scores on one axes: (run id, trajectory, its timeline's end, its
    final test score) each, time counted from each run's own clock start. Each run has its
    colour, its points joined in time order, its baseline dashed and its final test score
    marked at the right edge; a legend names the colours."""
    vals = [v for _, tr, _, final in runs
            for v in [*(p.score for p in tr.points), tr.baseline, final] if v is not None]
    lo, hi = _range(vals, clamp01=all(0 <= v <= 1 for v in vals))
    end = max([e for _, _, e, _ in runs] + [p.at_s for _, tr, _, _ in runs for p in tr.points]
              + [1.0])
    splits = sorted({tr.split for _, tr, _, _ in runs})
    out, x, y = _frame(f"{splits[0]} score" if len(splits) == 1 else "score", end, lo, hi)
    svg = [f'<svg id="compare-plot" class="plot" viewBox="0 0 {W} {H}" role="img" '
           'aria-label="score trajectories of the compared runs">', *out]
    for i, (rid, tr, _, final) in enumerate(runs):
        color, name = RUN_COLORS[i % len(RUN_COLORS)], escape(rid)
        g = [f'<g class="run" data-run="{name}">']
        if tr.baseline is not None:
            g.append(f'<line class="baseline" x1="{PAD_L}" y1="{y(tr.baseline):.1f}" '
                     f'x2="{W - PAD_R}" y2="{y(tr.baseline):.1f}" stroke="{color}" '
                     'stroke-dasharray="3 5" opacity="0.6"/>')
        pts = sorted(tr.points, key=lambda p: p.at_s)

        def px(at: float) -> float:  # on the axis (a submission before the clock started)
            return x(min(max(at, 0.0), end))

        if len(pts) > 1:
            g.append('<polyline points="' + " ".join(f"{px(p.at_s):.1f},{y(p.score):.1f}"
                                                     for p in pts)
                     + f'" fill="none" stroke="{color}" stroke-width="1.5"/>')
        g += [f'<circle class="point" cx="{px(p.at_s):.1f}" cy="{y(p.score):.1f}" r="4" '
              f'fill="{color if p.improved_best else "#fff"}" stroke="{color}" '
              f'stroke-width="2"><title>{name} {escape(p.submission_id)} {p.score:.3f} at '
              f'{dur(p.at_s)}</title></circle>' for p in pts]
        if final is not None:
            fy = y(final)
            g.append(f'<path class="final" d="M{W - PAD_R},{fy:.1f} l-9,-5 l0,10 z" '
                     f'fill="{color}"><title>{name} final test {final:.3f}</title></path>')
        ly = PAD_T + 4 + 14 * i
        g += [f'<rect x="{PAD_L + 8}" y="{ly}" width="10" height="10" fill="{color}"/>',
              f'<text class="legend" x="{PAD_L + 22}" y="{ly + 9}">{name}</text>', "</g>"]
        svg += g
    return "\n".join(svg + ["</svg>"])


#: the step a log line is at: TRL's `'step': 10`, `global_step=10`, `step 10`, `Step 10/500`
_STEP = re.compile(r"(?<![A-Za-z_/])['\"]?(?:global_)?step['\"]?\s*[:=]?\s*['\"]?(\d+)",
                   re.IGNORECASE)


def curve_points(log: str) -> dict[str, list[tuple[int | None, float]]]:
    """The (step, value) points of each training metric a log prints, in order; the step is
    the one the same line names, None when it names none."""
    out: dict[str, list[tuple[int | None, float]]] = {}
    for line in log.splitlines():
        if len(line) > 4000:
            continue
        found = None
        for key, pat in _PAT.items():
            m = pat.search(line)
            if m:
                try:
                    v = float(m.group(1))
                except ValueError:
                    continue
                if math.isfinite(v):
                    if found is None:
                        st = _STEP.search(line)
                        found = (int(st.group(1)),) if st else (None,)
                    out.setdefault(key, []).append((found[0], v))
    return out


def curve_values(log: str) -> dict[str, list[float]]:
    """The values of each training metric a log prints, in order."""
    return {k: [v for _, v in pts] for k, pts in curve_points(log).items()}


def curves(logs: list[tuple[str, str]], max_jobs: int = 12) -> list[tuple[str, str, str]]:
    """(job id, metric, SVG) for each job whose log has at least 3 values of a metric; the
    last `max_jobs` such jobs (a run of 500 jobs would otherwise draw 500 plots)."""
    found = []
    for job_id, log in logs:
        for key, pts in curve_points(log).items():
            if len(pts) >= 3:
                found.append((job_id, key, pts))
    return [(j, k, curve_plot(k, [v for _, v in p], _steps(p))) for j, k, p in found[-max_jobs:]]


def _steps(pts: list[tuple[int | None, float]]) -> list[int] | None:
    """The points' steps when every point has one and they never go back (one training run);
    else None, and the curve is drawn against the logged point's index."""
    steps = [s for s, _ in pts]
    if any(s is None for s in steps):
        return None
    ok = [s for s in steps if s is not None]
    return ok if all(a <= b for a, b in zip(ok, ok[1:], strict=False)) else None


def curve_plot(metric: str, vals: list[float], steps: list[int] | None = None) -> str:
    """`vals` against their training steps (the x axis is the step) or, without steps,
    against the logged point's index."""
    xs = [float(s) for s in steps] if steps else [float(i) for i in range(len(vals))]
    lo, hi = _range(vals, clamp01=False)
    out, x, y = _frame(metric, max(xs) or 1.0, lo, hi, x_label_fmt="step")
    pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(xs, vals, strict=True))
    where = f"step {steps[-1]}" if steps else f"logged point {len(vals)}"
    axis = "step" if steps else "logged point"
    return "\n".join([f'<svg class="plot curve" viewBox="0 0 {W} {H}" role="img" '
                      f'aria-label="{escape(metric)} curve" data-x="{axis}">', *out,
                      f'<polyline points="{pts}" fill="none" stroke="#48c" stroke-width="1.5"/>',
                      f'<text class="xlabel" x="{W - PAD_R}" y="{H - 2}" text-anchor="end">'
                      f'{axis}</text>',
                      f'<text x="{W - PAD_R - 4}" y="{PAD_T + 10}" text-anchor="end">last '
                      f'{vals[-1]:.4g} ({where})</text>', "</svg>"])


LANES = ("tool calls", "jobs", "grading", "submissions", "idle")
STATE_COLORS = {"graded": "#2a7", "refused": "#c33", "failed": "#e80", "exited": "#48c",
                "killed": "#c33", "timeout": "#c33", "lost": "#999", "running": "#8ac"}


def timeline_plot(t: Timeline, job_links: bool = True) -> str:
    """The report's timeline lanes on a time axis with round ticks; submissions link to their
    entries on the page, and jobs too with `job_links` (the viewer's page lists them, the
    HTML report does not)."""
    end = t.end_s or 1.0
    lane_h, top, left, right = 30, 8, PAD_L, W - PAD_R
    h = top + lane_h * len(LANES) + 30

    def x(s: float) -> float:
        return left + (right - left) * (s / end)

    def clip(start: float, stop: float, least: float) -> tuple[float, float]:
        """A span's bar, clipped to the axis: grading that ends after the run's end (its final
        test evaluation) would otherwise draw past the frame."""
        a = min(max(x(start), left), right)
        b = min(max(x(stop), left), right)
        return min(a, right - least), max(b - a, least)

    out = [f'<svg id="timeline-plot" class="plot" viewBox="0 0 {W} {h}" role="img" '
           'aria-label="timeline">']
    for i, name in enumerate(LANES):
        y0 = top + i * lane_h
        out += [f'<text x="{left - 8}" y="{y0 + lane_h / 2 + 4}" text-anchor="end">{name}</text>',
                f'<line x1="{left}" y1="{y0 + lane_h}" x2="{right}" y2="{y0 + lane_h}" '
                'stroke="#f0f0f0"/>']
    cols: dict[int, bool] = {}  # one mark per pixel column: a run can have 10,000 calls
    for c in t.tool_calls:
        col = min(max(int(x(c.start_s)), left), int(right) - 2)  # on the axis, as the bars
        cols[col] = cols.get(col, False) or c.is_error
    out += [f'<rect class="call" x="{col}" y="{top + 5}" width="1.5" height="{lane_h - 10}" '
            f'fill="{"#c33" if err else "#555"}"/>' for col, err in sorted(cols.items())]
    y1 = top + lane_h
    for j in t.jobs:
        a, width = clip(j.start_s, j.end_s if j.end_s is not None else end, 2)
        color = STATE_COLORS.get(j.state, "#48c") if j.exit_code in (0, None) else "#c33"
        bar = (f'<rect class="job" x="{a:.1f}" y="{y1 + 7}" width="{width:.1f}" '
               f'height="{lane_h - 14}" fill="{color}" opacity="0.8"><title>{escape(j.id)} '
               f'{escape(j.command[:80])} ({j.state}, exit {j.exit_code})</title></rect>')
        out.append(f'<a href="#job-{escape(j.id)}">{bar}</a>' if job_links else bar)
    y2 = top + 2 * lane_h
    out += [f'<rect class="grading" x="{a:.1f}" y="{y2 + 7}" width="{w:.1f}" '
            f'height="{lane_h - 14}" fill="#a7c"/>'
            for a, w in (clip(g.start_s, g.end_s, 1.5) for g in t.grading)]
    y3 = top + 3 * lane_h
    for s in t.submissions:
        sx = min(max(x(s.at_s), left + 6), right - 6)  # the diamond stays inside the frame
        out.append(f'<a href="#sub-{escape(s.id)}"><path class="submission" '
                   f'd="M{sx:.1f},{y3 + 6} l6,9 l-6,9 l-6,-9 z" '
                   f'fill="{STATE_COLORS.get(s.status, "#888")}"><title>{escape(s.id)} '
                   f'{escape(s.path)} {s.status}</title></path></a>')
    y4 = top + 4 * lane_h
    out += [f'<rect class="idle" x="{a:.1f}" y="{y4 + 7}" width="{w:.1f}" '
            f'height="{lane_h - 14}" fill="#ddd" stroke="#bbb"/>'
            for a, w in (clip(g.start_s, g.end_s, 1.5) for g in t.idle_gaps)]
    ya = top + len(LANES) * lane_h
    out.append(f'<line x1="{left}" y1="{ya}" x2="{right}" y2="{ya}" stroke="#999"/>')
    for tick in time_ticks(end):
        out += [f'<line x1="{x(tick):.1f}" y1="{ya}" x2="{x(tick):.1f}" y2="{ya + 4}" '
                'stroke="#999"/>',
                f'<text class="xtick" x="{x(tick):.1f}" y="{ya + 16}" text-anchor="middle">'
                f'{dur(tick)}</text>']
    return "\n".join(out + ["</svg>"])
