"""DeepSearchQA on fixture rows (the real CSV schema): the split, the episode, both search
backends (an offline BM25 corpus, a fake web endpoint over HTTP), the judge over a fake
OpenAI-compatible server (errors and malformed verdicts included), the search service reached
from inside a real bubblewrap sandbox and recorded, and an `a2rl run` with the reference agent.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Evaluation, Store, ToolCall
from a2rl.tasks import service_handlers
from a2rl.tasks.deepsearchqa import data, game
from a2rl.tasks.deepsearchqa.judge import CorrectnessJudge, parse_grade
from a2rl.tasks.deepsearchqa.search import CorpusSearch, WebSearch, make_search
from a2rl.tasks.deepsearchqa.task import DeepSearchQATask
from a2rl.tasks.envapi.a2rl_env import Episode

from .baseline_seed import base_model_dir, seed_base_model  # noqa: F401  (a fixture)
from .conftest import require_bwrap
from .fake_judge import FakeJudge
from .fake_search import FakeSearch
from .helpers import with_task_options

FIXTURE = Path(__file__).parent / "fixtures" / "deepsearchqa"
CORPUS = FIXTURE / "corpus.jsonl"


@pytest.fixture
def dsqa(settings: Settings) -> Settings:
    return with_task_options(settings.updated({
        "base_model": "tiny-llama", "judge.max_retries": 0, "judge.concurrency": 1}),
        "deepsearchqa", data_dir=str(FIXTURE), corpus=str(CORPUS))


def test_split_is_the_seeded_shuffle_and_disjoint(dsqa: Settings) -> None:
    rows = data.load_rows(dsqa)
    assert len(rows) == 12 and {r["answer_type"] for r in rows} == {"Single Answer",
                                                                     "Set Answer"}
    splits = {s: data.split_rows(rows, s) for s in ("train", "test", "dev")}
    assert [len(v) for v in splits.values()] == [3, 3, 3]
    seen = [r["row_index"] for v in splits.values() for r in v]
    assert len(set(seen)) == 9
    assert splits == {s: data.split_rows(data.load_rows(dsqa), s) for s in splits}


def test_hub_fallback_error_is_one_clear_line(settings: Settings,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def offline(**_: Any) -> None:
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(RuntimeError, match="deepsearchqa_dir") as err:
        data.load_rows(settings)
    assert "\n" not in str(err.value)


def test_episode_actions_results_and_lexical_reward() -> None:
    searched: list[str] = []

    def search(q: str) -> list[dict[str, Any]]:
        searched.append(q)
        return [{"title": "Triton", "snippet": "Triton is the largest moon of Neptune."}]

    env = game.QAEnv("What is the largest moon of Neptune?", search,
                     lambda a: game.lexical_reward(a, "Triton", "Single Answer"))
    first = env.reset()
    assert first.observation.startswith("Question: What is the largest moon")
    assert "Invalid action" in env.step("look around").observation
    assert "Empty search" in env.step("search[ ]").observation
    step = env.step("search[neptune moon]")
    assert searched == ["neptune moon"] and "[1] Triton: Triton is" in step.observation
    done = env.step("answer[it is triton.]")
    assert done.done and done.reward == 1.0 and done.info["success"]
    # an empty answer ends the episode as incorrect without asking the reward
    env = game.QAEnv("q", search, lambda a: pytest.fail("must not be called"))  # type: ignore
    env.reset()
    empty = env.step("answer[]")
    assert empty.done and empty.reward == 0.0 and not empty.info["success"]
    # set answers need every item
    assert game.lexical_reward("austria, spain and france", "Austria, France, Spain", "Set Answer")
    assert not game.lexical_reward("austria and spain", "Austria, France, Spain", "Set Answer")


def test_corpus_and_web_search_backends(dsqa: Settings) -> None:
    corpus = make_search(dsqa)
    assert isinstance(corpus, CorpusSearch)
    hits = corpus.search("largest moon of Neptune", 3)
    assert hits and hits[0].title == "Triton"
    assert corpus.search("zzzz qqqq") == []
    with FakeSearch() as fake:
        web_settings = with_task_options(dsqa, "deepsearchqa", search_url=fake.url)
        # without a key, the corpus is used; with one, the web endpoint
        assert isinstance(make_search(web_settings, environ={}), CorpusSearch)
        web = make_search(web_settings, environ={"A2RL_SEARCH_API_KEY": "sk-test"})
        assert isinstance(web, WebSearch)
        results = web.search("capital of chile", 2)
        assert [r.title for r in results] == ["Result 1 for capital of chile",
                                              "Result 2 for capital of chile"]
        assert fake.requests == [{"query": "capital of chile", "k": 2}]
        assert fake.headers[0]["authorization"] == "Bearer sk-test"
        fake.malformed = True
        with pytest.raises(RuntimeError, match="malformed"):
            web.search("anything")
    none = with_task_options(dsqa, "deepsearchqa", corpus="")
    with pytest.raises(RuntimeError, match="no search backend"):
        make_search(none, environ={})


def _episode(eid: str, actions: list[str]) -> Episode:
    ep = Episode(id=eid, actions=actions, observations=["q"] * (len(actions) + 1),
                 rewards=[0.0] * len(actions), done=bool(actions))
    return ep


def test_judge_scoring_errors_malformed_and_empty(dsqa: Settings) -> None:
    task = DeepSearchQATask()
    items = data.split_rows(data.load_rows(dsqa), "test")
    items = [*items, {**items[0], "id": "extra-1"}, {**items[1], "id": "extra-2"}]
    verdicts = iter(["CORRECT", "maybe", " incorrect. "])
    with FakeJudge(policy=lambda _outputs: next(verdicts)) as fake:
        settings = dsqa.updated({"judge.base_url": fake.base_url,
                                           "judge.model": "fake-judge"})
        task.judge = CorrectnessJudge.from_settings(settings, environ={})
        episodes = [
            _episode("a", ["search[x]", "answer[herman melville]"]),  # CORRECT
            _episode("b", ["answer[]"]),  # empty: incorrect, no judge call
            _episode("c", []),  # never answered
            _episode("d", ["answer[neptune]"]),  # malformed verdict: an error
            _episode("e", ["answer[danube]"]),  # INCORRECT
        ]
        result = task.score_episodes(items, episodes)
        assert [r.correct for r in result.items] == [True, False, False, False, False]
        assert len(fake.requests) == 3
        assert result.metrics["n_judge_errors"] == 1 and result.metrics["n_answered"] == 4
        assert result.metrics["n_empty_answers"] == 1 and result.score == pytest.approx(0.2)
        assert episodes[0].rewards[-1] == 1.0 and episodes[3].rewards[-1] == 0.0
        record = json.loads(result.items[3].parsed or "{}")
        assert record["verdict"] == "error" and "malformed" in record["judge_error"]
        user = fake.requests[0]["messages"][-1]["content"]
        assert "Gold answer: Herman Melville" in user and "EVERY item" in user
        # an HTTP failure is an error too, never correct; the correct verdict is cached
        fake.fail(500)
        again = task.score_episodes([items[0], items[3]],
                                    [_episode("a", ["answer[herman melville]"]),
                                     _episode("d", ["answer[neptune]"])])
        assert [r.correct for r in again.items] == [True, False]
        assert len(fake.requests) == 4  # only the earlier error was asked again
    assert parse_grade("**CORRECT**") == "correct" and parse_grade("correct-ish") is None


def test_search_service_from_bwrap_is_recorded(dsqa: Settings, store: Store) -> None:
    """The real path: create a run, serve it (the registry starts its services), start its
    bubblewrap sandbox and search from inside through env/; the env API refuses dev/test."""
    require_bwrap()
    from a2rl.server import create_run
    from a2rl.server.app import RunRegistry

    created = create_run(dsqa, store, task_id="deepsearchqa", baseline=False)
    workspace = Path(created.run.workspace)
    text = "\n".join(p.read_text(errors="replace") for p in workspace.rglob("*")
                     if p.is_file() and "base_model" not in p.parts)
    for row in data.split_rows(data.load_rows(dsqa), "test"):
        assert row["problem"] not in text  # hidden questions never enter the workspace
    registry = RunRegistry(dsqa, store)
    rt = registry.get(created.run.id)
    sandbox = rt.sandbox.get()
    assert sandbox.isolated
    script = (
        "import sys; sys.path.insert(0, 'env'); import a2rl_env, json\n"
        "ids = a2rl_env.train_ids()\n"
        "pool = a2rl_env.make_pool([ids[0]])\n"
        "pool.reset()\n"
        "pool.step({0: 'search[largest moon of neptune]'})\n"
        "print('OBS', pool.episodes[0].observations[-1])\n"
        "for bad in (lambda: a2rl_env.make('test-000'), lambda: a2rl_env.train_ids('dev')):\n"
        "    try:\n"
        "        bad()\n"
        "    except a2rl_env.SplitError:\n"
        "        print('REFUSED')\n"
    )
    (workspace / "code" / "probe.py").write_text(script)
    sandbox.spawn("probe", f"{sys.executable} code/probe.py", "logs/probe.log")
    job = sandbox.wait("probe", 60)
    log = (rt.job_logs.folder / "probe.log").read_text()  # the supervisor's copy, not the link
    try:
        assert job.exit_code == 0, log
        # Triton answers a hidden question of the fixture: the sandbox's search withholds it
        assert "Search: largest moon of neptune" in log and "Triton" not in log, log
        assert log.count("REFUSED") == 2, log
        with store.session() as s:
            rows = s.exec(select(ToolCall).where(ToolCall.run_id == created.run.id,
                                                 ToolCall.tool == "service.search")).all()
        assert len(rows) == 1 and rows[0].arguments["query"] == "largest moon of neptune"
        assert not rows[0].is_error and "Triton" not in rows[0].result_summary
        # the record shows the filtering; the sandbox never saw the count (no "withheld" in
        # what it printed)
        assert '"recorded_only": {"withheld": 1}' in rows[0].result_summary
    finally:
        sandbox.stop()
        for host in registry._services.get(created.run.id, []):
            host.stop()


A2RL = str(Path(sys.executable).parent / "a2rl")
#: fixture-sized training; GRPO samples as few tokens per action as the grader is capped to
#: (A2RL_GRADING__MAX_NEW_TOKENS=12 below), not the task's 128 (most of its rollout time)
QUICK = ["--agent-option", "sft_args=--steps 3 --holdout 0 --batch 4 --max-length 512",
         "--agent-option", "grpo_args=--iters 1 --instances 2 --group 2 --max-new-tokens 12"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_deepsearchqa_run_with_the_reference_agent(tmp_path: Path,
                                                   base_model_dir: Path) -> None:  # noqa: F811
    import os

    require_bwrap()
    with FakeJudge(policy=lambda _o: "INCORRECT") as judge:
        env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
        env.update(A2RL_HOME=str(seed_base_model(tmp_path, base_model_dir)),
                   A2RL_BASE_MODEL="tiny-llama", A2RL_GRADING__MAX_NEW_TOKENS="12",
                   A2RL_DEEPSEARCHQA_DIR=str(FIXTURE),
                   A2RL_DEEPSEARCHQA_CORPUS=str(CORPUS), A2RL_JUDGE__BASE_URL=judge.base_url,
                   A2RL_JUDGE__MODEL="fake-judge", A2RL_JUDGE__MAX_RETRIES="0")
        p = subprocess.run([A2RL, "run", "--task", "deepsearchqa", "--agent", "reference",
                            "--budget", "15m", *QUICK, "--json"], env=env, capture_output=True,
                           text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        evals = s.exec(select(Evaluation).where(Evaluation.run_id == summary["run_id"])).all()
    assert {e.split for e in evals} == {"dev", "test"}
    assert all(e.status == "done" and e.n_items == 3 for e in evals), [
        (e.split, e.status, e.error) for e in evals]
    assert all(it["episode"] is not None and "steps" in it["episode"]
               for e in evals for it in e.items)


# --- the paper profile (autorl_bench/benchmarks/deepsearchqa) --------------------------------
def _write_900(folder: Path) -> Path:
    """900 rows in DSQA-full.csv's schema (the size of the real file), our own placeholder
    questions."""
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    with (folder / data.FILE).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["problem", "problem_category", "answer", "answer_type"])
        for i in range(900):
            writer.writerow([f"Placeholder question number {i}?", f"cat{i % 17}",
                             f"item{i}, other{i}" if i % 3 == 0 else f"answer{i}",
                             "Set Answer" if i % 3 == 0 else "Single Answer"])
    return folder


def test_paper_split_is_the_harness_datasets_shuffle(settings: Settings, tmp_path: Path) -> None:
    """Our paper split equals what the harness's `split_dataset` computes with the real
    `datasets` library (deepsearchqa/data.py: `dataset.shuffle(seed=SPLIT_SEED)`, then rows
    0-99 train and 100-299 eval), on a 900-row file loaded as `load_dataset` loads a CSV."""
    from datasets import load_dataset

    folder = _write_900(tmp_path / "dsqa")
    dsqa = with_task_options(settings, "deepsearchqa", data_dir=str(folder))
    shuffled = load_dataset("csv", data_files=str(folder / data.FILE),
                            split="train").shuffle(seed=42)
    harness_train = shuffled.select(range(0, 100))["problem"]
    harness_eval = shuffled.select(range(100, 300))["problem"]
    task = DeepSearchQATask().with_profile("paper")
    assert [r["problem"] for r in task.train_rows(dsqa)] == harness_train
    test = task.load_split("test", dsqa)
    assert [r["problem"] for r in test] == harness_eval
    dev = {r["problem"] for r in task.load_split("dev", dsqa)}
    assert len(dev) == 100 and not dev & (set(harness_train) | set(harness_eval))
    # the a2rl profile keeps its own random.Random(42) split: a different one
    a2rl_test = [r["problem"] for r in DeepSearchQATask().load_split("test", dsqa)]
    assert len(a2rl_test) == 200 and a2rl_test != harness_eval
    assert (task.rollout.max_steps, task.rollout.history_window) == (6, 6)
    assert task.spec.grader.max_new_tokens == 256
    assert "Dataset.shuffle(seed=42)" in task.task_md() and "6 actions" in task.task_md()


@pytest.fixture
def harness_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The paper profile reads RD-Agent's prompts from a fixture wheel in its layout."""
    from a2rl.tasks.rdagent import deepsearchqa_text

    from .rdagent_fixture import build_wheel

    wheel = build_wheel(tmp_path / "rdagent")
    monkeypatch.setattr(DeepSearchQATask, "harness_wheel", wheel)
    return deepsearchqa_text(wheel, checked=False)


