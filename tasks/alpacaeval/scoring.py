"""AlpacaEval's score: the judge's pairwise verdicts made a length-controlled win rate.

Two scorers over the one judge client (`judge.Judge`, on `a2rl.tasks.scorers.judge`):
`win_rate_score` for the `a2rl` profile (our judge, `length_control.py`) and `paper_win_rate`
for the `paper` profile (alpaca_eval's annotator, `paper_annotator.py`, and its GLM,
`paper_length_control.py`). Each item's `parsed` is the judgment's record (verdict, position,
every raw answer, flags); the score is not a share of items correct, so each gives its own
interval.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.stats import normal_interval

from ..base import ItemResult, TaskScore
from . import paper_length_control as paper_lc
from .judge import Judge
from .length_control import length_controlled_win_rate, win_rate
from .paper_annotator import PaperAnnotator
from .task import PAPER_CI_METHOD, PAPER_MAX_MODEL_LEN


def win_rate_score(judge: Judge, items: Sequence[dict[str, Any]],
                   outputs: Sequence[str]) -> TaskScore:
    """The `a2rl` profile: our judge's verdicts, the length-controlled win rate as the score
    (its interval), the raw win rate and the judge's counts as metrics."""
    requests_before = judge.requests_made
    judgments = judge.judge_many([it["id"] for it in items], [it["prompt"] for it in items],
                                 list(outputs), [it["reference"] for it in items])
    results: list[ItemResult] = []
    for item, output, j in zip(items, outputs, judgments, strict=True):
        record = {**j.to_dict(), "preference": j.preference,
                  "model_length": len(output), "reference_length": len(item["reference"])}
        results.append(ItemResult(id=item["id"], prompt=item["prompt"], output=output,
                                  expected=item["reference"], correct=j.winner == "model",
                                  parsed=json.dumps(record)))
    prefs = [j.preference for j in judgments]
    raw = win_rate(prefs)
    lc = length_controlled_win_rate(prefs, [len(o) for o in outputs],
                                    [len(it["reference"]) for it in items])
    counts = {w: sum(j.winner == w for j in judgments)
              for w in ("model", "reference", "draw", "error")}
    n = len(results)
    metrics = {
        "lc_win_rate": lc["lc_win_rate"],
        "lc_win_rate_ci": lc["ci"],
        "lc_method": lc["method"],
        "ci_method": lc["method"],
        "lc_intercept": lc["intercept"],
        "lc_length_slope": lc["slope"],
        "win_rate": raw["win_rate"],
        "win_rate_ci": raw["ci"],
        "n_wins": counts["model"],
        "n_losses": counts["reference"],
        "n_draws": counts["draw"],
        "n_judge_errors": counts["error"],
        "n_addressed_to_judge": sum(bool(j.flags) for j in judgments),
        "n_cached": sum(j.cached for j in judgments),
        "n_model_shown_first": sum(j.model_position == "m" for j in judgments),
        "judge_requests": judge.requests_made - requests_before,
        "avg_output_length": sum(len(o) for o in outputs) / n if n else 0.0,
        "judge": judge.config.public(),
    }
    return TaskScore(score=lc["lc_win_rate"], n_items=n, n_correct=counts["model"],
                     ci=tuple(lc["ci"]), ci_method=lc["method"], metrics=metrics,
                     items=results)


def paper_win_rate(judge: Judge, items: Sequence[dict[str, Any]], outputs: Sequence[str],
                   data_dir: Path | None) -> TaskScore:
    """The `paper` profile: alpaca_eval's annotator and its length-controlled GLM. The
    instruction index of the GLM's difficulty term is the item's position in the AlpacaEval
    file (its id's number), as alpaca_eval's positional index is; `data_dir` holds the gamed
    baselines' file offline (None: the package's)."""
    outputs = [o.strip() for o in outputs]  # harness eval.py: out.outputs[0].text.strip()
    annotator = PaperAnnotator(judge)
    requests_before = annotator.judge.requests_made
    annotations = annotator.annotate([it["prompt"] for it in items], outputs,
                                     [it["reference"] for it in items])
    if all(a.preference is None for a in annotations):
        # nothing to fit (the judge never answered usably): no win, and the record says why
        return TaskScore(
            score=0.0, n_items=len(items), n_correct=0, ci=(0.0, 1.0),
            ci_method="none: no parsable annotation",
            metrics={"lc_win_rate": 0.0, "lc_method": "no parsable annotation: nothing "
                     "to fit", "n_judge_errors": len(items),
                     "judge_requests": annotator.judge.requests_made - requests_before,
                     "judge": annotator.public()},
            items=[ItemResult(id=it["id"], prompt=it["prompt"], output=o,
                              expected=it["reference"], correct=False,
                              parsed=json.dumps({"error": a.error, "raw_answers": a.raw}))
                   for it, o, a in zip(items, outputs, annotations, strict=True)])
    frame = paper_lc.annotations_frame([int(str(it["id"]).rsplit("-", 1)[1]) for it in items],
                                       [it["prompt"] for it in items], outputs,
                                       [it["reference"] for it in items],
                                       [a.ours for a in annotations])
    lc = paper_lc.length_controlled_win_rate(frame, paper_lc.load_df_gamed(data_dir))
    results = []
    for item, output, a in zip(items, outputs, annotations, strict=True):
        record = {"preference": a.preference, "is_switched_outputs": a.is_switched,
                  "raw_answers": a.raw, "error": a.error, "attempts": a.attempts,
                  "cached": a.cached, "flags": a.flags, "model_length": len(output),
                  "reference_length": len(item["reference"])}
        results.append(ItemResult(id=item["id"], prompt=item["prompt"], output=output,
                                  expected=item["reference"], correct=a.preference == 2.0,
                                  parsed=json.dumps(record)))
    n = len(results)
    score, se = lc["lc_win_rate"], lc["lc_standard_error"]
    # alpaca_eval reports the standard error of the LC win rate; its normal 95% interval
    ci = normal_interval(score, se)
    metrics = {
        "lc_win_rate": score, "lc_standard_error": se, "lc_win_rate_ci": list(ci),
        "lc_method": lc["method"], "lc_weights": lc["weights"],
        "win_rate": lc["win_rate"], "standard_error": lc["standard_error"],
        "n_wins": lc["n_wins"], "n_draws": lc["n_draws"],
        "n_losses": sum(a.preference == 1.0 for a in annotations),
        "n_judge_errors": sum(a.preference is None for a in annotations),
        "n_addressed_to_judge": sum(bool(a.flags) for a in annotations),
        "n_cached": sum(a.cached for a in annotations),
        "judge_requests": annotator.judge.requests_made - requests_before,
        "avg_output_length": sum(len(o) for o in outputs) / n if n else 0.0,
        "judge": annotator.public(), "max_model_len": PAPER_MAX_MODEL_LEN,
    }
    return TaskScore(score=score, n_items=n, n_correct=lc["n_wins"], ci=ci,
                     ci_method=PAPER_CI_METHOD, metrics=metrics, items=results)
