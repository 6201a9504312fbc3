"""AlpacaEval 2.0's length-controlled win rate, computed by the `alpaca_eval` library itself
(the `paper` profile).

The reference harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/
alpacaeval/eval.py) scores with `alpaca_eval.evaluate`, whose metric under AlpacaEval 2.0 is
`alpaca_eval.metrics.glm_winrate.get_length_controlled_winrate` with the GLM
`length_controlled_v1`: a logistic regression

    preference ~ tanh(std_delta_len) + instruction_difficulty + not_gamed_baseline - 1

fitted with the library's `fit_LogisticRegressionCV` (L1, 5-fold grouped CV) on this model's
annotations together with the annotations of two "gamed" baselines (weight 0.2 / 2 each), the
instruction difficulties being the library's precomputed ones. The LC win rate is the mean
predicted preference at zero length difference.

One step is not the library's: `_get_featurized_data` fetches the precomputed file
`df_gamed.csv` from the hub itself, which cannot work offline or from a local copy. So
`featurize` below does exactly what it does with a frame we load (`load_df_gamed`: the same
file of the same dataset, or a local copy); the regression, its design matrices and its settings
are the library's objects. tests/test_paper_alpacaeval.py proves the result equals
`get_length_controlled_winrate` on a fixture of annotations.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

GLM_NAME = "length_controlled_v1"
GAMED_REPO = "tatsu-lab/alpaca_eval"
GAMED_FILE = "df_gamed.csv"
#: alpaca_eval's generator names: output_1 is the reference, output_2 the model evaluated
#: (`alpaca_eval.evaluate` calls `annotate_head2head(outputs_1=reference, outputs_2=model)`).
REFERENCE_NAME, MODEL_NAME = "reference", "model"


def _glm() -> Any:
    with warnings.catch_warnings():  # alpaca_eval imports pkg_resources, which warns
        warnings.simplefilter("ignore")
        from alpaca_eval.metrics import glm_winrate
    return glm_winrate


def load_df_gamed(data_dir: Path | None) -> pd.DataFrame:
    """The precomputed `df_gamed.csv` (instruction difficulties and the gamed baselines'
    annotations) from `data_dir`, or from the dataset on the hub as alpaca_eval fetches it."""
    if data_dir is not None:
        path = data_dir / GAMED_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{data_dir} has no {GAMED_FILE} (AlpacaEval's length "
                                    "control needs it under the paper profile)")
    else:
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(repo_id=GAMED_REPO, filename=GAMED_FILE,
                                        repo_type="dataset"))
        except Exception as exc:
            raise RuntimeError(
                f"cannot fetch {GAMED_FILE} from the dataset {GAMED_REPO} on the Hugging Face "
                f"hub and no cached copy exists ({type(exc).__name__}: {exc}); connect once, "
                "or set A2RL_ALPACAEVAL_DIR to a directory holding it") from exc
    return pd.read_csv(path)


def annotations_frame(instruction_index: Sequence[int], instructions: Sequence[str],
                      model_outputs: Sequence[str], reference_outputs: Sequence[str],
                      preferences: Sequence[float | None],
                      annotator: str = "alpaca_eval_gpt4_turbo_fn") -> pd.DataFrame:
    """Annotations in alpaca_eval's schema. `preferences` are ours (1 model wins, 0.5 draw,
    0 reference wins, None unparsed); alpaca_eval's are 2, 1.5, 1 and NaN. The frame's index is
    the instruction's position in the 805-row evaluation set, which `featurize` reads (as
    `reset_index` does in alpaca_eval) to look up the instruction's difficulty."""
    n = len(instruction_index)
    if not (len(instructions) == len(model_outputs) == len(reference_outputs)
            == len(preferences) == n):
        raise ValueError("annotation columns differ in length")
    prefs = [math.nan if p is None else 1.0 + float(p) for p in preferences]
    return pd.DataFrame(
        {"instruction": list(instructions), "output_1": list(reference_outputs),
         "output_2": list(model_outputs), "generator_1": REFERENCE_NAME,
         "generator_2": MODEL_NAME, "annotator": annotator, "preference": prefs},
        index=pd.Index([int(i) for i in instruction_index]))