def test_paper_judge_rules_and_string_match_fallback(dsqa: Settings, harness_text: Any) -> None:
    from a2rl.tasks.deepsearchqa.judge import string_match

    # deepsearchqa/eval.py `_string_match`: containment for a single answer, every
    # comma-separated gold item for a set
    assert string_match("It is Saturn.", "Saturn", "Single Answer")
    assert string_match("saturn", "Saturn, the planet", "Single Answer")  # pred in gold
    assert string_match("spain, austria, france, italy", "Austria, France, Spain", "Set Answer")
    assert not string_match("austria, spain", "Austria, France, Spain", "Set Answer")
    items = data.split_rows(data.load_rows(dsqa), "test")
    with FakeJudge(policy=lambda _outputs: "CORRECT") as fake:
        settings = dsqa.updated({"judge.base_url": fake.base_url,
                                           "judge.model": "fake-judge"})
        task = DeepSearchQATask(CorrectnessJudge.from_settings(settings, environ={}))
        paper = task.with_profile("paper")
        assert paper.get_judge().rules == "paper" and task.get_judge().rules == "a2rl"
        gold = items[0]["answer"].lower()
        ok = paper.score_episodes([items[0]], [_episode("a", [f"answer[{gold}, extra]"])])
        # the harness's judge prompt (from RD-Agent's wheel): gold, type, prediction, no
        # question; the prediction only fenced (its per-request boundary read back)
        sent = fake.requests[-1]["messages"]
        boundary = re.search(r"<model-output-([0-9a-f]{16})>", sent[1]["content"]).group(1)
        fenced = f"<model-output-{boundary}>{gold}, extra</model-output-{boundary}>"
        assert sent == [
            {"role": "system", "content": harness_text.judge_system},
            {"role": "user", "content": harness_text.judge.format(
                answer_type=items[0]["answer_type"], gold=items[0]["answer"],
                predicted=fenced)}]
        assert ok.items[0].correct
        assert ok.metrics["judge"]["prompt_version"].startswith("dsqa-harness.3-fenced.")
        # a failed judge call: the harness's string match decides (a2rl: incorrect)
        fake.fail(500, times=2)
        fell = paper.score_episodes(items[:2], [_episode("b", [f"answer[{gold} indeed]"]),
                                                _episode("c", ["answer[nothing like it]"])])
        assert [r.correct for r in fell.items] == [True, False]
        assert fell.metrics["n_string_match_fallbacks"] == 2
        assert fell.metrics["n_judge_errors"] == 2
        fake.fail(500, times=1)
        strict = task.score_episodes([items[0]], [_episode("b", [f"answer[{gold} indeed]"])])
        assert not strict.items[0].correct


