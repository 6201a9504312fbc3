"""AlpacaEval's `paper` profile against the `alpaca_eval` library the reference harness runs.

The length-controlled win rate of `a2rl.tasks.alpacaeval.paper_length_control` must equal
`alpaca_eval.metrics.glm_winrate.get_length_controlled_winrate` on the same annotations. The
library downloads `df_gamed.csv` from the hub, which this machine cannot reach: the test points
its download at the fixture copy (tests/fixtures/alpacaeval/df_gamed.csv, the file's schema).
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from a2rl.tasks.alpacaeval.paper_length_control import (
    annotations_frame,
    length_controlled_win_rate,
    load_df_gamed,
)
from a2rl.tasks.untrusted import Fence

from .conftest import require
from .fake_judge import unfence

FIXTURES = Path(__file__).parent / "fixtures" / "alpacaeval"


@pytest.fixture(autouse=True)
def _alpaca_eval_installed() -> None:
    require(importlib.util.find_spec("alpaca_eval") is not None,
            "alpaca-eval is not installed: pip install -c constraints.txt alpaca-eval==0.6.6 "
            "(or scripts/setup.sh)")


@pytest.fixture
def library_lc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """alpaca_eval's own function, its hub download answered by the fixture file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from alpaca_eval.metrics import glm_winrate
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


# --- the task under the paper profile, judged through a real local HTTP judge -------------
SHOWN_RE = re.compile(r'"model": "(m|M)",\s*"output": """(.*?)"""\s*}', re.DOTALL)


def rank_by_marker(messages: list[dict[str, Any]]) -> Any:
    """The judge's function call: the output containing GOOD ranks first (else the longer);
    a reply the parser cannot read for the instruction marked UNPARSABLE."""
    from .fake_openai import Call

    user = next(m["content"] for m in messages if m["role"] == "user")
    if "UNPARSABLE" in user:
        return "I prefer the first one."
    shown = dict(SHOWN_RE.findall(user))
    good = {k: "GOOD" in v for k, v in shown.items()}
    best = (("m" if good["m"] else "M") if good["m"] != good["M"]
            else ("m" if len(shown["m"]) >= len(shown["M"]) else "M"))
    other = "M" if best == "m" else "m"
    return Call("make_partial_leaderboard",
                {"ordered_models": [{"model": best, "rank": 1}, {"model": other, "rank": 2}]})


def paper_task(server: Any, cache: Any = None) -> Any:
    from a2rl.llm import Endpoint, RetryPolicy
    from a2rl.tasks.alpacaeval import AlpacaEvalTask
    from a2rl.tasks.alpacaeval.judge import Judge, JudgeConfig

    judge = Judge(JudgeConfig(Endpoint(base_url=server.base_url, model="fake-judge"),
                              RetryPolicy(backoff_s=0.001, timeout_s=10)), cache, api_key="sk-test")
    task = AlpacaEvalTask(n_train=8, n_dev=4, judge=judge)
    task.profile = "paper"  # what with_profile("paper") does
    task.spec = task.paper_spec
    return task


@pytest.fixture
def home(tmp_path: Path) -> Any:
    from a2rl.settings import Settings

    return Settings(home=tmp_path / "home",
                    tasks={"alpacaeval": {"data_dir": str(FIXTURES)}})


