"""AlpacaEval: data from fixtures in the real schema, judged through a real local HTTP judge."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from a2rl.grading.evaluate import evaluate
from a2rl.llm import Endpoint, RetryPolicy
from a2rl.settings import Settings, load_settings
from a2rl.tasks.alpacaeval import AlpacaEvalTask
from a2rl.tasks.alpacaeval.judge import (
    JUDGE_PROMPT_VERSION,
    Judge,
    JudgeCache,
    JudgeConfig,
    clf_prompt,
    model_shown_first,
    parse_verdict,
)
from a2rl.tasks.alpacaeval.length_control import length_controlled_win_rate, win_rate
from a2rl.tasks.untrusted import Fence

from .fake_judge import FakeJudge, always, answer, shown_outputs
from .helpers import with_task_options

FIXTURES = Path(__file__).parent / "fixtures" / "alpacaeval"


@pytest.fixture
def fake() -> Iterator[FakeJudge]:
    with FakeJudge() as server:
        yield server


@pytest.fixture
def home(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home",
                    tasks={"alpacaeval": {"data_dir": str(FIXTURES)}})


def make_judge(server: FakeJudge, cache: JudgeCache | None = None, **kw: Any) -> Judge:
    retries = {"max_retries": kw.pop("max_retries")} if "max_retries" in kw else {}
    config = JudgeConfig(Endpoint(base_url=server.base_url, model="fake-judge"),
                         RetryPolicy(backoff_s=0.001, timeout_s=10, **retries), **kw)
    return Judge(config, cache, api_key="sk-test")


def outputs_for(items: Sequence[dict[str, Any]], good: set[int]) -> list[str]:
    """Model outputs: items in `good` carry the marker the fake judge prefers."""
    return [f"GOOD answer to: {it['prompt']}" if i in good else "meh"
            for i, it in enumerate(items)]


# --- data ---------------------------------------------------------------------------------
def test_splits_from_fixtures(home: Settings) -> None:
    task = AlpacaEvalTask(n_train=8, n_dev=4)
    assert (task.spec.id, task.spec.level) == ("alpacaeval", 2)
    train = task.train_items(home)
    dev = task.load_split("dev", home)
    test = task.load_split("test", home)
    assert (len(train), len(dev), len(test)) == (8, 4, 12)
    assert {it["instruction"] for it in train}.isdisjoint(
        {it["prompt"].split("\n\n")[0] for it in dev})
    with_input = next(it for it in train if it["input"])
    assert with_input["messages"][0]["content"] == (
        f"{with_input['instruction']}\n\n{with_input['input']}")
    assert with_input["messages"][1] == {"role": "assistant", "content": with_input["output"]}
    assert test[0]["reference_generator"] == "gpt4_turbo" and test[0]["dataset"]
    assert task.build_prompt(test[0]) == [{"role": "user", "content": test[0]["prompt"]}]
    with pytest.raises(ValueError):
        task.load_split("train", home)  # type: ignore[arg-type]


def test_reference_file_override(home: Settings) -> None:
    v1 = with_task_options(home, "alpacaeval", reference_file="alpaca_eval.json")
    test = AlpacaEvalTask(n_train=8, n_dev=4).load_split("test", v1)
    assert test[0]["reference_generator"] == "text_davinci_003"
    missing = with_task_options(home, "alpacaeval", reference_file="missing.json")
    with pytest.raises(FileNotFoundError):
        AlpacaEvalTask().load_split("test", missing)


def test_hub_loading_calls(home: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fixture override: the JSON file via hf_hub_download, alpaca via datasets."""
    import sys
    import types

    import huggingface_hub

    home = with_task_options(home, "alpacaeval", data_dir="")
    calls: list[dict[str, Any]] = []

    def download(**kw: Any) -> str:
        calls.append(kw)
        return str(FIXTURES / kw["filename"])

    def load_dataset(name: str, split: str) -> list[dict[str, Any]]:
        calls.append({"name": name, "split": split})
        rows = [json.loads(line) for line in (FIXTURES / "alpaca.jsonl").read_text().splitlines()]
        return rows[: int(split.split(":")[1].rstrip("]"))]

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    task = AlpacaEvalTask(n_train=5, n_dev=3)
    assert len(task.load_split("test", home)) == 12
    assert calls[0] == {"repo_id": "tatsu-lab/alpaca_eval",
                        "filename": "alpaca_eval_gpt4_baseline.json", "repo_type": "dataset"}
    assert len(task.train_items(home)) == 5 and len(task.load_split("dev", home)) == 3
    assert calls[1] == {"name": "tatsu-lab/alpaca", "split": "train[:8]"}

    def offline(**kw: Any) -> str:
        raise OSError("offline and not cached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(RuntimeError, match="A2RL_ALPACAEVAL_DIR"):
        task.load_split("test", home)


# --- the judge ----------------------------------------------------------------------------
def test_parse_verdict_is_strict() -> None:
    assert parse_verdict("m") == "m" and parse_verdict(" M\n") == "M"
    for bad in ("", "Output (a)", "m.", "`M`", "mM", "The best is m", "\"m\""):
        assert parse_verdict(bad) is None


def test_win_rate_on_fixture_items(fake: FakeJudge, home: Settings) -> None:
    task = AlpacaEvalTask(n_train=8, n_dev=4, judge=make_judge(fake))
    items = task.load_split("test", home)
    good = {0, 2, 3, 7, 11}
    scored = task.score_outputs(items, outputs_for(items, good))
    assert scored.metrics["win_rate"] == pytest.approx(5 / 12)
    assert scored.n_correct == 5 and scored.n_items == 12
    assert [r.correct for r in scored.items] == [i in good for i in range(12)]
    assert scored.metrics["n_judge_errors"] == 0 and scored.metrics["judge_requests"] == 12
    # the request is AlpacaEval's prompt, with the model's output where the record says
    assert len(fake.requests) == 12
    for body in fake.requests:
        assert body["model"] == "fake-judge" and body["temperature"] == 0
        # alpaca_eval's system message, then one sentence on the fence (a2rl.tasks.untrusted)
        assert body["messages"][0]["role"] == "system"
        assert body["messages"][0]["content"].startswith(clf_prompt()[0] + "\nEach output")
    assert all(h.get("authorization") == "Bearer sk-test" for h in fake.headers)
    for item, result in zip(items, scored.items, strict=True):
        record = json.loads(result.parsed or "{}")
        assert record["model_position"] == ("m" if model_shown_first(item["id"]) else "M")
        body = next(b for b in fake.requests if item["reference"] in b["messages"][1]["content"])
        assert shown_outputs(body)[record["model_position"]] == result.output
        assert record["raw_answers"] and record["raw_answers"][-1] in ("m", "M")
    positions = {json.loads(r.parsed or "{}")["model_position"] for r in scored.items}
    assert positions == {"m", "M"}  # both orders occur among 12 items


def test_position_bias_is_cancelled_by_random_order(home: Settings) -> None:
    """A judge that always prefers the output shown first wins about half, not all."""
    with FakeJudge(always("m")) as server:
        judge = make_judge(server, concurrency=8)
        n = 400
        ids = [f"test-{i:04d}" for i in range(n)]
        judgments = judge.judge_many(ids, [f"q{i}" for i in range(n)],
                                     [f"model {i}" for i in range(n)],
                                     [f"reference {i}" for i in range(n)])
    first = [model_shown_first(i) for i in ids]
    assert [j.winner == "model" for j in judgments] == first  # undone exactly per item
    rate = win_rate([j.preference for j in judgments])["win_rate"]
    assert 0.42 < rate < 0.58
    assert [model_shown_first(i) for i in ids] == first  # deterministic per id


def test_http_500_then_ok_is_retried(fake: FakeJudge) -> None:
    fake.fail(500, times=2)
    judge = make_judge(fake, max_retries=3)
    [j] = judge.judge_many(["test-0000"], ["q"], ["GOOD answer"], ["reference"])
    assert j.winner == "model" and j.attempts == 3 and len(fake.requests) == 3
    assert j.raw_answers[0].startswith("<error: http 500")


def test_malformed_then_ok_is_retried(fake: FakeJudge) -> None:
    fake.malformed("Output (a)", times=1)
    [j] = make_judge(fake).judge_many(["test-0001"], ["q"], ["GOOD"], ["ref"])
    assert j.winner == "model" and j.raw_answers[0] == "Output (a)" and j.attempts == 2


@pytest.mark.parametrize("policy", [answer("Output (a)"), answer("m is better")])
def test_persistent_malformed_is_an_error_never_a_win(policy: Any, home: Settings) -> None:
    with FakeJudge(policy) as server:
        task = AlpacaEvalTask(n_train=8, n_dev=4, judge=make_judge(server, max_retries=2))
        items = task.load_split("test", home)
        scored = task.score_outputs(items, outputs_for(items, set(range(12))))
        assert len(server.requests) == 12 * 3
    assert scored.metrics["n_judge_errors"] == 12 and scored.n_correct == 0
    assert scored.metrics["win_rate"] == 0.0 and scored.score == 0.0
    record = json.loads(scored.items[0].parsed or "{}")
    assert record["winner"] == "error" and "malformed" in record["error"]
    assert len(record["raw_answers"]) == 3


def test_persistent_http_errors_are_errors_never_wins(fake: FakeJudge) -> None:
    fake.fail(503, times=100)
    judge = make_judge(fake, max_retries=2, concurrency=1)
    judgments = judge.judge_many(["a", "b"], ["q1", "q2"], ["GOOD 1", "GOOD 2"], ["r1", "r2"])
    assert [j.winner for j in judgments] == ["error", "error"]
    assert all(j.preference == 0.0 and "http 503" in (j.error or "") for j in judgments)
    assert len(fake.requests) == 6
    fake.clear_faults().fail(400, times=1)  # not retriable: one request
    [j] = judge.judge_many(["c"], ["q3"], ["GOOD 3"], ["r3"])
    assert j.winner == "error" and j.attempts == 1 and len(fake.requests) == 7


def test_unreachable_judge_is_an_error() -> None:
    config = JudgeConfig(Endpoint(base_url="http://127.0.0.1:9/v1", model="x"),
                         RetryPolicy(max_retries=1, backoff_s=0.001, timeout_s=2))
    [j] = Judge(config, None, api_key="").judge_many(["a"], ["q"], ["GOOD"], ["r"])
    assert j.winner == "error" and j.error and j.error.startswith("transport")


def test_shortcuts_need_no_judge(fake: FakeJudge) -> None:
    judgments = make_judge(fake).judge_many(["a", "b"], ["q", "q"], ["  ", "same"],
                                            ["ref", "same"])
    assert [j.winner for j in judgments] == ["reference", "draw"]
    assert [j.preference for j in judgments] == [0.0, 0.5] and fake.requests == []


def test_cache_makes_regrading_free(fake: FakeJudge, home: Settings) -> None:
    cache_path = home.home_dir / "judge-cache" / "judge.sqlite"
    task = AlpacaEvalTask(n_train=8, n_dev=4, judge=make_judge(fake, JudgeCache(cache_path)))
    items = task.load_split("test", home)
    outputs = outputs_for(items, {1, 4, 5})
    first = task.score_outputs(items, outputs)
    assert len(fake.requests) == 12 and cache_path.is_file()
    # a fresh judge over the same file: the second evaluation sends nothing
    task.judge = make_judge(fake, JudgeCache(cache_path))
    second = task.score_outputs(items, outputs)
    assert len(fake.requests) == 12 and second.metrics["judge_requests"] == 0
    assert second.metrics["n_cached"] == 12
    assert [r.correct for r in second.items] == [r.correct for r in first.items]
    assert second.score == first.score
    # a changed output or another judge model is a miss
    task.judge = make_judge(fake, JudgeCache(cache_path))
    task.score_outputs(items, ["changed " + o for o in outputs])
    assert len(fake.requests) == 24


def test_errors_are_not_cached(fake: FakeJudge, home: Settings) -> None:
    cache = JudgeCache(home.home_dir / "judge-cache" / "judge.sqlite")
    fake.fail(500, times=2)
    judge = make_judge(fake, cache, max_retries=1)
    [j] = judge.judge_many(["a"], ["q"], ["GOOD"], ["r"])
    assert j.winner == "error"
    [j] = judge.judge_many(["a"], ["q"], ["GOOD"], ["r"])
    assert j.winner == "model" and not j.cached and len(fake.requests) == 3


def test_judge_from_settings(fake: FakeJudge, home: Settings) -> None:
    """The judge's settings come from `A2RL_JUDGE__*` variables like every other setting."""
    env = {"A2RL_HOME": str(home.home_dir), "A2RL_JUDGE__BASE_URL": fake.base_url,
           "A2RL_JUDGE__MODEL": "judge-x", "A2RL_JUDGE__API_KEY_ENV": "MY_JUDGE_KEY",
           "MY_JUDGE_KEY": "sk-env", "A2RL_JUDGE__MAX_RETRIES": "0"}
    settings, sources = load_settings(environ=env)
    assert sources["judge.model"] == "env" and settings.judge.max_retries == 0
    judge = Judge.from_settings(settings, env)
    assert judge.config.model == "judge-x" and judge.config.max_retries == 0
    assert judge.cache and judge.cache.path == home.home_dir / "judge-cache" / "judge.sqlite"
    judge.judge_many(["a"], ["q"], ["GOOD"], ["r"])
    assert fake.requests[0]["model"] == "judge-x"
    assert fake.headers[0].get("authorization") == "Bearer sk-env"
    assert "sk-env" not in json.dumps(judge.config.public())


# --- length control -----------------------------------------------------------------------
def test_length_controlled_win_rate_hand_made() -> None:
    """8 items 100 chars longer than the reference (6 wins), 4 items 100 shorter (1 win).

    Two length groups make the model saturated: sigmoid(a + b c) = 6/8, sigmoid(a - b c) = 1/4,
    so a = (logit .75 + logit .25) / 2 = 0 and the LC win rate is 0.5 while the raw one is 7/12.
    The interval is a percentile bootstrap (a2rl.stats): on 12 items it is nearly [0, 1], as
    resamples that draw a group's wins only are common; on the same design repeated 10 times it
    agrees with the delta method, var(a) = (1/(80 * .75 * .25) + 1/(40 * .25 * .75)) / 4 = 0.05,
    sigmoid(+/- 1.96 * sqrt(.05)) = [0.392, 0.608].
    """
    prefs = [1.0] * 6 + [0.0] * 2 + [1.0] + [0.0] * 3
    model_len = [300] * 8 + [100] * 4
    ref_len = [200] * 12
    lc = length_controlled_win_rate(prefs, model_len, ref_len)
    assert win_rate(prefs)["win_rate"] == pytest.approx(7 / 12)
    assert lc["lc_win_rate"] == pytest.approx(0.5, abs=1e-3)
    assert 0.0 <= lc["ci"][0] < 0.2 and 0.8 < lc["ci"][1] <= 1.0
    tenfold = length_controlled_win_rate(prefs * 10, model_len * 10, ref_len * 10)
    assert tenfold["lc_win_rate"] == pytest.approx(0.5, abs=1e-3)
    assert tenfold["ci"] == pytest.approx([0.392, 0.608], abs=0.02)
    assert lc["slope"] > 0  # longer outputs win more often
    # no length effect: the LC win rate is the raw one
    same = length_controlled_win_rate([1.0, 0.0, 1.0, 1.0], [10, 10, 10, 10], [10, 10, 10, 10])
    assert same["lc_win_rate"] == pytest.approx(0.75, abs=1e-3)
    # degenerate: all losses
    none = length_controlled_win_rate([0.0] * 5, [1, 2, 3, 4, 5], [3] * 5)
    assert none["lc_win_rate"] == 0.0 and "degenerate" in none["method"]


# --- end to end ---------------------------------------------------------------------------
class EchoEngine:
    """Answers GOOD for the first half of the prompts, a short loss for the rest."""

    engine_name = "echo"
    engine_version = "0"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        self.calls.append({"n": len(prompts), "max_new_tokens": max_new_tokens,
                           "stop": list(stop)})
        half = len(prompts) // 2
        return [f"GOOD: {p[0]['content']}" if i < half else "meh"
                for i, p in enumerate(prompts)]


@pytest.mark.parametrize("split", ["dev", "test"])
def test_evaluate_end_to_end(split: str, fake: FakeJudge, home: Settings,
                             tmp_path: Path) -> None:
    cache = JudgeCache(home.home_dir / "judge-cache" / "judge.sqlite")
    task = AlpacaEvalTask(n_train=8, n_dev=4, judge=make_judge(fake, cache))
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    engine = EchoEngine()
    result = evaluate(task, checkpoint, split, home, engine=engine)  # type: ignore[arg-type]
    n = {"dev": 4, "test": 12}[split]
    assert result.n_items == n and engine.calls[0]["max_new_tokens"] == 1024
    assert "<|im_end|>" in engine.calls[0]["stop"]
    assert result.metrics["win_rate"] == pytest.approx(0.5)
    assert result.metrics["n_wins"] == n // 2 and result.metrics["n_judge_errors"] == 0
    assert result.score == result.metrics["lc_win_rate"]
    low, high = result.metrics["lc_win_rate_ci"]
    assert 0.0 <= low <= result.score <= high <= 1.0
    assert (result.ci_low, result.ci_high) == (low, high)  # the stored interval is the LC one
    assert result.provenance["ci_method"] == result.metrics["lc_method"]  # names the bootstrap
    assert len(fake.requests) == n
    again = evaluate(task, checkpoint, split, home, engine=EchoEngine())  # type: ignore[arg-type]
    assert len(fake.requests) == n and again.metrics["judge_requests"] == 0
    assert again.score == result.score


def test_judge_prompt_is_read_from_the_installed_alpaca_eval() -> None:
    """The a2rl judge's prompt is alpaca_eval's own file (alpaca_eval_clf_gpt4_turbo/
    alpaca_eval_clf.txt, not a copy); its messages are that file's, each output fenced and one
    sentence added to the system message (their digest for a fixed boundary, pinned)."""
    import hashlib
    from importlib import resources

    system, template = clf_prompt()
    path = resources.files("alpaca_eval").joinpath(
        "evaluators_configs", "alpaca_eval_clf_gpt4_turbo", "alpaca_eval_clf.txt")
    raw = path.read_text()
    assert system in raw and "## Best Model Identifier" in template
    assert hashlib.sha256((system + "\0" + template).encode()).hexdigest() == (
        "1a07d40ecb89a269f0b94b7b766baf6ec1a2a68c13ca0d609b96d668a225eec2")
    fence = Fence("0" * 16)
    messages = Judge.messages(None, 'Name {output_1} a "quoted" {x}',  # type: ignore[arg-type]
                              "first {y}", "second", fence)
    assert messages == [
        {"role": "system", "content": f"{system}\n{fence.notice()}"},
        {"role": "user", "content": template.format(
            instruction='Name {output_1} a "quoted" {x}', output_1=fence.wrap("first {y}"),
            output_2=fence.wrap("second"))}]
    assert hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest() == (
        "4a1df5760468851e6bf44541e112546462448accdf1955016aaced94ad536832")
    # the fields are filled once: text inside an instruction is never substituted
    assert 'Name {output_1} a "quoted" {x}' in messages[1]["content"]
    assert JUDGE_PROMPT_VERSION == "alpaca_eval_clf_gpt4_turbo.2-fenced"  # the cache key's part