def test_sandbox_search_withholds_hidden_answers_and_the_datasets_pages(
        dsqa: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake endpoint echoes the query into every result, as a web page about it would: a
    query carrying a dev or test answer (any case and punctuation) or the dataset's name gets
    nothing back through the sandbox's search service, and the count withheld (of the
    `REFILL * k` results asked for, to replace the withheld ones) is kept for the record
    only, never in what the sandbox reads; a training answer still comes back."""

    monkeypatch.setenv("A2RL_SEARCH_API_KEY", "sk-test")
    hidden = [r for split in ("dev", "test") for r in data.split_rows(data.load_rows(dsqa), split)]
    single = next(r for r in hidden if r["answer_type"] == "Single Answer"
                  and len(r["answer"]) >= 4)
    train = data.split_rows(data.load_rows(dsqa), "train")[0]
    with FakeSearch() as fake:
        web = with_task_options(dsqa, "deepsearchqa", search_url=fake.url)
        search = service_handlers(DeepSearchQATask(), web)["search"]
        leak = search({"query": f"facts about {single['answer'].upper()}!", "k": 3})
        assert leak.result == {"backend": "web", "results": []}
        assert leak.record == {"withheld": 9}
        page = search({"query": "Google DeepSearchQA dataset questions", "k": 2})
        assert page.result["results"] == [] and page.record == {"withheld": 6}
        fine = search({"query": f"facts about {train['answer']}", "k": 2})
        assert len(fine.result["results"]) == 2 and fine.record == {"withheld": 0}
        # the endpoint was asked each time (the filter is after), for 3 results per one shown
        assert [r["k"] for r in fake.requests] == [9, 6, 6]
