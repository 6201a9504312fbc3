"""GSM8K: lm-eval-compatible answer extraction, splits on real-schema fixtures, the prompt in
TASK.md, hub model resolution (offline error, cached snapshot) and an end-to-end evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from a2rl.grading import evaluate
from a2rl.settings import Settings, load_settings
from a2rl.tasks import base_model_name, get_task, list_tasks, prepare_workspace
from a2rl.tasks.base_models import resolve_base_model
from a2rl.tasks.gsm8k.scoring import (
    FALLBACK,
    extract_answer,
    flexible_extract,
    lm_eval_match,
    normalize_number,
    refusal,
    strict_extract,
    target_of,
)
from a2rl.tasks.gsm8k.task import GSM8KDataUnavailable, GSM8KTask
from a2rl.tasks.hub import (
    COMPLETE_MARKER,
    BaseModelUnavailable,
    ensure_hub_model,
    hub_model_dir,
    is_hub_id,
)
from a2rl.tasks.humaneval.task import HumanEvalTask

FIXTURE = Path(__file__).parent / "fixtures" / "gsm8k"
UNREACHABLE = "http://127.0.0.1:9"


# --- extraction -----------------------------------------------------------------------------
@pytest.mark.parametrize(("output", "expected", "how"), [
    ("She has 5+3=<<5+3=8>>8 apples.\n#### 8", "8", "strict"),
    ("#### 1,234", "1234", "strict"),
    ("The total is 1,000 + 234.\n#### 1,234\n\nQuestion: next", "1234", "strict"),
    ("#### -12", "-12", "strict"),
    ("#### 18.0", "18", "strict"),
    ("#### 18.50", "18.5", "strict"),
    ("#### 72.", "72", "strict"),
    ("#### 5\nThen 7 more", "5", "strict"),          # strict wins over the last number
    ("#### $18", "18", "flexible"),                   # '$' after '####' is not strict
    ("The answer is $1,200.", "1200", "flexible"),
    ("Costs $5 then $12.50 in total", "12.5", "flexible"),
    ("It is -7 degrees", "-7", "flexible"),
    ("3 apples and 4 pears make 7", "7", "flexible"),
    ("He pays 10.0 dollars.", "10", "flexible"),
    ("So the answer is 42", "42", "flexible"),
    ("no numbers here", None, "none"),
    ("", None, "none"),
    ("#### ...", None, "none"),
])
def test_extract_answer_table(output: str, expected: str | None, how: str) -> None:
    assert extract_answer(output) == (expected, how)


@pytest.mark.parametrize(("output", "strict", "flexible"), [
    # lm-eval 0.4 gsm8k v3.0 filters: strict `#### (\-?[0-9\.\,]+)` first match,
    # flexible `(-?[$0-9.,]{2,})|(-?[0-9]+)` last match, fallback "[invalid]".
    ("#### 1,234", "1,234", "1,234"),
    ("#### -5 then #### 7", "-5", "7"),
    ("The answer is $1,200.", FALLBACK, "$1,200."),
    ("a 7", FALLBACK, "7"),
    ("nothing", FALLBACK, FALLBACK),
    ("x 12 y 3", FALLBACK, "3"),
])
def test_lm_eval_filters(output: str, strict: str, flexible: str) -> None:
    assert strict_extract(output) == strict
    assert flexible_extract(output) == flexible


def test_lm_eval_exact_match_rules() -> None:
    reference = "He pays 6*2=<<6*2=12>>12.\n#### 1,212"
    assert lm_eval_match("1,212", reference)
    assert lm_eval_match("$1212.", reference)
    assert not lm_eval_match("1212.0", reference)    # lm-eval does not equate 1212.0 ...
    assert normalize_number("1212.0") == target_of(reference) == "1212"  # ... our score does
    assert normalize_number(FALLBACK) is None and normalize_number("1.2.3") is None


# --- splits and prompt ----------------------------------------------------------------------
def fixture_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / f"{name}.jsonl").read_text().splitlines()]


def test_fixture_is_in_the_real_schema() -> None:
    for name in ("train", "test"):
        for row in fixture_rows(name):
            assert set(row) == {"question", "answer"}
            assert "<<" in row["answer"] and "\n#### " in row["answer"]


def test_splits_sizes_and_disjoint() -> None:
    task = GSM8KTask(data_dir=FIXTURE, base_model="tiny-llama")
    train, dev = task.train_items(Settings()), task.load_split("dev", Settings())
    test = task.load_split("test", Settings())
    n_rows = len(fixture_rows("train"))
    assert (len(train), len(dev), len(test)) == (n_rows - n_rows // 4, n_rows // 4, 4)
    assert [it["id"] for it in dev] == [f"train-{i:05d}" for i in range(len(train), n_rows)]
    ids = [it["id"] for it in train + dev + test]
    assert len(ids) == len(set(ids))
    assert not {it["question"] for it in train} & {it["question"] for it in dev + test}
    # the real dataset: 7,473 train rows -> dev is the last 200, test the 1,319 test rows
    assert {k: s.n_items for k, s in task.spec.splits.items()} == {
        "train": 7273, "dev": 200, "test": 1319}
    row = train[0]
    assert row["prompt"] == f"Question: {row['question']}\nAnswer:"
    assert row["messages"] == [{"role": "user", "content": row["prompt"]},
                               {"role": "assistant", "content": row["answer"]}]
    assert row["target"] == "27" and test[1]["target"] == "3000"


def test_task_md_states_prompt_and_listing() -> None:
    task = get_task("gsm8k")
    md = task.task_md()
    assert "Question: <question>\nAnswer:" in md and "prompt version 1" in md
    assert "#### (\\-?[0-9\\.\\,]+)" in md and "Qwen/Qwen2.5-1.5B" in md
    assert task.build_prompt({"question": "Q?"}) == [
        {"role": "user", "content": "Question: Q?\nAnswer:"}]
    levels = {t.spec.id: t.spec.level for t in list_tasks()}
    assert levels["gsm8k"] == 1 and levels["humaneval"] == 1
    assert task.spec.default_base_model == "Qwen/Qwen2.5-1.5B"


def test_settings_overrides(tmp_path: Path) -> None:
    """Base model and data folder come from settings: `A2RL_BASE_MODEL`, then the per-task
    `A2RL_GSM8K_BASE_MODEL` over it, and the constructor's override over both."""
    def settings(**env: str) -> Settings:
        return load_settings(environ={"A2RL_HOME": str(tmp_path), **env})[0]

    assert base_model_name(GSM8KTask(), settings()) == "Qwen/Qwen2.5-1.5B"
    assert base_model_name(GSM8KTask(), settings(A2RL_BASE_MODEL="tiny-llama")) == "tiny-llama"
    both = settings(A2RL_BASE_MODEL="tiny-llama", A2RL_GSM8K_BASE_MODEL="/models/x")
    assert base_model_name(GSM8KTask(), both) == "/models/x"
    assert base_model_name(HumanEvalTask(), both) == "tiny-llama"
    assert base_model_name(GSM8KTask(base_model="a/b"), both) == "a/b"
    listed = settings(A2RL_TASK_BASE_MODELS="gsm8k=/m/g, humaneval=/m/h")
    assert listed.task_base_models == {"gsm8k": "/m/g", "humaneval": "/m/h"}
    assert base_model_name(HumanEvalTask(), listed) == "/m/h"
    assert len(GSM8KTask().load_split("test", settings(A2RL_GSM8K_DIR=str(FIXTURE)))) == 4
    with pytest.raises(GSM8KDataUnavailable, match="test.jsonl not found"):
        GSM8KTask().load_split("test", settings(A2RL_GSM8K_DIR=str(tmp_path)))


