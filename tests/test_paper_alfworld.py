"""ALFWorld's `paper` profile against the reference harness's ReAct loop (microsoft/RD-Agent,
rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py: `alfworld_run`).

On the hand-written fixture games played by the real TextWorld engine, through the grader's own
entry point (`run_rollouts`): the exact prompt text for a fixed history (examples of the game's
task type, banner dropped, `>` turns, `think:` answered `OK.`, the whole history kept, raw
text), and the harness's success verdicts on scripted episodes (won when the game says so,
within 50 steps and not 49, actions sent as written). The ReAct examples are a fixture in the
authors' schema (tests/fixtures/alfworld/alfworld_3prompts.json); their download is checked
against a real local HTTP server.

With RD-Agent's wheel (tests/harness_wheels.py; a user without it skips, CI fails): the
harness's own functions (`create_llm_fn`'s vLLM path with `_truncate_prompt_to_fit`,
`alfworld_run`, `process_ob`, and `run_eval`'s first-observation, game-name and prompt
statements) play the same games beside ours, through a fake vLLM that ends completions as
vLLM does (tests/fake_vllm.py) and our engine's own decoding: the same prompts, context
truncation, actions and verdicts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from a2rl.settings import Settings
from a2rl.tasks import prepare_workspace

from .test_alfworld import FIXTURE, alf, alf_root, expert_plan  # noqa: F401

PROMPTS = json.loads((FIXTURE / "alfworld_3prompts.json").read_text())
CLEAN_FIRST = ("You are in the middle of a room. Looking quickly around you, you see a "
               "coffeemachine 1, a countertop 1, and a sinkbasin 1.\nYour task is to: clean "
               "some mug and put it in coffeemachine.")


def paper_task() -> Any:
    from a2rl.tasks.alfworld.task import AlfWorldTask

    task = AlfWorldTask()
    task.profile = "paper"  # what with_profile("paper") does
    task.spec, task.rollout = task.paper_spec, task.paper_rollout
    return task


class ScriptEngine:
    """Answers each game from its own script (found by the goal in the prompt's last task
    section), recording every prompt and the generation settings; past the script, `look`.
    Its tokenizer (one token per byte) counts the context the prompts are fitted to."""

    engine_name, engine_version = "scripted-react", "1"

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        from .qwen_shaped import build_tokenizer

        self.tokenizer = build_tokenizer()
        self.scripts = {goal: list(lines) for goal, lines in scripts.items()}
        self.prompts: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        self.calls.append({"n": len(prompts), "max_new_tokens": max_new_tokens,
                           "stop": list(stop), "types": {type(p).__name__ for p in prompts}})
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            task = prompt.rsplit("Here is the task.\n", 1)[1]
            goal = task.split("Your task is to: ", 1)[1].split("\n", 1)[0]
            script = self.scripts[goal]
            out.append(script.pop(0) if script else " look")
        return out


@pytest.fixture
def items(alf: Settings, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
          ) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    from a2rl.tasks.alfworld import react

    # these tests read whole prompts: a context they never fill (the cut has its own tests)
    monkeypatch.setattr(react, "MAX_MODEL_LEN", 1 << 20)
    task = paper_task()
    yield task, task.load_split("dev", alf) + task.load_split("test", alf)


def plans(alf_root: Path, items: list[dict[str, Any]]) -> dict[str, list[str]]:  # noqa: F811
    from a2rl.tasks.alfworld.data import game_dir

    goals = {"valid_seen": "put some pen on shelf.",
             "valid_unseen": "clean some mug and put it in coffeemachine."}
    return {goals[it["id"].split("/")[0]]: expert_plan(game_dir(alf_root, it["id"]))
            for it in items}


def test_paper_settings_are_the_harness() -> None:
    task = paper_task()
    assert task.spec.grader.max_new_tokens == 100 and task.spec.grader.stop[0] == "\n"
    assert (task.rollout.max_steps, task.rollout.history_window) == (50, 50)
    assert task.spec.default_base_model == "Qwen/Qwen2.5-1.5B-Instruct"
    assert task.spec.default_budget == "12h" and task.spec.splits["test"].n_items == 134
    from a2rl.tasks.alfworld.task import AlfWorldTask

    a2rl = AlfWorldTask()  # the default profile is untouched
    assert (a2rl.spec.grader.max_new_tokens, a2rl.rollout.history_window) == (32, 2)
    assert a2rl.play_episodes([], None) is None


def test_prompt_text_for_a_fixed_history(items: Any, alf_root: Path) -> None:  # noqa: F811
    from a2rl.grading.engine import RawText
    from a2rl.tasks.interactive import run_rollouts

    task, games = items
    goal = "clean some mug and put it in coffeemachine."
    script = ["think: I need a mug. \nThen clean it.", "  go to countertop 1",
              "take mug 1 from countertop 1"]
    engine = ScriptEngine({goal: script, "put some pen on shelf.": []})
    task.rollout = task.rollout.model_copy(update={"max_steps": 5})  # the history shown: 4
    run_rollouts(task, games[1:], engine)
    prefix = ("Interact with a household to solve a task. Here are two examples.\n"
              + PROMPTS["react_clean_1"] + PROMPTS["react_clean_0"] + "\nHere is the task.\n")
    expected = (prefix + CLEAN_FIRST + "\n>"
                + " think: I need a mug.\nOK.\n>"
                + " go to countertop 1\nYou arrive at countertop 1. On the countertop 1, you "
                  "see a mug 1.\n>"
                + " take mug 1 from countertop 1\nYou pick up the mug 1 from the countertop "
                  "1.\n>")
    assert engine.prompts[0] == prefix + CLEAN_FIRST + "\n>"
    assert engine.prompts[3] == expected
    # every later prompt extends the one before: the whole history is kept
    assert all(b.startswith(a) for a, b in itertools.pairwise(engine.prompts))
    assert isinstance(engine.prompts[0], RawText)  # raw completion, no chat template
    assert engine.calls[0] == {"n": 1, "max_new_tokens": 100, "stop": ["\n"],
                               "types": {"RawText"}}


def test_scripted_episodes_get_the_harness_verdicts(items: Any, alf_root: Path) -> None:  # noqa: F811
    from a2rl.tasks.interactive import run_rollouts

    task, games = items
    plan = plans(alf_root, games)
    pen, mug = "put some pen on shelf.", "clean some mug and put it in coffeemachine."

    # the expert, with ReAct thoughts and the model's usual leading space: both won
    scripts = {g: [line for i, a in enumerate(p)
                   for line in ([f"think: step {i}"] if i % 2 == 0 else []) + [f" {a}"]]
               for g, p in plan.items()}
    result = run_rollouts(task, games, ScriptEngine(scripts))
    assert [r.correct for r in result.items] == [True, True]
    assert result.metrics["success_by_group"] == {"clean": 1.0, "pick": 1.0}
    ep = result.items[1].episode
    assert ep is not None and ep["observations"][1] == "OK." and ep["success"]
    assert ep["actions"][-1] == plan[mug][-1]

    # the win on the 50th step counts; on the 51st it does not (the step limit is 50)
    on_time = {pen: ["think: wait"] * (50 - len(plan[pen])) + plan[pen],
               mug: ["think: wait"] * (51 - len(plan[mug])) + plan[mug]}
    engine = ScriptEngine(on_time)
    result = run_rollouts(task, games, engine)
    assert [r.correct for r in result.items] == [True, False]
    assert [r.episode["steps"] for r in result.items if r.episode] == [50, 50]
    assert len(engine.calls) == 50 and engine.calls[0]["n"] == 2  # batched: one call per step

    # actions are sent as written (stripped, not lower-cased or matched to admissible ones)
    shouted = {pen: [a.upper() for a in plan[pen]], mug: [f"> {a}" for a in plan[mug]]}
    task.rollout = task.rollout.model_copy(update={"max_steps": 2})  # two steps show it
    result = run_rollouts(task, games, ScriptEngine(shouted))
    eps = [r.episode for r in result.items if r.episode]
    assert eps[1]["actions"][0] == f"> {plan[mug][0]}"
    assert eps[1]["observations"][1] == "Nothing happens."
    assert not eps[1]["success"]


def test_missing_examples_is_one_clear_line(alf: Settings, tmp_path: Path) -> None:  # noqa: F811
    from a2rl.tasks.alfworld import react

    with pytest.raises(RuntimeError, match="a2rl alfworld download") as err:
        react.load_prompts(tmp_path)
    assert "\n" not in str(err.value)
    (tmp_path / react.PROMPTS_FILE).write_text(json.dumps({"react_put_0": "x"}))
    with pytest.raises(ValueError, match="react_put_1"):
        react.load_prompts(tmp_path)


class _Serve:
    """A real local HTTP server answering every GET with `body`."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alfworld_3prompts.json"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_download_checks_the_hash(tmp_path: Path) -> None:
    from a2rl.tasks.alfworld.download import download_react_prompts
    from a2rl.tasks.alfworld.react import PROMPTS_FILE, PROMPTS_URL

    assert PROMPTS_URL.startswith("https://raw.githubusercontent.com/ysymyth/ReAct/")
    body = (FIXTURE / PROMPTS_FILE).read_bytes()
    good = hashlib.sha256(body).hexdigest()
    server = _Serve(body)
    try:
        with pytest.raises(RuntimeError, match="sha256"):
            download_react_prompts(tmp_path, url=server.url, sha256="0" * 64)
        assert not (tmp_path / PROMPTS_FILE).exists()
        path = download_react_prompts(tmp_path, url=server.url, sha256=good)
        assert path.read_bytes() == body
    finally:
        server.close()
    # present with the right hash: no request at all (the server is gone)
    assert download_react_prompts(tmp_path, url=server.url, sha256=good) == path


