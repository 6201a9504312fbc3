"""ALFWorld's `paper` profile against the reference harness's ReAct loop (microsoft/RD-Agent,
rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py: `alfworld_run`).

On the hand-written fixture games played by the real TextWorld engine, through the grader's own
entry point (`run_rollouts`): the exact prompt text for a fixed history (examples of the game's
task type, banner dropped, `>` turns, `think:` answered `OK.`, the whole history kept, raw
text), and the harness's success verdicts on scripted episodes (won when the game says so,
within 50 steps and not 49, actions sent as written). The ReAct examples are a fixture in the
authors' schema (tests/fixtures/alfworld/alfworld_3prompts.json); their download is checked
against a real local HTTP server.
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
    section), recording every prompt and the generation settings; past the script, `look`."""

    engine_name, engine_version = "scripted-react", "1"

    def __init__(self, scripts: dict[str, list[str]]) -> None:
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
def items(alf: Settings) -> Iterator[tuple[Any, list[dict[str, Any]]]]:  # noqa: F811
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
    assert engine.calls[0] == {"n": 1, "max_new_tokens": 100,
                               "stop": ["\n", "<|im_end|>", "<|endoftext|>", "</s>"],
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
    """Under `paper` the workspace gets the examples and the grader's own loop: a training game
    played with it inside the workspace (its own Python, only env/ on the path) is won."""
    import subprocess
    import sys

    from a2rl.tasks.alfworld import react

    task = paper_task()
    ws = tmp_path / "ws"
    task.prepare_workspace(ws, alf)
    assert (ws / "env" / "alfworld_react.py").read_text() == Path(react.__file__).read_text()
    assert json.loads((ws / "data" / "alfworld" / react.PROMPTS_FILE).read_text()) == PROMPTS
    script = (
        "import sys; sys.path.insert(0, 'env'); import alfworld_env as b, alfworld_react as r\n"
        "iid = [i for i in b.train_ids() if 'SprayBottle' in i][0]\n"
        "env, plan = b.make_expert_env(iid, raw=True), []\n"
        "step = env.reset()\n"
        "while not step.done:\n"
        "    plan.append(step.info['expert_action']); step = env.step(plan[-1])\n"
        "seen = []\n"
        "def generate(prompts):\n"
        "    seen.extend(prompts); return [' ' + plan.pop(0) + '\\nmore'] * len(prompts)\n"
        "[ep] = r.play([iid], [lambda: b.make_train_env(iid, raw=True)], [b.game_name(iid)],\n"
        "              r.load_prompts(b.DATA), generate)\n"
        "print('WON', ep.success, ep.steps, seen[0].startswith(r.HEADER))\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=ws, capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "WON True" in p.stdout and p.stdout.strip().endswith("True"), p.stdout