def test_score_outputs_perfect_and_empty() -> None:
    task = GSM8KTask(data_dir=FIXTURE)
    items = task.load_split("test", Settings())
    res = task.score_outputs(items, [it["answer"] for it in items])
    assert res.score == 1.0 and res.metrics["lm_eval_exact_match_strict"] == 1.0
    res = task.score_outputs(items, [""] * len(items))
    assert res.score == 0.0 and res.metrics["n_unparsed"] == len(items)


# --- hub models -----------------------------------------------------------------------------
def test_hub_unreachable_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert is_hub_id("Qwen/Qwen2.5-1.5B") and not is_hub_id("tiny-llama")
    with pytest.raises(BaseModelUnavailable, match="could not be fetched") as info:
        ensure_hub_model("Qwen/Qwen2.5-1.5B", settings, endpoint=UNREACHABLE)
    assert isinstance(info.value, RuntimeError) and info.value.__cause__ is None
    assert not hub_model_dir("Qwen/Qwen2.5-1.5B", settings).exists()


def test_hub_offline_mode_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BaseModelUnavailable, match="not cached"):
        resolve_base_model("Qwen/Qwen2.5-1.5B", Settings(home=tmp_path))


def test_hub_cached_snapshot_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE)
    settings = Settings(home=tmp_path)
    snap = tmp_path / "models" / "hub" / "Qwen--Qwen2.5-1.5B"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / COMPLETE_MARKER).write_text("Qwen/Qwen2.5-1.5B@main\n")
    assert resolve_base_model("Qwen/Qwen2.5-1.5B", settings) == snap
    assert GSM8KTask(base_model="Qwen/Qwen2.5-1.5B").base_model_dir(settings) == snap