def test_raw_text_skips_the_chat_template(a2rl_home: Path) -> None:
    """The engines render a `RawText` as is, a plain string through the chat template."""
    from a2rl.grading.engine import RawText, TransformersEngine
    from a2rl.tasks import get_task

    engine = TransformersEngine(get_task("arith").base_model_dir(Settings(home=a2rl_home)))
    assert engine.tokenizer.chat_template  # the check below would be vacuous without one
    text = "Here is the task.\nYou are in the middle of a room.\n>"
    assert engine.render(RawText(text)) == text
    assert engine.render(text) != text and text in engine.render(text)
    out = engine.generate([RawText(text)], max_new_tokens=4, stop=["\n"])
    assert len(out) == 1 and "\n" not in out[0]


def test_workspace_has_the_graders_react_loop(alf: Settings, tmp_path: Path) -> None:  # noqa: F811
    """Under `paper` the workspace gets the grader's own loop but not its examples (the
    harness does not expose them): a training game played with the loop inside the workspace
    (its own Python, only env/ on the path) and examples the agent brings is won."""
    import subprocess
    import sys

    from a2rl.tasks.alfworld import react

    task = paper_task()
    ws = tmp_path / "ws"
    prepare_workspace(task, ws, alf)
    assert (ws / "env" / "alfworld_react.py").read_text() == Path(react.__file__).read_text()
    assert not list((ws / "data").rglob(react.PROMPTS_FILE))
    assert not [p for p in (ws / "data").rglob("*.json") if "react_put_0" in p.read_text()]
    mine = tmp_path / "my_examples.json"
    mine.write_text(json.dumps({f"react_{v}_{k}": f"> look\nNothing {v} {k}.\n"
                                for v in react.TASK_PREFIXES.values() for k in (0, 1)}))
    script = (
        "import json, sys; sys.path.insert(0, 'env'); import alfworld_env as b, "
        "alfworld_react as r\n"
        "iid = [i for i in b.train_ids() if 'SprayBottle' in i][0]\n"
        "env, plan = b.make_expert_env(iid, raw=True), []\n"
        "step = env.reset()\n"
        "while not step.done:\n"
        "    plan.append(step.info['expert_action']); step = env.step(plan[-1])\n"
        "seen = []\n"
        "def generate(prompts):\n"
        "    seen.extend(prompts); return [' ' + plan.pop(0) + '\\nmore'] * len(prompts)\n"
        "[ep] = r.play([iid], [lambda: b.make_train_env(iid, raw=True)], [b.game_name(iid)],\n"
        f"              json.load(open({str(mine)!r})), generate)\n"
        "print('WON', ep.success, ep.steps, seen[0].startswith(r.HEADER + '> look'))\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=ws, capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "WON True" in p.stdout and p.stdout.strip().endswith("True"), p.stdout
    from a2rl.tasks.alfworld.task import AlfWorldTask

    a2rl = AlfWorldTask()
    a2rl_ws = tmp_path / "a2rl"
    prepare_workspace(a2rl, a2rl_ws, alf)
    assert not (a2rl_ws / "env" / "alfworld_react.py").exists()


def test_paper_profile_needs_a_tokenizer(items: Any) -> None:
    """The context is counted in tokens: an engine without a tokenizer is one clear error."""
    task, games = items

    class Bare:
        engine_name = "bare"

        def generate(self, prompts: Any, max_new_tokens: int, stop: Any = ()) -> list[str]:
            return ["look"] * len(prompts)

    with pytest.raises(RuntimeError, match="no tokenizer") as err:
        task.play_episodes(games[1:], Bare())
    assert "\n" not in str(err.value)


# --- against the harness's own code, from RD-Agent's wheel -----------------------------------
def _harness_eval(wheel: Path) -> dict[str, Any]:
    """eval.py's module-level functions and constants, run from the wheel's source (its
    imports are not executed: `os`, `typing` and a silent `_log` are given)."""
    import ast
    import os
    import typing

    from a2rl.tasks import rdagent

    source = rdagent.source_of(wheel, ALFWORLD_EVAL)
    names = {"_truncate_prompt_to_fit", "TASK_PREFIXES", "process_ob", "alfworld_run",
             "create_llm_fn"}
    tree = ast.parse(source)
    body = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name in names)
            or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names
                                                  for t in n.targets))]
    assert len(body) == len(names), "the harness's eval.py lacks a function this test runs"
    ns: dict[str, Any] = {"os": os, "List": list, "Callable": typing.Callable,
                          "_log": lambda msg: None}
    exec(compile(ast.Module(body=body, type_ignores=[]), "<harness eval.py>", "exec"), ns)
    # run_eval's own statements: the first observation, the game's name, the few-shot prompt
    run_eval = next(n for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef) and n.name == "run_eval")
    wanted = {"ob", "name", "prompt"}
    found = {}
    for node in ast.walk(run_eval):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name) and node.targets[0].id in wanted:
            found.setdefault(node.targets[0].id, ast.Expression(node.value))
    assert set(found) == wanted
    ns["run_eval_exprs"] = {k: compile(v, f"<run_eval {k}>", "eval") for k, v in found.items()}
    return ns