def test_paper_task_judges_with_the_package_annotator(home: Any, library_lc: Any) -> None:
    from a2rl.tasks.alpacaeval import paper_annotator

    from .fake_openai import FakeOpenAI

    with FakeOpenAI([rank_by_marker] * 40) as server:
        task = paper_task(server)
        assert task.spec.grader.max_new_tokens == 512 and task.spec.default_budget == "12h"
        items = task.load_split("test", home)
        good = {0, 2, 3, 7, 11}
        outputs = [(f"  GOOD answer to: {it['prompt']}\n" if i in good else "meh")
                   for i, it in enumerate(items)]
        outputs[5] = items[5]["reference"]  # identical: a draw, no request
        items[9] = {**items[9], "prompt": items[9]["prompt"] + " UNPARSABLE"}
        scored = task.score_outputs(items, outputs)
        bodies = list(server.requests)
    records = [json.loads(r.parsed or "{}") for r in scored.items]
    assert [r["preference"] for r in records] == [
        2.0 if i in good else 1.5 if i == 5 else None if i == 9 else 1.0 for i in range(12)]
    assert len(bodies) == 11 and scored.metrics["judge_requests"] == 11  # unparsable: no retry
    assert scored.metrics["n_judge_errors"] == 1 and scored.metrics["n_draws"] == 1
    assert scored.items[0].output == outputs[0].strip()  # outputs are stripped, as the harness
    # the request is the package's config: its prompt, its function call, 100 tokens, greedy
    config = paper_annotator.annotator_config()
    template = paper_annotator.prompt_template()
    for body in bodies:
        assert body["model"] == "fake-judge" and body["temperature"] == 0
        assert body["max_tokens"] == 100 and body["tools"] == config["completions_kwargs"]["tools"]
        assert body["tool_choice"] == config["completions_kwargs"]["tool_choice"]
        system = template.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0].strip()
        assert body["messages"][0] == {"role": "system", "content": system}
    # the order of each pair is alpaca_eval's switch: the model's output is `m` when switched
    for i, (item, record) in enumerate(zip(items, records, strict=True)):
        if i in (5,):
            continue
        body = next(b for b in bodies if item["prompt"] in b["messages"][1]["content"]
                    and item["reference"] in b["messages"][1]["content"])
        shown = dict(SHOWN_RE.findall(body["messages"][1]["content"]))
        # the output reaches the judge whole, inside its fence (a2rl.tasks.untrusted)
        assert unfence(shown["m" if record["is_switched_outputs"] else "M"]) == \
            outputs[i].strip()
    assert {r["is_switched_outputs"] for r in records} == {True, False}
    # the score is alpaca_eval's own LC win rate on these annotations
    frame = annotations_frame(range(12), [it["prompt"] for it in items],
                              [o.strip() for o in outputs], [it["reference"] for it in items],
                              [None if r["preference"] is None else r["preference"] - 1
                               for r in records])
    assert scored.score * 100 == pytest.approx(library_lc(frame)["length_controlled_winrate"],
                                               abs=1e-9)
    low, high = scored.ci or (0, 0)
    assert 0.0 <= low <= scored.score <= high <= 1.0
    assert scored.metrics["judge"]["annotator"] == "alpaca_eval_gpt4_turbo_fn"
    assert scored.metrics["judge"]["harness_model"] == "gpt-5.2"


def test_paper_judgments_are_cached(home: Any) -> None:
    from a2rl.tasks.alpacaeval.judge import JudgeCache

    from .fake_openai import FakeOpenAI

    cache = JudgeCache(home.home_dir / "judge-cache" / "judge.sqlite")
    with FakeOpenAI([rank_by_marker] * 24) as server:
        task = paper_task(server, cache)
        items = task.load_split("test", home)
        outputs = [f"GOOD {i}" if i % 3 else "meh" for i in range(12)]
        first = task.score_outputs(items, outputs)
        fresh = paper_task(server, JudgeCache(cache.path))
        again = fresh.score_outputs(fresh.load_split("test", home), outputs)
        assert len(server.requests) == 12 and again.metrics["n_cached"] == 12
    assert again.score == first.score and again.metrics["judge_requests"] == 0


class EchoEngine:
    """GOOD answers for the first half of the prompts, a short loss for the rest."""

    engine_name, engine_version = "echo", "0"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompts: Any, max_new_tokens: int, stop: Any = ()) -> list[str]:
        self.calls.append({"n": len(prompts), "max_new_tokens": max_new_tokens})
        half = len(prompts) // 2
        return [f"GOOD: {p[0]['content']}  " if i < half else "meh"
                for i, p in enumerate(prompts)]