# --- end to end -----------------------------------------------------------------------------
def test_evaluate_dev_on_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = Settings(home=tmp_path_factory.mktemp("home"))
    task = GSM8KTask(data_dir=FIXTURE, base_model="tiny-llama")
    res = evaluate(task, task.base_model_dir(settings), "dev", settings)
    assert res.n_items == len(task.load_split("dev", settings)) == 3
    assert 0.0 <= res.ci_low <= res.score <= res.ci_high <= 1.0
    assert res.provenance["task_id"] == "gsm8k" and res.provenance["prompt_version"] == "1"
    assert res.items[0].prompt.startswith("Question: ")


def test_prepare_workspace_writes_sft_ready_train(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    task = GSM8KTask(data_dir=FIXTURE, base_model="tiny-llama")
    prepare_workspace(task, tmp_path / "ws", settings)
    rows = [json.loads(line) for line in (tmp_path / "ws" / "data" / "train.jsonl").open()]
    assert len(rows) == len(task.train_items(settings))
    assert {"prompt", "answer", "messages", "question", "target"} <= set(rows[0])
    assert (tmp_path / "ws" / "base_model" / "config.json").is_file()
    md = (tmp_path / "ws" / "TASK.md").read_text()
    assert "Question: <question>" in md
    # the sizes this run's data give (the fixture's 12 train rows: 9 and 3), not the hub's
    assert f"{len(rows)} training problems" in md and "Hidden dev (feedback): 3 problems" in md


# --- the paper profile (OpenCompass gsm8k_gen_1d7fe4, as the reference harness runs it) ------
# Each row: a model output, the prediction OpenCompass 0.5.1 extracts from it
# (extract_non_reasoning_content, then gsm8k_postprocess), and whether Gsm8kEvaluator counts it
# equal to the reference. The expected columns were produced by running OpenCompass 0.5.1's own
# functions (opencompass/datasets/gsm8k.py, opencompass/utils/text_postprocessors.py) on these
# outputs; they are facts about the harness, not about our code.
PAPER_TABLE = [
    ("She sells 9 * 2 = 18 dollars.\nThe answer is 18\n", "18", "18", True),
    ("The answer is 18.0", "18.0", "18", True),
    ("The answer is 1,234", "234", "1234", False),   # commas split the number
    ("So the total is -7 degrees.", "-7", "-7", True),
    ("It costs 12.50 dollars.", "12.50", "12", False),
    ("The answer is 42\n\nQuestion: Tom has 3 apples?\nLet's think step by step\nAnswer: 3",
     "42", "42", True),                               # text after 'Question:' is ignored
    ("<think>maybe 5</think>The answer is 6", "6", "6", True),
    ("reasoning 11</think> final 12", "12", "12", True),
    ("no digits here", "NULL", "5", False),
    ("#### 72", "72", "72", True),
    ("The answer is $5.", "5", "5", True),
    ("answer: .5", "5", "5", True),                   # '.5' is read as 5
    ("Question: what? 8", "NULL", "8", False),
]


@pytest.mark.parametrize(("output", "pred", "reference", "equal"), PAPER_TABLE)
def test_paper_extraction_matches_opencompass(output: str, pred: str, reference: str,
                                              equal: bool) -> None:
    from a2rl.tasks.gsm8k import paper

    assert paper.paper_answer(output) == pred
    assert paper.is_equal(pred, reference) is equal


def test_paper_reference_and_scoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper profile: every train row visible, the chat from the OpenCompass config (few
    shots, then the question in place of `{question}`), OpenCompass's reference and scores."""
    from a2rl.tasks import opencompass as oc
    from a2rl.tasks.gsm8k import paper

    from .opencompass_fixture import build_wheel

    assert paper.gsm8k_dataset_postprocess("x = <<1+2=3>>3\n#### 1,234") == "1234"
    wheel = build_wheel(tmp_path)
    task = GSM8KTask(data_dir=FIXTURE, opencompass_wheel=wheel).with_profile("paper")
    settings = Settings(home=tmp_path)
    train, dev = task.train_items(settings), task.load_split("dev", settings)
    test = task.load_split("test", settings)
    assert len(train) == len(fixture_rows("train")) and len(test) == len(fixture_rows("test"))
    assert {it["id"] for it in dev} <= {it["id"] for it in train}  # harness: no dev held back
    chat = task.build_prompt(test[0])
    assert [m["role"] for m in chat] == ["user", "assistant", "user", "assistant", "user"]
    assert chat[2]["content"].startswith("Question: Bo has {10} coins")  # only {question} filled
    assert chat[-1]["content"] == (f"Question: {fixture_rows('test')[0]['question']}\n"
                                   "Let's think step by step\nAnswer:\n")  # OpenCompass's \n
    assert task.spec.grader.max_new_tokens == 512
    targets = [it["target"] for it in test]
    outputs = [f"Step.\nThe answer is {t}\n\nQuestion: 99" for t in targets]
    outputs[0] = "I think it is 3.5"
    res = task.score_outputs(test, outputs)
    assert res.n_correct == len(test) - 1 and res.items[0].parsed == "3.5"
    assert res.metrics["scorer"].startswith("opencompass 0.5.1")
    # the a2rl profile scores the same outputs its own way (strict '#### N' or last number)
    assert GSM8KTask(data_dir=FIXTURE).score_outputs(
        GSM8KTask(data_dir=FIXTURE).load_split("test", settings), outputs).n_correct == 0
    # the downloaded wheel is checked: a wheel that is not OpenCompass 0.5.1's is refused
    home = tmp_path / "home"
    build_wheel(home / "opencompass")
    with pytest.raises(oc.OpenCompassUnavailable, match="is not OpenCompass 0.5.1's wheel"):
        GSM8KTask(data_dir=FIXTURE).with_profile("paper").load_split("test", Settings(home=home))
    with pytest.raises(oc.OpenCompassUnavailable, match="pip download opencompass==0.5.1"):
        GSM8KTask(data_dir=FIXTURE).with_profile("paper").load_split(
            "test", Settings(home=tmp_path / "empty"))


# --- refusals (issue 23): honest outputs keep their verdicts --------------------------------
@pytest.mark.parametrize("output", [
    "She has 5+3=<<5+3=8>>8 apples.\n#### 8",
    "The total is 1,000 + 234.\n#### 1,234\n\nQuestion: next",
    "Step 1: 3, 4 and 5 sum to 12.\n#### 12",
    "He buys 2 packs of 12 each, 24 total, at $1.50, so $36.\n#### 36",
    "It costs 3 or 4 dollars a day at first, so 21 in total.\n#### 21",
    "The answer is 18.\n#### 18",
    "#### 5\n#### 5.0",                         # the same answer twice
    "There are 1, 2, 3 and 4 boxes, so 10 in all.",
])
def test_honest_outputs_are_not_refused(output: str) -> None:
    assert refusal(output) is None


def test_dataset_solutions_are_never_refused() -> None:
    """The dataset's own solutions (the `<<a*b=c>>c` format) pass every refusal rule."""
    for split in ("train", "test"):
        for row in (json.loads(line) for line in (FIXTURE / f"{split}.jsonl").open()):
            assert refusal(row["answer"]) is None, row["answer"]


@pytest.mark.parametrize(("output", "reason"), [
    (" ".join(str(i) for i in range(1001)), "number_spam"),
    ("1, 2, 3, 4, 5, 6, 7, 8", "number_spam"),
    ("the answer is 3 or 4 or 5", "hedged_answer"),
    ("#### 3 or 4", "hedged_answer"),
    ("#### 5\nso\n#### 7", "conflicting_final_answers"),
    ("Expected answer: 18\n#### 18", "grader_echo"),
])
def test_refusal_reasons(output: str, reason: str) -> None:
    assert refusal(output) == reason