def featurize(df_annotations: pd.DataFrame, df_gamed: pd.DataFrame, formula: str,
              regularize_to_baseline_lambda: float | None
              ) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series | None]:
    """alpaca_eval 0.6.6 `glm_winrate._get_featurized_data`, step for step, with `df_gamed`
    given instead of downloaded (its quirks kept: the difficulty is looked up by the row label
    of the first occurrence of each index in df_gamed)."""
    glm = _glm()
    df_gamed = df_gamed.drop(columns=["model"])
    instruction_difficulty = df_gamed.drop_duplicates("index")["instruction_difficulty"]

    df = df_annotations.reset_index()
    len_1 = df["output_1"].str.len()
    len_2 = df["output_2"].str.len()
    std_delta_len = len_1 - len_2
    df = df[["preference", "index"]].copy()
    df["std_delta_len"] = std_delta_len / std_delta_len.std()
    df["preference"] = df["preference"].astype(float).replace({0.0: 1.5}) - 1
    df["instruction_difficulty"] = df["index"].transform(lambda g: instruction_difficulty[g])
    df["not_gamed_baseline"] = True

    df_test = df[["instruction_difficulty", "not_gamed_baseline"]].copy()
    df_test["std_delta_len"] = 0

    if regularize_to_baseline_lambda:
        df_gamed_and_m = pd.concat([df_gamed, df], axis=0)
        df_xy_train, df_x_test = glm.make_dmatrix_for_model(df_gamed_and_m, df_test,
                                                            formula=formula)
        sample_weight = (df_gamed_and_m["not_gamed_baseline"]).astype(float) + (
            regularize_to_baseline_lambda * (~df_gamed_and_m["not_gamed_baseline"])
        ).astype(float) / 2
        return df_xy_train, df_x_test, sample_weight
    df_xy_train, df_x_test = glm.make_dmatrix_for_model(df, df_test, formula=formula)
    return df_xy_train, df_x_test, None


def length_controlled_win_rate(df_annotations: pd.DataFrame, df_gamed: pd.DataFrame,
                               glm_name: str = GLM_NAME) -> dict[str, Any]:
    """AlpacaEval's metrics on a 0-1 scale: `lc_win_rate` (the harness's score, divided by
    100), `lc_standard_error`, `win_rate` and its `standard_error`, `n_wins`, `n_draws`,
    `n_total` (unparsed annotations are left out, as alpaca_eval leaves them out)."""
    glm = _glm()
    info = glm.GLM_INFO[glm_name]
    raw = glm.get_winrate(df_annotations)
    x_train, x_test, sample_weight = featurize(df_annotations, df_gamed, info["formula"],
                                               info["regularize_to_baseline_lambda"])
    keep = x_train["preference"].notna()
    x_train = x_train[keep]
    if sample_weight is not None:
        sample_weight = sample_weight[keep]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's convergence and deprecation notes
        model = glm.fit_LogisticRegressionCV(x_train, "preference", is_ytrue_proba=True,
                                             sample_weight=sample_weight, **info["kwargs"])
    predicted = model.predict_proba(x_test)[:, 1]
    return {"lc_win_rate": float(predicted.mean()),
            "lc_standard_error": float(pd.Series(predicted).sem()),
            "win_rate": float(raw["win_rate"]) / 100,
            "standard_error": float(raw["standard_error"]) / 100,
            "n_wins": int(raw["n_wins"]), "n_draws": int(raw["n_draws"]),
            "n_total": int(raw["n_total"]),
            "weights": {k: float(v) for k, v in zip(x_test.columns, model.coef_[0],
                                                     strict=True)},
            "penalty_C": float(model.C_[0]),
            "method": f"alpaca_eval {glm_name} GLM (get_length_controlled_winrate)"}


# --- the paired bootstrap of the paper profile's improvement ----------------------------------
#: Resamples of the paired bootstrap: each refits the GLM twice (both evaluations), about 20 ms
#: a fit on 805 instructions beside the 1,610 gamed rows, so 2,000 would take over a minute.
BOOTSTRAP_RESAMPLES = 400
#: fit_LogisticRegressionCV's defaults (alpaca_eval 0.6.6 metrics/glm_winrate.py `dflt_kwargs`)
FIT_KWARGS: dict[str, Any] = {"random_state": 123, "dual": False, "penalty": "l1",
                              "solver": "liblinear", "fit_intercept": False}


@dataclass(frozen=True)
class Design:
    """One evaluation's annotations and the gamed baselines, as numbers, for refitting the
    `length_controlled_v1` GLM on item weights (`lc_statistic`). Columns are the GLM's, in its
    order: tanh(std_delta_len), instruction_difficulty, not_gamed_baseline."""

    delta: np.ndarray  # len(output_1) - len(output_2) per annotation (reference minus model)
    preference: np.ndarray  # in [0, 1] (alpaca_eval's minus 1, its 0 read as a draw); NaN unparsed
    difficulty: np.ndarray  # instruction_difficulty of each annotation's instruction
    gamed_x: np.ndarray  # (m, 3) design rows of the gamed baselines (fixed)
    gamed_y: np.ndarray
    gamed_w: np.ndarray
    penalty_C: float  # the penalty alpaca_eval's cross-validation chose on all items

    def __eq__(self, other: object) -> bool:
        """Equal numbers (NaN preferences equal where both are unparsed)."""
        if not isinstance(other, Design):
            return NotImplemented
        return self.penalty_C == other.penalty_C and all(
            np.array_equal(getattr(self, k), getattr(other, k), equal_nan=True)
            for k in ("delta", "preference", "difficulty", "gamed_x", "gamed_y", "gamed_w"))

    __hash__ = None  # type: ignore[assignment]  # arrays: not hashable