def test_paper_evaluate_end_to_end(home: Any, tmp_path: Path) -> None:
    from a2rl.grading.evaluate import evaluate

    from .fake_openai import FakeOpenAI

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    engine = EchoEngine()
    with FakeOpenAI([rank_by_marker] * 12) as server:
        task = paper_task(server)
        result = evaluate(task, checkpoint, "test", home, engine=engine)  # type: ignore[arg-type]
    assert engine.calls == [{"n": 12, "max_new_tokens": 512}]
    assert result.n_items == 12 and result.metrics["n_wins"] == 6
    assert result.metrics["win_rate"] == pytest.approx(0.5)
    assert result.score == result.metrics["lc_win_rate"]
    assert (result.ci_low, result.ci_high) == tuple(result.metrics["lc_win_rate_ci"])
    assert result.provenance["prompt_version"] == "paper-2"
    assert result.provenance["generation"]["stop"] == []  # the harness sets none
    assert result.provenance["generation"]["max_new_tokens"] == 512


def test_paper_judge_failures(home: Any) -> None:
    """HTTP 5xx is retried; a 4xx or an unusable judge leaves the item out, never a win; when no
    item has a usable verdict the score is 0 with the reason."""
    from .fake_openai import FakeOpenAI

    with FakeOpenAI([rank_by_marker] * 30) as server:
        task = paper_task(server)
        items = task.load_split("test", home)[:6]
        server.fail(500, times=2)
        scored = task.score_outputs(items, [f"GOOD {i}" for i in range(6)])
        assert scored.metrics["judge_requests"] == 8 and scored.metrics["n_judge_errors"] == 0
        assert scored.metrics["n_wins"] == 6
        server.fail(400, times=6)
        fresh = paper_task(server)
        fresh.load_split("test", home)
        down = fresh.score_outputs(items, [f"GOOD again {i}" for i in range(6)])
    assert down.score == 0.0 and down.n_correct == 0 and down.metrics["n_judge_errors"] == 6
    assert "nothing to fit" in down.metrics["lc_method"]
    assert "http 400" in json.loads(down.items[0].parsed or "{}")["error"]


def test_annotator_steps_equal_alpaca_evals_configured_annotator() -> None:
    """Our switch, messages, request and parsing against the annotator `alpaca_eval` itself
    builds from the same config (`PairwiseAnnotator(annotators_config=...)`), step by step."""
    import math

    from alpaca_eval import utils
    from alpaca_eval.annotators import PairwiseAnnotator

    from a2rl.tasks.alpacaeval import paper_annotator as pa

    theirs = PairwiseAnnotator(annotators_config=pa.ANNOTATOR, is_avoid_reannotations=False,
                               caching_path=None).annotators[pa.ANNOTATOR]
    instructions = [f"Instruction number {i}: say {'x' * i}" for i in range(16)]
    references = [f"reference {i}" for i in range(16)]
    outputs = [f"model output {i}\n with {{braces}} and \"quotes\"" for i in range(16)]
    ours = pa.switched(instructions, references, outputs)
    df = pd.DataFrame({"instruction": instructions, "output_1": references,
                       "output_2": outputs})
    pre = theirs._preprocess(df).sort_index()
    assert list(ours["is_switched_outputs"]) == list(pre["is_switched_outputs"])
    assert {True, False} == set(ours["is_switched_outputs"])
    # ours fences each output (the one deviation): theirs, given the same fenced text, agree
    fence = Fence("0" * 16)
    prompts, _ = theirs._make_prompts(pre.assign(output_1=pre["output_1"].map(fence.wrap),
                                                 output_2=pre["output_2"].map(fence.wrap)))
    for k in range(16):
        assert pa.messages_for(ours.iloc[k], fence) == utils.prompt_to_chatml(prompts[k])
    body = pa.request_body("judge-x", [])
    kwargs = dict(theirs.completions_kwargs)
    assert kwargs.pop("model_name") == "gpt-4-1106-preview"  # the harness sets gpt-5.2
    assert {k: v for k, v in body.items() if k not in ("model", "messages")} == kwargs

    def call(first: str, second: str) -> str:
        return json.dumps({"ordered_models": [{"model": first, "rank": 1},
                                              {"model": second, "rank": 2}]})

    for completion in (call("m", "M"), call("M", "m"), "not json", '{"ordered_models": []}',
                       json.dumps({"ordered_models": [{"model": "m", "rank": 3}]}),
                       "```json\n" + call("M", "m") + "\n```"):
        try:
            expected = theirs.fn_completion_parser(completion)[0]
        except Exception:  # noqa: BLE001 - alpaca_eval leaves it unannotated
            expected = math.nan
        got = pa.parse(completion)
        assert (got is None and math.isnan(expected)) or got == expected, completion
    # switching back: alpaca_eval's processor on shown-order preferences
    shown = pre.assign(preference=[1.0 if k % 3 else 2.0 for k in range(16)])
    back = theirs.processors[0].postprocess(shown).sort_index()
    flags = list(pre["is_switched_outputs"])
    assert list(back["preference"]) == [3.0 - p if s else p
                                        for p, s in zip(shown["preference"], flags, strict=True)]


