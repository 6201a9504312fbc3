"""AlpacaEval's `paper` profile against the `alpaca_eval` library the reference harness runs.

The length-controlled win rate of `a2rl.tasks.alpacaeval.paper_length_control` must equal
`alpaca_eval.metrics.glm_winrate.get_length_controlled_winrate` on the same annotations. The
library downloads `df_gamed.csv` from the hub, which this machine cannot reach: the test points
its download at the fixture copy (tests/fixtures/alpacaeval/df_gamed.csv, the file's schema).
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from a2rl.tasks.alpacaeval.paper_length_control import (
    annotations_frame,
    length_controlled_win_rate,
    load_df_gamed,
)

FIXTURES = Path(__file__).parent / "fixtures" / "alpacaeval"

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from alpaca_eval.metrics import glm_winrate


@pytest.fixture
def library_lc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """alpaca_eval's own function, its hub download answered by the fixture file."""
    calls: list[dict[str, Any]] = []

    def download(**kw: Any) -> str:
        calls.append(kw)
        return str(FIXTURES / kw["filename"])

    monkeypatch.setattr(glm_winrate, "hf_hub_download", download)

    def run(annotations: pd.DataFrame) -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = glm_winrate.get_length_controlled_winrate(
                annotations.copy(), save_weights_dir=None, is_warn_extreme_changes=False)
        assert calls and calls[-1]["repo_id"] == "tatsu-lab/alpaca_eval"
        assert calls[-1]["filename"] == "df_gamed.csv"
        return out
    return run


def annotations(n: int, seed: int, verbose_bias: float) -> pd.DataFrame:
    """n annotations over instructions 0..n-1 (in a shuffled order): model outputs of random
    lengths around the reference's; the judge prefers the longer output with probability
    0.5 + verbose_bias; one draw and one unparsed annotation."""
    rng = random.Random(seed)
    index = list(range(n))
    rng.shuffle(index)
    instructions, outputs, references, prefs = [], [], [], []
    for i in index:
        ref_len = rng.randint(200, 1200)
        out_len = max(1, int(ref_len * rng.uniform(0.3, 2.5)))
        instructions.append(f"instruction {i}")
        references.append("r" * ref_len)
        outputs.append("o" * out_len)
        longer_wins = rng.random() < 0.5 + verbose_bias
        model_longer = out_len > ref_len
        prefs.append(1.0 if longer_wins == model_longer else 0.0)
    prefs[3] = 0.5
    prefs[7] = None
    return annotations_frame(index, instructions, outputs, references, prefs)


@pytest.mark.parametrize(("n", "seed", "bias"), [(60, 1, 0.45), (40, 2, 0.45), (50, 3, -0.45)])
def test_lc_win_rate_equals_alpaca_eval(n: int, seed: int, bias: float, library_lc: Any) -> None:
    df = annotations(n, seed, bias)
    ours = length_controlled_win_rate(df, load_df_gamed(FIXTURES))
    theirs = library_lc(df)
    assert ours["lc_win_rate"] * 100 == pytest.approx(theirs["length_controlled_winrate"],
                                                      abs=1e-9)
    assert ours["lc_standard_error"] * 100 == pytest.approx(theirs["lc_standard_error"],
                                                            abs=1e-9)
    assert ours["win_rate"] * 100 == pytest.approx(theirs["win_rate"], abs=1e-9)
    assert (ours["n_wins"], ours["n_draws"], ours["n_total"]) == (
        theirs["n_wins"], theirs["n_draws"], theirs["n_total"])
    assert ours["n_total"] == n - 1  # the unparsed annotation is left out
    # a real fit: every term of the GLM, the instruction difficulty included, is in use
    assert all(w != 0.0 for w in ours["weights"].values()), ours["weights"]
    assert ours["lc_win_rate"] != pytest.approx(0.5, abs=0.02)


def test_length_control_discounts_verbosity(library_lc: Any) -> None:
    """A judge that rewards length: the raw win rate of a verbose model is high, the LC one is
    pulled back towards what equal lengths would give."""
    df = annotations(60, 4, 0.45)
    df["output_2"] = [o * 3 for o in df["output_2"]]  # the model is always much longer
    df["preference"] = [2.0 if i % 6 else 1.0 for i in range(len(df))]
    ours = length_controlled_win_rate(df, load_df_gamed(FIXTURES))
    assert ours["lc_win_rate"] * 100 == pytest.approx(library_lc(df)["length_controlled_winrate"],
                                                      abs=1e-9)
    assert ours["lc_win_rate"] < ours["win_rate"]
    assert ours["weights"]["np.tanh(std_delta_len)"] != 0.0


def test_df_gamed_missing_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="df_gamed.csv"):
        load_df_gamed(tmp_path)
