"""The rollout engine (`play` and `run_rollouts` in tasks/interactive.py) with a scripted
engine: batching by step, episode records stored as items, crash isolation, and the dispatch
from `evaluate`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from a2rl.grading.evaluate import evaluate
from a2rl.settings import Settings
from a2rl.tasks import get_task
from a2rl.tasks.envapi.a2rl_env import (
    EnvPool,
    Episode,
    Step,
    parse_action,
    play_together,
    render_prompt,
)
from a2rl.tasks.interactive import play
from a2rl.tasks.textquest import game
from a2rl.tasks.textquest.task import TextQuestTask

LAMP = re.compile(r"Now: Room \d/\d: a (\w+) lamp\.")


class ScriptedEngine:
    """A deterministic policy: follows the game's rule except for `wrong` colours (answers
    'up'), and records every generate call."""

    engine_name, engine_version = "scripted", "1"

    def __init__(self, wrong: Sequence[str] = ()) -> None:
        self.wrong = set(wrong)
        self.calls: list[int] = []
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        self.calls.append(len(prompts))
        out = []
        for p in prompts:
            text = p[-1]["content"]
            self.prompts.append(text)
            color = LAMP.search(text).group(1)  # type: ignore[union-attr]
            out.append("  UP\nx" if color in self.wrong else f" {game.RULE[color].upper()} ")
        return out


class CrashingQuest(TextQuestTask):
    """Instance dev-0001 cannot be made; dev-0002 raises at its second step."""

    def make_env(self, item: dict[str, Any]) -> Any:
        if item["id"] == "dev-0001":
            raise OSError("game file is corrupt")
        env = super().make_env(item)
        if item["id"] == "dev-0002":
            real_step = env.step
            calls = {"n": 0}

            def step(action: str) -> Step:
                calls["n"] += 1
                if calls["n"] == 2:
                    raise RuntimeError("the engine crashed")
                return real_step(action)

            env.step = step  # type: ignore[method-assign]
        return env


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("home"))


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    return tmp_path / "ckpt"


def test_prompt_and_action_format() -> None:
    text = render_prompt("Go.", [("a", "x"), ("b", "y")], "c", ["x", "z"], window=1)
    assert text == "Go. | b > y | Now: c | Actions: x, z"
    assert render_prompt("", [("a", "x")], "b", None, window=0) == "Now: b"
    assert parse_action("  North  Gate \nmore") == "north gate"
    assert parse_action("") == ""


def test_perfect_policy_batches_by_step(settings: Settings) -> None:
    task = get_task("textquest")
    items = task.load_split("dev", settings)
    engine = ScriptedEngine()
    pool = play(task, items, engine)  # type: ignore[arg-type]
    # every episode is 3 rooms: one generate call per step, over all episodes at once
    assert engine.calls == [len(items)] * game.N_ROOMS
    assert all(ep.success and ep.steps == game.N_ROOMS and ep.error is None
               for ep in pool.episodes)
    ep = pool.episodes[0]
    assert ep.actions == game.expert_actions(items[0]["rooms"])
    assert ep.observations[-1] == "You escaped!" and ep.total_reward == 1.0
    # the second prompt shows the first room and the action taken there
    second = [p for p in engine.prompts if "Room 2/3" in p.split("Now:")[1]][0]
    assert second.startswith("Escape the maze. | Room 1/3: a ") and " > " in second


def test_evaluate_dispatches_to_rollouts(settings: Settings, checkpoint: Path) -> None:
    task = get_task("textquest")
    items = task.load_split("dev", settings)
    result = evaluate(task, checkpoint, "dev", settings, engine=ScriptedEngine(wrong=["pink"]))
    expected = sum("pink" not in it["rooms"] for it in items)
    assert result.n_items == len(items) == 200
    assert result.score == pytest.approx(expected / len(items))
    assert result.ci_low < result.score < result.ci_high  # Wilson 95%
    assert result.metrics["n_errors"] == 0 and result.metrics["rollout"]["max_steps"] == 4
    assert set(result.metrics["success_by_group"]) == {"demo", "new"}
    assert result.metrics["success_by_group"]["demo"] == 1.0
    by_id = {it.id: it for it in result.items}
    for item in items:
        rec = by_id[item["id"]]
        assert rec.correct == ("pink" not in item["rooms"]) == rec.episode["success"]
        assert rec.prompt.startswith("Room 1/3") and rec.expected == "success"
        if "pink" in item["rooms"]:  # the trap ends the episode at the pink room
            assert rec.episode["actions"][-1] == "up"
            assert rec.episode["observations"][-1] == "Unknown action. A trap!"
            passed = item["rooms"].index("pink")  # a share of reward per room passed
            assert rec.episode["total_reward"] == pytest.approx(passed / game.N_ROOMS)
            assert len(rec.episode["actions"]) == passed + 1
    assert "> " in by_id[items[0]["id"]].output  # the transcript


def test_a_crashing_instance_loses_only_its_episode(settings: Settings,
                                                    checkpoint: Path) -> None:
    task = CrashingQuest()
    result = evaluate(task, checkpoint, "dev", settings, engine=ScriptedEngine())
    by_id = {it.id: it for it in result.items}
    assert result.metrics["n_errors"] == 2 and result.n_items == 200
    assert result.score == pytest.approx(198 / 200)
    broken, mid = by_id["dev-0001"].episode, by_id["dev-0002"].episode
    assert not broken["success"] and "game file is corrupt" in broken["error"]
    assert broken["actions"] == [] and broken["observations"] == []
    assert not mid["success"] and "the engine crashed" in mid["error"]
    assert len(mid["actions"]) == 2 and mid["rewards"] == [pytest.approx(1 / 3), 0.0]
    assert all(by_id[f"dev-{i:04d}"].correct for i in range(200) if i not in (1, 2))


def test_step_limit_ends_an_episode() -> None:
    class Loop:
        def reset(self) -> Step:
            return Step("a corridor", admissible=["wait", "go"])

        def step(self, action: str) -> Step:
            return Step("a corridor", admissible=["wait", "go"])

    pool = EnvPool(["x"], [Loop], instruction="Go.", window=2, max_steps=3)
    pool.reset()
    assert pool.prompts() == ["Go. | Now: a corridor | Actions: wait, go"]
    while active := pool.active():
        pool.step({i: "wait" for i in active})
    ep = pool.episodes[0]
    assert ep.steps == 3 and not ep.done and not ep.success and ep.error is None
    assert pool.prompts([0])[0].count("a corridor > wait") == 2  # window of 2
    with pytest.raises(ValueError):
        EnvPool(["x", "y"], [Loop])


class CountingEnv:
    """Done after `steps` actions; raises on the action 'boom'; remembers being closed."""

    def __init__(self, steps: int) -> None:
        self.steps, self.taken, self.closed = steps, 0, False

    def reset(self) -> Step:
        return Step("start")

    def step(self, action: str) -> Step:
        if action == "boom":
            raise RuntimeError("the game broke")
        self.taken += 1
        return Step(f"after {self.taken}", reward=1.0, done=self.taken >= self.steps)

    def close(self) -> None:
        self.closed = True


class Counting:
    """A harness-style episode over a CountingEnv: its prompt is its id and step count."""

    def __init__(self, eid: str, env: CountingEnv) -> None:
        self.env, self.record = env, Episode(id=eid)
        env.reset()

    def prompt(self) -> str:
        return f"{self.record.id}:{self.env.taken}"

    def act(self, completion: str) -> None:
        step = self.env.step(completion)
        self.record.actions.append(completion)
        self.record.done = self.record.success = step.done


def test_harness_loops_step_together_and_isolate_failures() -> None:
    """`play_together` (the `paper` profile's ReAct and WebShop loops): one generate call per
    step over the running episodes only; a start or a step that raises fails that episode
    alone; the step limit holds; every env is closed."""
    envs = {"a": CountingEnv(2), "b": CountingEnv(9), "c": CountingEnv(1)}
    calls: list[list[str]] = []

    def generate(prompts: list[Any]) -> list[str]:
        calls.append(list(prompts))
        return ["boom" if p.startswith("c") else "go" for p in prompts]

    def start(eid: str) -> Counting:
        if eid == "broken":
            raise ValueError("no such game")
        return Counting(eid, envs[eid])

    records = play_together(["a", "broken", "b", "c"],
                            [lambda e=e: start(e) for e in ("a", "broken", "b", "c")],
                            generate, max_steps=4)
    by_id = {r.id: r for r in records}
    assert [r.id for r in records] == ["a", "broken", "b", "c"]
    assert by_id["broken"].done and "ValueError: no such game" in by_id["broken"].error
    assert by_id["c"].done and "RuntimeError: the game broke" in by_id["c"].error
    assert by_id["a"].success and by_id["a"].actions == ["go", "go"]
    assert not by_id["b"].done and len(by_id["b"].actions) == 4  # stopped by the step limit
    assert calls == [["a:0", "b:0", "c:0"], ["a:1", "b:1"], ["b:2"], ["b:3"]]
    assert all(env.closed for env in envs.values())