ALFWORLD_EVAL = "rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py"


class HarnessBatchEnv:
    """One of our raw games behind AlfredTWEnv's batch interface (batch size 1), as
    `alfworld_run` and `run_eval` call it."""

    def __init__(self, env: Any, gamefile: str) -> None:
        self.env, self.gamefile = env, gamefile

    def reset(self) -> tuple[list[str], dict[str, list[Any]]]:
        step = self.env.reset()
        return [step.observation], {"extra.gamefile": [self.gamefile]}

    def step(self, actions: list[str]) -> tuple[list[str], list[float], list[bool], Any]:
        step = self.env.step(actions[0])
        return [step.observation], [step.reward], [step.done], {"won": [bool(
            step.info.get("won"))]}


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from a2rl.tasks import rdagent

    from .harness_wheels import require_wheel

    return _harness_eval(require_wheel(rdagent.RDAGENT))


def test_context_cut_is_the_harness_truncation(harness: dict[str, Any],
                                               a2rl_home: Path) -> None:
    """`react.fit_context` gives what the harness's `_truncate_prompt_to_fit` gives, with a
    byte-level BPE (Qwen-shaped) and the tiny model's character tokenizer, on prompts that fit,
    fit exactly, and overflow by one token or by thousands."""
    from a2rl.tasks.alfworld import react
    from a2rl.tasks.tiny_model import build_tokenizer as tiny_tokenizer

    from .qwen_shaped import build_tokenizer

    text = (PROMPTS["react_clean_1"] + PROMPTS["react_put_0"]) * 3
    for tokenizer in (build_tokenizer(), tiny_tokenizer()):
        for size in (0, 1, 500, 2000, 3995, 3996, 3997, 4095, 4096, 5000, len(text)):
            prompt = text[:size] + "\n>"
            for limit, out in ((4096, 100), (300, 100), (101, 100)):
                ours = react.fit_context(prompt, tokenizer, limit, out)
                assert ours == harness["_truncate_prompt_to_fit"](prompt, tokenizer, limit,
                                                                  out), (size, limit)
        long = react.fit_context(text, tokenizer)
        assert len(tokenizer.encode(long, add_special_tokens=False)) <= 3995 + 1