# --- the improvement's paired interval under the paper profile ------------------------------
def test_bootstrap_refit_is_alpaca_evals_glm_on_each_resample(monkeypatch: pytest.MonkeyPatch,
                                                               library_lc: Any) -> None:
    """`lc_statistic` on item counts = alpaca_eval's own featurization and fit of the rows
    drawn (duplicates repeated), with the penalty its CV chose on all items."""
    from a2rl.stats import bootstrap_weights
    from a2rl.tasks.alpacaeval.paper_length_control import design, lc_statistic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from alpaca_eval.metrics import glm_winrate
    gamed = load_df_gamed(FIXTURES)
    df = annotations(50, 5, 0.3)
    full = length_controlled_win_rate(df, gamed)
    d = design(df, gamed, full["penalty_C"])
    assert lc_statistic(d, np.ones((1, 50)))[0] == pytest.approx(full["lc_win_rate"], abs=1e-12)
    info = glm_winrate.GLM_INFO["length_controlled_v1"]
    counts = bootstrap_weights(50, 3, seed=11)
    ours = lc_statistic(d, counts)
    for row, value in zip(counts, ours, strict=True):
        drawn = df.iloc[np.repeat(np.arange(50), row.astype(int))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x_train, x_test, weight = glm_winrate._get_featurized_data(
                drawn, info["formula"], info["regularize_to_baseline_lambda"])
            keep = x_train["preference"].notna()
            model = glm_winrate.fit_LogisticRegressionCV(
                x_train[keep], "preference", is_ytrue_proba=True, sample_weight=weight[keep],
                n_splits=0, C=full["penalty_C"])
        assert value == pytest.approx(float(model.predict_proba(x_test)[:, 1].mean()),
                                      abs=1e-9)
    assert len(set(np.round(ours, 9))) == 3  # the resamples differ


def _paper_items(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A paper evaluation's per-item results (as `_score_paper` records them) of a frame."""
    out = []
    for index, row in df.iterrows():
        pref = None if pd.isna(row["preference"]) else float(row["preference"])
        out.append({"id": f"test-{int(index):04d}", "prompt": row["instruction"],
                    "output": row["output_2"], "expected": row["output_1"],
                    "correct": pref == 2.0,
                    "parsed": json.dumps({"preference": pref,
                                          "model_length": len(row["output_2"]),
                                          "reference_length": len(row["output_1"])})})
    return out


@pytest.fixture
def fewer_resamples(monkeypatch: pytest.MonkeyPatch) -> int:
    """100 resamples instead of the task's 400: each refits the GLM twice (the suite's time)."""
    from a2rl.tasks.alpacaeval import paper_length_control

    monkeypatch.setattr(paper_length_control, "BOOTSTRAP_RESAMPLES", 100)
    return 100


def test_paired_improvement_of_the_paper_lc_win_rate(fewer_resamples: int) -> None:
    from a2rl.analysis.improvement import Scored, paired_improvement

    gamed = load_df_gamed(FIXTURES)
    base_df = annotations(50, 8, 0.0)
    final_df = base_df.copy()
    flip = np.random.default_rng(3).random(50) < 0.8  # most losses now win
    final_df["preference"] = np.where(flip & (base_df["preference"] == 1.0), 2.0,
                                      base_df["preference"])
    lc0 = length_controlled_win_rate(base_df, gamed)["lc_win_rate"]
    lc1 = length_controlled_win_rate(final_df, gamed)["lc_win_rate"]
    prov = {"profile": "paper", "task_options": {"data_dir": str(FIXTURES)}}
    metrics = {"lc_win_rate": 0.0, "lc_weights": {}}
    final = Scored(lc1, _paper_items(final_df.sample(frac=1, random_state=1)), metrics, prov)
    base = Scored(lc0, _paper_items(base_df), metrics, prov)
    iv, note = paired_improvement(final, base, "alpacaeval")
    assert note is None and iv is not None, note
    assert f"paired-percentile-bootstrap-95 ({fewer_resamples} item resamples" in iv.method
    assert "length_controlled_v1" in iv.method and iv.n_paired == 50
    assert iv.estimate == pytest.approx(lc1 - lc0)
    assert -lc0 <= iv.low < iv.estimate < iv.high <= 1 - lc0
    assert iv.low > 0 and not iv.within_noise  # only wins were added
    assert paired_improvement(final, base, "alpacaeval") == (iv, None)  # seeded, cached
    same, _ = paired_improvement(Scored(lc0, base.items, metrics, prov), base, "alpacaeval")
    assert same is not None and same.low == same.high == 0.0  # every item agrees
    # a score the items do not reproduce, a missing df_gamed, a profile mismatch: no interval
    iv, note = paired_improvement(Scored(lc1 + 0.01, final.items, metrics, prov), base,
                                  "alpacaeval")
    assert iv is None and note is not None and "differs from the stored score" in note
    empty = {"profile": "paper", "task_options": {"data_dir": str(FIXTURES / "nowhere")}}
    iv, note = paired_improvement(Scored(lc1, final.items, metrics, empty),
                                  Scored(lc0, base.items, metrics, empty), "alpacaeval")
    assert iv is None and note is not None and "df_gamed.csv is unavailable" in note
    iv, note = paired_improvement(final, Scored(lc0, base.items, {"lc_win_rate": 0.0},
                                                {"profile": "a2rl"}), "alpacaeval")
    assert iv is None and note is not None and "profile" in note


def test_paired_improvement_of_two_paper_task_evaluations(home: Any,
                                                           fewer_resamples: int) -> None:
    """The task's own per-item records (through a real local judge) pair into an interval."""
    from a2rl.analysis.improvement import Scored, paired_improvement

    from .fake_openai import FakeOpenAI

    with FakeOpenAI([rank_by_marker] * 24) as server:
        task = paper_task(server)
        items = task.load_split("test", home)
        base = task.score_outputs(items, ["GOOD" if i in (1, 4) else "meh" for i in range(12)])
        final = task.score_outputs(items, [f"GOOD {i}" if i % 4 else "meh" for i in range(12)])
    prov = {"profile": "paper", "task_options": {"data_dir": str(FIXTURES)}}

    def scored(s: Any) -> Scored:
        return Scored(s.score, [it.model_dump() for it in s.items], s.metrics, prov)

    iv, note = paired_improvement(scored(final), scored(base), "alpacaeval")
    assert note is None and iv is not None, note
    assert iv.n_paired == 12 and iv.estimate == pytest.approx(final.score - base.score)
    assert -base.score <= iv.low <= iv.estimate <= iv.high <= 1 - base.score
    assert iv.low < iv.high


# --- generation: the harness's own `_generate_model_outputs`, from RD-Agent's wheel ----------
ALPACAEVAL_EVAL = "rdagent/scenarios/rl/autorl_bench/benchmarks/alpacaeval/eval.py"
#: What the model says after each instruction: text past an end-of-turn token (no end of
#: sequence for a Qwen2.5 base model, whose end is `<|endoftext|>` only), the end of sequence,
#: surrounding whitespace, nothing at all.
REPLIES = ["  Paris is the capital.<|im_end|>\n<|im_start|>user\nAnd Spain?<|im_end|>\n",
           "Two plus two is four.<|endoftext|>Never shown.",
           "\n\nA haiku:\nsnow on the branch\n",
           "<|endoftext|>",
           "Lists:\n- one\n- two<|im_end|><|endoftext|>"]


def _harness_generate(wheel: Path) -> Any:
    """`AlpacaEvalEvaluator` from the wheel's source (its imports not executed)."""
    import ast
    import typing

    from a2rl.tasks import rdagent

    tree = ast.parse(rdagent.source_of(wheel, ALPACAEVAL_EVAL))
    body = [n for n in tree.body
            if isinstance(n, ast.ClassDef) and n.name == "AlpacaEvalEvaluator"]
    assert body, "the harness's eval.py lacks AlpacaEvalEvaluator"
    ns: dict[str, Any] = {"Path": Path, "json": json, "BaseEvaluator": object,
                          **{k: getattr(typing, k) for k in ("Any", "Dict", "List",
                                                            "Optional")}}
    exec(compile(ast.Module(body=body, type_ignores=[]), "<harness eval.py>", "exec"), ns)
    evaluator = object.__new__(ns["AlpacaEvalEvaluator"])
    evaluator.eval_config = {"max_model_len": 4096, "max_tokens": 512}  # benchmarks/__init__
    return evaluator


def test_generation_equals_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our `paper` generation (prompt, base model's chat template, 512 tokens, no stop list,
    the base's end of sequence, stripped) gives the harness's outputs for the base model; for
    a submission declaring `<|im_end|>` as its own end of sequence it does not (docs/paper-
    fidelity.md: the grader keeps the base's), and the difference is the text past it."""
    from a2rl.tasks import rdagent
    from a2rl.tasks.alpacaeval import AlpacaEvalTask

    from .fake_vllm import FakeVLLM, ScriptedEngine, write_checkpoint_eos
    from .harness_wheels import require_wheel
    from .qwen_shaped import IM_END, build_tokenizer, write_model_dir

    evaluator = _harness_generate(require_wheel(rdagent.RDAGENT))
    task = AlpacaEvalTask(n_train=8, n_dev=4).with_profile("paper")
    items = [{"id": f"t{i}", "prompt": f"Instruction {i}: say something."}
             for i in range(len(REPLIES))]
    reply = {it["prompt"]: r for it, r in zip(items, REPLIES, strict=True)}

    def respond(prompt: str) -> str:
        return next(r for q, r in reply.items() if q in prompt)

    base = write_model_dir(tmp_path / "base")
    submission = write_model_dir(tmp_path / "submission")
    write_checkpoint_eos(submission, [build_tokenizer().convert_tokens_to_ids(IM_END)])
    results = {}
    for name, model in (("base", base), ("submission", submission)):
        fake = FakeVLLM(respond)
        fake.install(monkeypatch)
        refs = [{"instruction": it["prompt"], "output": "ref", "dataset": "d"} for it in items]
        theirs = [o["output"] for o in evaluator._generate_model_outputs(
            model_path=str(model), model_name="m", reference_outputs=refs, gpu_count=1)]
        assert [kw for _, kw in fake.calls] == [{"temperature": 0.0, "max_tokens": 512,
                                                 "stop": []}] * len(items)
        assert fake.engines[0].kwargs["max_model_len"] == 4096
        # ours: the grader's tokenizer and end of sequence are the base's, whatever the model
        engine = ScriptedEngine(base, respond)
        grader = task.spec.grader
        ours = [o.strip() for o in engine.generate([task.build_prompt(it) for it in items],
                                                   max_new_tokens=grader.max_new_tokens,
                                                   stop=grader.stop)]
        assert engine.prompts == [p for p, _ in fake.calls]  # the same chat-templated text
        results[name] = (theirs, ours)
    theirs, ours = results["base"]
    assert ours == theirs
    assert ours[0] == "Paris is the capital.\nuser\nAnd Spain?"  # past <|im_end|>, as vLLM
    theirs, ours = results["submission"]
    differ = [i for i, (a, b) in enumerate(zip(theirs, ours, strict=True)) if a != b]
    assert differ == [0]  # only where the model writes past its own declared end
    assert theirs[0] == "Paris is the capital." and ours[0].startswith(theirs[0])
