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
from pathlib import Path
from typing import Any

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
            "method": f"alpaca_eval {glm_name} GLM (get_length_controlled_winrate)"}