def design(df_annotations: pd.DataFrame, df_gamed: pd.DataFrame, penalty_C: float,
           glm_name: str = GLM_NAME) -> Design:
    """The numbers `featurize` builds, before normalizing the length difference (which each
    resample redoes on the items it drew). The same lookups as there, quirks included."""
    info = _glm().GLM_INFO[glm_name]
    lam = info["regularize_to_baseline_lambda"]
    if not lam:
        raise ValueError(f"{glm_name}: only the GLM regularized to the gamed baselines is "
                         "supported")
    gamed = df_gamed.drop(columns=["model"])
    difficulty_of = gamed.drop_duplicates("index")["instruction_difficulty"]
    df = df_annotations.reset_index()
    delta = (df["output_1"].str.len() - df["output_2"].str.len()).to_numpy(float)
    pref = df["preference"].astype(float).replace({0.0: 1.5}).to_numpy(float) - 1
    difficulty = np.array([difficulty_of[g] for g in df["index"]], dtype=float)
    keep = gamed["preference"].notna().to_numpy()
    gx = np.column_stack([np.tanh(gamed["std_delta_len"].to_numpy(float)),
                          gamed["instruction_difficulty"].to_numpy(float),
                          gamed["not_gamed_baseline"].astype(float).to_numpy()])[keep]
    gy = gamed["preference"].to_numpy(float)[keep]
    # featurize's sample weight: 1 for this model's rows, lambda / 2 for the gamed rows
    gw = (gamed["not_gamed_baseline"].astype(float)
          + lam * (~gamed["not_gamed_baseline"].astype(bool)).astype(float) / 2).to_numpy()[keep]
    return Design(delta=delta, preference=pref, difficulty=difficulty, gamed_x=gx, gamed_y=gy,
                  gamed_w=gw, penalty_C=penalty_C)


def _fit_one(d: Design, w: np.ndarray) -> float:
    """The LC win rate of one resample (`w`: how often each annotation was drawn)."""
    from sklearn.linear_model import LogisticRegression

    drawn = w > 0
    total = w[drawn].sum()
    mean = (w[drawn] * d.delta[drawn]).sum() / total
    # pandas' std (ddof 1) of the drawn rows, duplicates counted, NaN preferences included
    sd = math.sqrt((w[drawn] * (d.delta[drawn] - mean) ** 2).sum() / (total - 1)) \
        if total > 1 else math.nan
    train = drawn & ~np.isnan(d.preference)
    x = np.column_stack([np.tanh(d.delta[train] / sd) if sd > 0 else np.zeros(train.sum()),
                         d.difficulty[train], np.ones(train.sum())])
    x_all = np.vstack([d.gamed_x, x])
    y_all = np.concatenate([d.gamed_y, d.preference[train]])
    w_all = np.concatenate([d.gamed_w, w[train]])
    # fit_LogisticRegressionCV with probabilities as targets: every row once as label 1
    # (weight p w) and once as label 0 (weight (1 - p) w)
    model = LogisticRegression(C=d.penalty_C, **FIT_KWARGS)
    model.fit(np.vstack([x_all, x_all]),
              np.concatenate([np.ones(len(y_all)), np.zeros(len(y_all))]),
              sample_weight=np.concatenate([y_all * w_all, (1 - y_all) * w_all]))
    logit = model.coef_[0][1] * d.difficulty[drawn] + model.coef_[0][2]
    predicted = 1.0 / (1.0 + np.exp(-logit))
    return float((w[drawn] * predicted).sum() / total)


def lc_statistic(d: Design, weights: np.ndarray) -> np.ndarray:
    """The LC win rate per row of item weights (bootstrap counts), the GLM refitted on each:
    its formula, design, sample weights, solver and the penalty alpaca_eval's cross-validation
    chose on all items (rerunning that 5-fold search would cost 50 fits per resample). With
    weights all 1 it is `length_controlled_win_rate`'s LC (tests/test_paper_alpacaeval.py)."""
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # liblinear's convergence notes
        return np.array([_fit_one(d, row) for row in w])
