"""WebShop's and DeepSearchQA's `paper` profile against the reference harness's own code.

Two layers:
- with a fixture RD-Agent wheel (tests/rdagent_fixture.py, our placeholder text in the
  harness's code shapes): the grader's loops send exactly the prompts the format prescribes
  (system message, available actions, numbered Observation/Action lines; the raw
  Thought:/Action: text, the forced `Action: answer[`), with the harness's generation settings,
  and the workspace gets the grader's loop and the text;
- with the real wheel (tests/harness_wheels.py; a user without it skips, CI fails): the
  harness's functions themselves (`create_llm_fn`, `webshop_run`, `_react_loop`,
  `_judge_answer`, run from the wheel's source with fake vLLM / RD-Agent modules, nothing
  installed) and ours play the same scripted episodes: the same prompts, generation settings,
  answers and verdicts. The model behind both is one script; the harness's side ends its
  completions as vLLM does (tests/fake_vllm.py: stop strings, the checkpoint's end of
  sequence), ours through our engine's own decoding, on completions that run past a newline,
  hold `<|im_end|>` (no end of sequence for a Qwen2.5 base model) or end at `<|endoftext|>`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from a2rl.grading.seam import RawText
from a2rl.settings import Settings
from a2rl.tasks import prepare_workspace, profile_settings, rdagent
from a2rl.tasks.deepsearchqa import data
from a2rl.tasks.deepsearchqa import paper as dsqa_paper
from a2rl.tasks.deepsearchqa.judge import CorrectnessJudge
from a2rl.tasks.deepsearchqa.task import DeepSearchQATask
from a2rl.tasks.envapi.a2rl_env import Episode
from a2rl.tasks.webshop import paper as ws_paper
from a2rl.tasks.webshop.task import WebShopTask, expert_actions

from .fake_judge import FakeJudge, unfence_all
from .fake_vllm import FakeVLLM
from .fake_vllm import ScriptedEngine as ModelEngine
from .harness_wheels import require_wheel
from .helpers import with_task_options
from .rdagent_fixture import build_wheel

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wheel = build_wheel(tmp_path / "rdagent")
    monkeypatch.setattr(WebShopTask, "harness_wheel", wheel)
    monkeypatch.setattr(DeepSearchQATask, "harness_wheel", wheel)
    return wheel


@pytest.fixture
def shop(settings: Settings) -> Settings:
    return with_task_options(settings.updated({"base_model": "tiny-llama"}),
                             "webshop", data_dir=str(FIXTURES / "webshop"))


@pytest.fixture
def dsqa(settings: Settings) -> Settings:
    return with_task_options(settings.updated({
        "base_model": "tiny-llama", "judge.max_retries": 0, "judge.concurrency": 1}),
        "deepsearchqa", data_dir=str(FIXTURES / "deepsearchqa"),
        corpus=str(FIXTURES / "deepsearchqa" / "corpus.jsonl"))


class ScriptedEngine:
    """Answers prompt k of episode e with scripts[e][k] (the episode found by `which`), and
    records every call."""

    engine_name, engine_version = "scripted", "0"

    def __init__(self, which: Callable[[Any], int], scripts: list[list[str]],
                 default: str = "click[nothing]") -> None:
        self.which, self.scripts, self.default = which, scripts, default
        self.calls: list[dict[str, Any]] = []
        self.seen: list[int] = [0] * len(scripts)

    def generate(self, prompts: Any, max_new_tokens: int, stop: Any = ()) -> list[str]:
        self.calls.append({"prompts": list(prompts), "max_new_tokens": max_new_tokens,
                           "stop": list(stop)})
        out = []
        for prompt in prompts:
            e = self.which(prompt)
            k = self.seen[e]
            self.seen[e] += 1
            out.append(self.scripts[e][k] if k < len(self.scripts[e]) else self.default)
        return out


# --- WebShop ---------------------------------------------------------------------------------
def _shop_task(shop: Settings) -> tuple[WebShopTask, list[dict[str, Any]], list[list[str]]]:
    task = WebShopTask().with_profile("paper")
    items = task.load_split("test", shop)
    catalog = task.catalog(task.data(shop))
    return task, items, [expert_actions(catalog, it["goal"]) for it in items]


def _other_product(items: list[dict[str, Any]], expert: list[list[str]],
                   k: int) -> list[str]:
    """The expert's search and click of a product other than goal k's."""
    return next(e[:2] for e, it in zip(expert, items, strict=True)
                if it["goal"]["asin"] != items[k]["goal"]["asin"])


def _goal_of(items: list[dict[str, Any]]) -> Callable[[Any], int]:
    def which(chat: Any) -> int:
        user = chat[1]["content"]
        return next(i for i, it in enumerate(items)
                    if f"Instruction: Instruction: {it['goal']['instruction_text']}\n" in user)
    return which


def test_webshop_paper_prompt_format(shop: Settings, fixture_wheel: Path) -> None:
    task, items, expert = _shop_task(shop)
    text = rdagent.webshop_text(fixture_wheel, checked=False)
    noise = ["look around", "Action: click[nothing]", "  choose[nothing]", "search[",
             "click[next >]", " Action: search[zzz]  ", "click[back to search]"]
    # episode 1 buys another product than its goal's (a loss)
    other = _other_product(items, expert, 1)
    scripts = [noise + expert[0], [f" {other[0]}  ", other[1], "click[buy now]\n"]]
    engine = ScriptedEngine(_goal_of(items[:2]), scripts)
    episodes = task.play_episodes(items[:2], engine)
    assert episodes is not None
    first = engine.calls[0]
    assert first["max_new_tokens"] == 100 and first["stop"][0] == "\n"
    chat = first["prompts"][0]
    obs0 = f"WebShop [SEP] Instruction: [SEP] {items[0]['goal']['instruction_text']} [SEP] Search"
    assert chat == [
        {"role": "system", "content": text.system},
        {"role": "user", "content": text.prompt.format(
            instruction="Instruction: " + items[0]["goal"]["instruction_text"],
            available_actions="  search[<your query>]\n  click[search]")
         + f"\nObservation 1: {obs0}\nAction 1:"}]
    assert "Fixture shop {braces}." in chat[1]["content"]  # literal braces survive
    # step 8 (episode 0 is first in every call): the last 5 steps, numbered from the start
    step8 = engine.calls[7]["prompts"][0][1]["content"]
    assert "Observation 2:" not in step8 and "\nObservation 3: " in step8
    assert re.findall(r"^Action (\d+): (.*)$", step8, re.M) == [
        ("3", "click[nothing]"), ("4", "search["), ("5", "click[next >]"),
        ("6", "search[zzz]"), ("7", "click[back to search]")]
    assert "\nAction 4: search[\n" in step8  # as the model wrote it; the env ignored it
    assert step8.endswith("Action 8:")
    # an item page lists its buttons, then the product's options
    item_chat = next(c["prompts"][0][1]["content"] for c in engine.calls
                     if "click[buy now]" in c["prompts"][0][1]["content"])
    listed = item_chat.split("Choices:\n", 1)[1].split("\n\nGo:", 1)[0].split("\n")
    assert listed[:6] == ["  click[back to search]", "  click[< prev]", "  click[description]",
                          "  click[features]", "  click[reviews]", "  click[buy now]"]
    assert listed[6:] and all(x.startswith("  click[") for x in listed[6:])
    ep0, ep1 = episodes
    assert ep0.done and ep0.rewards[-1] == 1.0 and ep0.success
    # `Action:` dropped, `choose[` read as `click[`, the completion stripped
    assert ep0.actions[:3] == ["look around", "click[nothing]", "click[nothing]"]
    assert ep1.done and ep1.rewards[-1] < 0.5 and not ep1.success
    scored = task.score_episodes(items[:2], episodes)
    assert [r.correct for r in scored.items] == [True, False]
    assert profile_settings(task, shop)["prompt_source"] == rdagent.DOWNLOAD


def test_webshop_paper_workspace_plays_the_graders_loop(shop: Settings, fixture_wheel: Path,
                                                        tmp_path: Path) -> None:
    """The workspace under paper: the harness's text in data/webshop/, the grader's loop in
    env/ (standard library only), which plays a training goal as the grader would, on the
    grader's site (the original's: data/webshop/site.json); the demonstrations are the
    harness's chats."""
    task = WebShopTask().with_profile("paper")
    rows = task.train_items(shop)
    assert rows and rows[0]["messages"][0] == {
        "role": "system", "content": rdagent.webshop_text(fixture_wheel, checked=False).system}
    assert rows[0]["messages"][-1] == {"role": "assistant", "content": rows[0]["answer"]}
    assert rows[0]["prompt"].endswith("Action 1:")
    ws = tmp_path / "ws"
    ws.mkdir()
    prepare_workspace(task, ws, shop)
    stored = json.loads((ws / "data" / "webshop" / "paper_text.json").read_text())
    assert stored == rdagent.webshop_text(fixture_wheel, checked=False).to_dict()
    script = f"""
import json, sys
sys.path.insert(0, "env")
import webshop_env, webshop_paper
text = json.load(open("data/webshop/paper_text.json"))
ids = webshop_env.train_ids()[:1]
seen = []
def generate(chats):
    seen.append(chats[0][1]["content"])
    return [{rows[0]["answer"]!r}]
(ep,) = webshop_paper.play(ids, [lambda: webshop_env.make_train_env(ids[0])], text,
                           generate, max_steps=2)
print(json.dumps({{"steps": ep.steps, "prompt": seen[0][-9:],
                  "original": webshop_env.catalog().original}}))
"""
    out = subprocess.run([sys.executable, "-I", "-c", script], cwd=ws, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {"steps": 2, "prompt": "Action 1:", "original": True}
    a2rl_ws = tmp_path / "a2rl"
    a2rl_ws.mkdir()
    prepare_workspace(WebShopTask(), a2rl_ws, shop)
    assert not (a2rl_ws / "env" / "webshop_paper.py").exists()
    assert not (a2rl_ws / "data" / "webshop" / "paper_text.json").exists()
    site = json.loads((a2rl_ws / "data" / "webshop" / "site.json").read_text())
    assert site == {"original": False}


def test_missing_harness_wheel_is_one_clear_error(shop: Settings) -> None:
    task = WebShopTask().with_profile("paper")
    items = task.load_split("test", shop)
    with pytest.raises(rdagent.HarnessUnavailable, match="pip download rdagent==1.0.0") as err:
        task.play_episodes(items[:1], ScriptedEngine(lambda p: 0, [[]]))
    assert "\n" not in str(err.value)


# --- DeepSearchQA ----------------------------------------------------------------------------
def _dsqa_items(dsqa: Settings) -> tuple[DeepSearchQATask, list[dict[str, Any]]]:
    task = DeepSearchQATask().with_profile("paper")
    return task, task.load_split("test", dsqa)


def _question_of(items: list[dict[str, Any]]) -> Callable[[Any], int]:
    def which(prompt: Any) -> int:
        return next(i for i, it in enumerate(items) if f"Question: {it['problem']}\n" in prompt)
    return which


def test_deepsearchqa_paper_loop(dsqa: Settings, fixture_wheel: Path) -> None:
    task, items = _dsqa_items(dsqa)
    text = rdagent.deepsearchqa_text(fixture_wheel, checked=False)
    scripts = [
        ["I should look it up. Action: search[neptune moon]", "Action: answer[Triton]"],
        ["Hmm, thinking", "Saturn"],                      # no action: the forced answer
        ["Action: answer[your final answer]"] + ["Action: search[more]"] * 5,  # runs out
    ]
    engine = ScriptedEngine(_question_of(items), scripts)
    episodes = task.play_episodes(items, engine)
    assert episodes is not None
    main, forced = engine.calls[0], engine.calls[1]
    assert all(isinstance(p, RawText) for p in main["prompts"])  # raw completion
    # the harness's stop strings only: the base model's end of sequence ends the rest
    assert main["max_new_tokens"] == 256 and main["stop"] == list(dsqa_paper.STOP)
    assert forced["max_new_tokens"] == 128 and forced["stop"] == ["]"]
    start = (f"{text.system}\n\nQuestion: {items[0]['problem']}\nAnswer type: "
             f"{items[0]['answer_type']}\n\nThought:")
    assert main["prompts"][0] == start
    second = next(c["prompts"][0] for c in engine.calls[1:]
                  if c["prompts"][0].startswith(start))
    assert second.startswith(start + " I should look it up. Action: search[neptune moon]"
                             "\nObservation: ")
    assert second.endswith("\nThought:")
    assert forced["prompts"] == [f"{text.system}\n\nQuestion: {items[1]['problem']}\n"
                                 f"Answer type: {items[1]['answer_type']}\n\nThought: "
                                 "Hmm, thinking\nAction: answer["]
    answers = [ep.actions[-1] for ep in episodes]
    assert answers == ["answer[Triton]", "answer[Saturn]", "answer[I don't know]"]
    retry = next(p for c in engine.calls for p in c["prompts"] if "more" not in p
                 and "your final answer]\nThat is not a valid answer." in p)
    assert retry.endswith("Please think again.\nThought:")
    # six steps (a rejected answer, five searches), then the harness's answer of last resort
    assert len(episodes[2].actions) == 7 and episodes[2].actions[-2] == "search[more]"


def test_deepsearchqa_paper_judges_every_answer(dsqa: Settings, fixture_wheel: Path) -> None:
    _, rows = _dsqa_items(dsqa)
    items = [{**rows[0], "id": f"q{i}", "answer_type": "Single Answer"} for i in range(3)]
    replies = iter(["Correct.", "", "incorrect"])
    with FakeJudge(policy=lambda _o: next(replies)) as fake:
        settings = dsqa.updated({"judge.base_url": fake.base_url,
                                           "judge.model": "fake-judge"})
        judge = CorrectnessJudge.from_settings(settings, environ={})
        judge.cache = None  # every verdict asked for
        task = DeepSearchQATask(judge).with_profile("paper")
        task.load_split("test", dsqa)
        eps = [Episode(id=f"e{i}", actions=[f"answer[{a}]"], observations=["q", "a"],
                       rewards=[0.0], done=True)
               for i, a in enumerate(["anything", "", items[2]["answer"]])]
        scored = task.score_episodes(items, eps)
        assert len(fake.requests) == 3  # the empty answer is judged too; nothing re-asked
        # the fence is the one difference from the harness's prompt (docs/paper-fidelity.md)
        assert "Predicted: \n" in unfence_all(fake.requests[1]["messages"][1]["content"])
    # "Correct." -> correct; an empty reply -> the string match ("" is in every gold);
    # "incorrect" -> incorrect although the string match would say yes
    assert [r.correct for r in scored.items] == [True, True, False]
    assert scored.metrics["n_string_match_fallbacks"] == 1


def test_deepsearchqa_paper_workspace(dsqa: Settings, fixture_wheel: Path,
                                      tmp_path: Path) -> None:
    task = DeepSearchQATask().with_profile("paper")
    ws = tmp_path / "ws"
    ws.mkdir()
    prepare_workspace(task, ws, dsqa)
    assert (ws / "env" / "deepsearchqa_paper.py").is_file()
    stored = json.loads((ws / "data" / "deepsearchqa" / "paper_text.json").read_text())
    assert stored["system"] == rdagent.deepsearchqa_text(fixture_wheel, checked=False).system
    script = """
import json, sys
sys.path.insert(0, "env")
import deepsearchqa_paper as p
text = json.load(open("data/deepsearchqa/paper_text.json"))
calls = []
def generate(prompts, n, stop):
    calls.append((n, list(stop)))
    return ["Action: search[x]"] if len(calls) == 1 else ["Action: answer[y]"]
(ep,) = p.play(["q"], ["What?"], ["Single Answer"], lambda: (lambda q: []), text, generate)
print(json.dumps({"actions": ep.actions, "calls": calls}))
"""
    out = subprocess.run([sys.executable, "-I", "-c", script], cwd=ws, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["actions"] == ["search[x]", "answer[y]"]
    assert doc["calls"][0] == [256, list(dsqa_paper.STOP)]


# --- against the harness's own code, from the real wheel -------------------------------------
def _harness(source: str, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """The module-level functions, classes and assignments `names` of a harness file, run in
    `namespace` (no imports of the file are executed)."""
    tree = ast.parse(source)
    body = [node for node in tree.body
            if (isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names)
            or (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in names for t in node.targets))]
    found = {getattr(n, "name", None) or n.targets[0].id for n in body}  # type: ignore[attr-defined]
    assert found == names, f"the harness file lacks {names - found}"
    exec(compile(ast.Module(body=body, type_ignores=[]), "<harness>", "exec"), namespace)
    return namespace


TYPING = {name: getattr(typing, name) for name in ("Any", "Callable", "Dict", "List",
                                                    "Optional", "Tuple")}


@pytest.fixture
def real_wheel() -> Iterator[Path]:
    yield require_wheel(rdagent.RDAGENT)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A base model's tokenizer and end of sequence, shaped as Qwen2.5-1.5B's."""
    from .qwen_shaped import write_model_dir

    return write_model_dir(tmp_path / "base")


def _both(script: list[str], default: str) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """The same model for the harness's side and ours: each answers its prompts in order."""
    theirs, ours = iter(script), iter(script)
    return (lambda prompt: next(theirs, default)), (lambda prompt: next(ours, default))


class HarnessEnv:
    """Our site behind the original WebAgentTextEnv's interface, as `webshop_run` calls it."""

    def __init__(self, env: Any) -> None:
        self.env, self.last = env, env.reset()

    def get_available_actions(self) -> dict[str, Any]:
        return ws_paper.available_actions(self.last)

    def step(self, action: str) -> tuple[str, float, bool, Any]:
        self.last = self.env.step(action)
        return self.last.observation, self.last.reward, self.last.done, None


def test_webshop_equals_the_harness(shop: Settings, real_wheel: Path, base: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    source = rdagent.source_of(real_wheel, rdagent.WEBSHOP_EVAL)
    harness = _harness(source, {"create_llm_fn", "_format_available_actions",
                                "build_react_prompt", "webshop_run"},
                       {**TYPING, "os": __import__("os"), "_log": lambda msg: None})
    monkeypatch.setattr(WebShopTask, "harness_wheel", real_wheel)
    task, items, expert = _shop_task(shop)
    scripts = [
        ["look", "Action: click[nothing]", "search[", " Action: search[zzz] ", "click[next >]",
         "click[back to search]", *expert[0]],                                # a win, step 12
        [f"{expert[1][0]}\nAction 2: click[x]", expert[1][1].replace("click[", "choose[", 1)
         + "<|endoftext|>more", "Action: click[buy<|im_end|> now]\n"],
        [*(other := _other_product(items, expert, 2)), "click[description]",
         "click[< prev]", other[1], "click[buy now]"],                       # a loss
        ["click[nothing]"] * 50,                                              # cut at 50
    ]
    cases = [items[0], items[1], items[2], items[0]]
    for case, script in zip(cases, scripts, strict=True):
        theirs, mine = _both(script, "click[nothing]")
        fake = FakeVLLM(theirs)
        fake.install(monkeypatch)
        llm_fn, cleanup = harness["create_llm_fn"]("vllm", str(base))
        env = HarnessEnv(task.make_env(case))
        reward, steps, success = harness["webshop_run"](
            llm_fn, env, env.env.instruction_text(), env.last.observation)
        cleanup()
        engine = ModelEngine(base, mine)
        (ours,) = task.play_episodes([case], engine)  # type: ignore[misc]
        assert engine.prompts == [m for m, _ in fake.calls]  # the rendered chats
        for (_, kw), call in zip(fake.calls, engine.calls, strict=True):
            assert kw == {"temperature": 0, "max_tokens": call["max_new_tokens"],
                          "stop": call["stop"]}
        our_reward = ours.rewards[-1] if ours.done else 0.0
        assert (our_reward, ours.steps, ours.success) == (reward, steps, success)


def test_deepsearchqa_equals_the_harness(dsqa: Settings, real_wheel: Path, base: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    source = rdagent.source_of(real_wheel, rdagent.DEEPSEARCHQA_EVAL)
    logger = types.SimpleNamespace(info=lambda *a: None, warning=lambda *a: None)
    harness = _harness(source, {"REACT_SYSTEM_PROMPT", "DeepSearchQAEvaluator"},
                       {**TYPING, "re": re, "json": json, "logger": logger,
                        "BaseEvaluator": object})
    evaluator = object.__new__(harness["DeepSearchQAEvaluator"])
    evaluator.eval_config = {}
    monkeypatch.setattr(DeepSearchQATask, "harness_wheel", real_wheel)
    task, items = _dsqa_items(dsqa)
    results = [{"title": "T", "snippet": "first"}, {"title": "U", "snippet": "second"},
               {"title": "V", "snippet": "third"}, {"title": "W", "snippet": "fourth"}]
    monkeypatch.setattr("a2rl.tasks.deepsearchqa.task.search_fn", lambda backend: (
        lambda query: results if query != "nothing" else []))
    scripts = [
        ["Let me search. Action: search[neptune]", "It is Triton. Action: answer[Triton]"],
        ["Thinking only", "Saturn"],
        ["Thinking", "your final answer", "Now. Action: search[nothing]",
         "Action: answer[your final answer]", "x Action: answer[Paris]"],
        ["Action: search[a]"] * 3 + ["Action: answer[ your final answer ]"]
        + ["Action: search[b]"] * 2,
        ["Action: search[a]"] * 6,
        ["Hmm", "  "],
        # past the stop strings, an end-of-turn token that is no end of sequence, the end
        ["Let me see.\nAction: search[neptune]\nObservation: made up",
         "It is<|im_end|> Triton. Action: answer[Tri<|im_end|>ton]\nThought: done",
         "x"],
        ["Thinking<|endoftext|>Action: answer[Paris]", "Paris]<|endoftext|>"],
    ]
    from .fake_vllm import SamplingParams

    for k, script in enumerate(scripts):
        item = items[k % len(items)]
        theirs, mine = _both(script, "")
        fake = FakeVLLM(theirs)
        fake.install(monkeypatch)
        params = SamplingParams(temperature=0.0, max_tokens=256,  # run_eval's
                                stop=["\nAction:", "\nThought:", "\nObservation:"])
        predicted = evaluator._react_loop(fake.LLM(str(base), max_model_len=4096), params,
                                          lambda q: dsqa_paper.render_observation(
                                              results if q != "nothing" else []),
                                          item["problem"], item["answer_type"])
        engine = ModelEngine(base, mine)
        (ours,) = task.play_episodes([item], engine)  # type: ignore[misc]
        assert engine.prompts == [p for p, _ in fake.calls], k
        for (_, kw), call in zip(fake.calls, engine.calls, strict=True):
            assert kw["max_tokens"] == call["max_new_tokens"] and kw["temperature"] == 0
            assert list(kw["stop"]) == call["stop"]
        assert ours.actions[-1] == f"answer[{predicted}]", k


def test_deepsearchqa_judge_equals_the_harness(dsqa: Settings, real_wheel: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    source = rdagent.source_of(real_wheel, rdagent.DEEPSEARCHQA_EVAL)
    logger = types.SimpleNamespace(info=lambda *a: None, warning=lambda *a: None)
    harness = _harness(source, {"REACT_SYSTEM_PROMPT", "DeepSearchQAEvaluator"},
                       {**TYPING, "re": re, "json": json, "logger": logger,
                        "BaseEvaluator": object})
    evaluator = object.__new__(harness["DeepSearchQAEvaluator"])
    asked: list[tuple[str, str]] = []
    reply: list[str | None] = []

    class APIBackend:
        def build_messages_and_create_chat_completion(self, user_prompt: str,
                                                      system_prompt: str) -> str:
            asked.append((system_prompt, user_prompt))
            if reply[0] is None:
                raise RuntimeError("the judge is down")
            return reply[0]

    llm_utils = types.ModuleType("rdagent.oai.llm_utils")
    llm_utils.APIBackend = APIBackend  # type: ignore[attr-defined]
    for name in ("rdagent", "rdagent.oai"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "rdagent.oai.llm_utils", llm_utils)
    monkeypatch.setattr(DeepSearchQATask, "harness_wheel", real_wheel)
    items = data.split_rows(data.load_rows(dsqa), "test", "paper")
    table = ["correct", "Correct.", "CORRECT!\nbecause it matches", "incorrect", "Incorrect.",
             "The answer is correct.", "correct, mostly", "", "  \n ", None]
    predictions = ["", items[0]["answer"], f"{items[0]['answer']} and more", "no idea"]
    for text in table:
        for predicted in predictions:
            item = items[0]
            reply[:] = [text]
            asked.clear()
            expected = evaluator._judge_answer(predicted, item["answer"], item["answer_type"])
            with FakeJudge(policy=lambda _o, t=text: t or "") as fake:
                if text is None:
                    fake.fail(400, times=1)
                settings = dsqa.updated({"judge.base_url": fake.base_url,
                                                   "judge.model": "fake-judge"})
                judge = CorrectnessJudge.from_settings(settings, environ={})
                judge.cache = None  # every verdict asked for
                task = DeepSearchQATask(judge).with_profile("paper")
                task.load_split("test", dsqa)
                scored = task.score_episodes([item], [Episode(
                    id="e", actions=[f"answer[{predicted}]"], observations=["q", "a"],
                    rewards=[0.0], done=True)])
                sent = fake.requests[0]["messages"]
            assert scored.items[0].correct == expected, (text, predicted)
            # the harness's words exactly, the model's answer fenced (docs/paper-fidelity.md)
            assert [unfence_all(m["content"]) for m in sent] == list(asked[0]), (text, predicted)
            assert sum("<model-output-" in m["content"] for m in sent) == 1