def _game_items(settings: Settings, task: Any) -> list[dict[str, Any]]:
    return task.load_split("dev", settings) + task.load_split("test", settings)


def _scripts(plan: list[str]) -> list[str]:
    """A model's completions around the expert's plan: thoughts, a leading space, text after
    the newline, an end-of-turn token inside the action, the end of sequence mid-line, and 30
    idle thoughts first (a history long enough to be cut)."""
    idle = [f"think: step {i}: I should look around the room once more before I act, "
            "checking every receptacle, shelf, drawer and countertop in turn.\nmore text"
            for i in range(30)]
    moves = []
    for i, action in enumerate(plan):
        if i % 3 == 0:
            moves.append(f" {action}\n> next")
        elif i % 3 == 1:  # <|im_end|> is no end of sequence for a base model: skipped text
            words = action.split(" ", 1)
            moves.append(f" {words[0]}<|im_end|> {words[1]}\n" if len(words) > 1
                         else f" {action}<|im_end|>\n")
        else:
            moves.append(f" {action}<|endoftext|>ignored\n")
    return idle + moves


def test_alfworld_equals_the_harness(harness: dict[str, Any], alf: Settings, alf_root: Path,  # noqa: F811
                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2rl.tasks.alfworld import react
    from a2rl.tasks.alfworld.data import game_dir
    from a2rl.tasks.alfworld.game import AlfWorldEnv
    from a2rl.tasks.interactive import run_rollouts

    from .fake_vllm import FakeVLLM, ScriptedEngine
    from .qwen_shaped import write_model_dir

    model = write_model_dir(tmp_path / "base")  # ends a sequence as Qwen2.5-1.5B does
    task = paper_task()
    games = _game_items(alf, task)
    prompts = react.load_prompts(alf_root)
    n_cut = 0
    plans = {it["id"]: expert_plan(game_dir(alf_root, it["id"])) for it in games}
    # both games won on time; the second also cut at 33 steps (lost)
    for item, max_steps in [(games[0], 50), (games[1], 50), (games[1], 33)]:
        gdir = game_dir(alf_root, item["id"])
        script = _scripts(plans[item["id"]])
        # the harness: run_eval's statements, alfworld_run, create_llm_fn's vLLM path
        theirs = iter(script)
        fake = FakeVLLM(lambda prompt, it=theirs: next(it, " look"))
        fake.install(monkeypatch)
        llm_fn, cleanup = harness["create_llm_fn"]("vllm", str(model), max_model_len=4096)
        env = HarnessBatchEnv(AlfWorldEnv(gdir, raw=True), str(gdir / "game.tw-pddl"))
        ob, info = env.reset()
        exprs = harness["run_eval_exprs"]
        ob = eval(exprs["ob"], {"ob": ob})
        name = eval(exprs["name"], {"info": info})
        prefix, key = next((p, k) for p, k in harness["TASK_PREFIXES"].items()
                           if name.startswith(p))
        prompt = eval(exprs["prompt"], {"react_prompts": prompts, "prompt_key": key})
        reward, steps = harness["alfworld_run"](llm_fn, env, prompt, ob, max_steps)
        cleanup()
        assert fake.engines[0].kwargs["max_model_len"] == 4096
        # ours: the grader's entry point, our engine's decoding with the base's end of sequence
        ours_script = iter(script)
        engine = ScriptedEngine(model, lambda prompt, it=ours_script: next(it, " look"))
        task.rollout = task.rollout.model_copy(update={"max_steps": max_steps})
        (result,) = run_rollouts(task, [item], engine).items
        assert engine.prompts == [p for p, _ in fake.calls]
        for _, params in fake.calls:
            assert params == {"temperature": 0, "max_tokens": 100, "stop": ["\n"]}
        assert result.episode is not None
        assert (int(result.correct), result.episode["steps"]) == (int(reward), steps), item
        assert bool(reward) is (max_steps == 50)
        n_cut += sum(not p.startswith(react.HEADER) for p in engine.prompts)
    assert n_cut > 0  # the long histories were cut, identically
