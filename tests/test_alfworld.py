"""ALFWorld on games written by hand in the real folder layout (tests/fixtures/alfworld/:
json_2.1.1/{train, valid_seen, valid_unseen}/<task>/<trial>/ with initial_state.pddl and
traj_data.json; game.tw-pddl is written here as `alfworld-generate` does). The real
`AlfredTWEnv` lists them and TextWorld plays them: splits, rollouts through the grader with an
engine that follows the expert and one that talks nonsense, the workspace's environment API,
expert demonstrations, and a broken game that loses only its own episode.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from a2rl.settings import Settings
from a2rl.tasks import prepare_workspace

from .conftest import require
from .helpers import with_task_options

FIXTURE = Path(__file__).parent / "fixtures" / "alfworld"
TASK_MARK = "Your task is to: "


def write_game_files(root: Path) -> None:
    """`game.tw-pddl` next to each `traj_data.json`: ALFWorld's domain, its grammar with the
    templated goal, the problem, and `"solvable": true` (what `alfworld-generate` writes)."""
    from alfworld.agents.utils.misc import add_task_to_grammar
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    domain, grammar = Path(ALFRED_PDDL_PATH).read_text(), Path(ALFRED_TWL2_PATH).read_text()
    for traj in sorted(root.rglob("traj_data.json")):
        random.seed(0)  # the goal template is a random.choice
        game = {"pddl_domain": domain,
                "grammar": add_task_to_grammar(grammar, json.loads(traj.read_text())),
                "pddl_problem": (traj.parent / "initial_state.pddl").read_text(),
                "solvable": True}
        (traj.parent / "game.tw-pddl").write_text(json.dumps(game))


@pytest.fixture(scope="session")
def alf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(importlib.util.find_spec("alfworld") is not None,
            "alfworld is not installed: A2RL_EXTRAS=dev,docker,fleet,alfworld scripts/setup.sh")
    root = tmp_path_factory.mktemp("alfworld")
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    os.environ.setdefault("ALFWORLD_DATA", str(root))
    write_game_files(root)
    return root


@pytest.fixture
def alf(settings: Settings, alf_root: Path) -> Settings:
    return with_task_options(settings.updated({"base_model": "tiny-llama"}),
                             "alfworld", data_dir=str(alf_root))


def expert_plan(game_dir: Path) -> list[str]:
    """The handcoded expert's actions on one game, played to the win."""
    from a2rl.tasks.alfworld.game import AlfWorldEnv

    env = AlfWorldEnv(game_dir, expert=True)
    step, actions = env.reset(), []
    while not step.done and len(actions) < 50:
        actions.append(step.info["expert_action"])
        step = env.step(actions[-1])
    assert step.info.get("success"), (game_dir, actions)
    return actions


class ExpertEngine:
    """Follows precomputed expert plans: each prompt's episode is found by its task sentence
    (one per fixture game), and every call advances each episode by one action."""

    engine_name, engine_version = "scripted-expert", "1"

    def __init__(self, plans: dict[str, list[str]]) -> None:
        self.plans = {task: list(actions) for task, actions in plans.items()}
        self.calls = 0

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        self.calls += 1
        out = []
        for prompt in prompts:
            now = prompt[-1]["content"].split("Now: ", 1)[1]
            task = now.split(TASK_MARK, 1)[1].split(" | ", 1)[0]
            out.append(self.plans[task].pop(0) + "\nextra text after the first line")
        return out


class NonsenseEngine:
    engine_name, engine_version = "scripted-nonsense", "1"

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        return ["dance with the toilet"] * len(prompts)


def test_splits_are_the_real_alfredtwenv_listing(alf: Settings, alf_root: Path) -> None:
    from a2rl.tasks.alfworld.data import data_dir, list_games

    assert data_dir(alf) == alf_root
    train, dev, test = (list_games(alf_root, s) for s in ("train", "dev", "test"))
    assert [g.group for g in train] == ["look", "pick"]
    assert all(g.id.startswith("train/") for g in train)
    assert [(g.id.split("/")[0], g.group) for g in dev] == [("valid_seen", "pick")]
    assert [(g.id.split("/")[0], g.group) for g in test] == [("valid_unseen", "clean")]


def test_missing_download_is_one_clear_line(settings: Settings, tmp_path: Path) -> None:
    from a2rl.tasks.alfworld.task import AlfWorldTask

    empty = with_task_options(settings, "alfworld", data_dir=str(tmp_path / "none"))
    with pytest.raises(RuntimeError, match="a2rl alfworld download") as err:
        AlfWorldTask().load_split("test", empty)
    assert "\n" not in str(err.value)


def test_game_observations_admissible_and_win(alf_root: Path) -> None:
    from a2rl.tasks.alfworld.data import game_dir, list_games
    from a2rl.tasks.alfworld.game import AlfWorldEnv

    gdir = game_dir(alf_root, list_games(alf_root, "train")[1])  # the spray bottle
    env = AlfWorldEnv(gdir)
    first = env.reset()
    assert first.observation.startswith("You are in the middle of a room.")
    assert "\n" not in first.observation and "Welcome" not in first.observation
    assert first.observation.endswith("Your task is to: put some spraybottle on toilet.")
    assert "go to cabinet 1" in (first.admissible or [])
    nothing = env.step("fly to the moon")
    assert nothing.observation.startswith("Nothing happens.") and not nothing.done
    assert nothing.observation.endswith(f"{TASK_MARK}put some spraybottle on toilet.")
    for action in expert_plan(gdir):
        step = env.step(action)
    assert step.done and step.reward == 1.0 and step.info["success"] is True


def test_rollouts_expert_succeeds_and_nonsense_fails(alf: Settings, alf_root: Path) -> None:
    from a2rl.tasks.alfworld.data import game_dir
    from a2rl.tasks.alfworld.task import MAX_STEPS, AlfWorldTask
    from a2rl.tasks.interactive import run_rollouts

    task = AlfWorldTask()
    items = task.load_split("dev", alf) + task.load_split("test", alf)
    json.dumps(items)  # plain JSON: stored with the evaluation
    plans = {}
    for item in items:
        env_first = task.make_env(item).reset().observation
        plans[env_first.split(TASK_MARK, 1)[1]] = expert_plan(game_dir(alf_root, item["id"]))
    expert = ExpertEngine(plans)
    good = run_rollouts(task, items, expert)
    assert good.score == 1.0 and good.n_correct == 2
    assert good.metrics["success_by_group"] == {"clean": 1.0, "pick": 1.0}
    assert expert.calls == max(len(p) for p in plans.values())  # batched: one call per step
    ep = good.items[0].episode
    assert ep is not None and ep["success"] and ep["total_reward"] == 1.0
    assert ep["actions"][0] == "look"
    bad = run_rollouts(task, items, NonsenseEngine())
    assert bad.score == 0.0 and bad.metrics["success_by_group"] == {"clean": 0.0, "pick": 0.0}
    assert all(r.episode and r.episode["steps"] == MAX_STEPS for r in bad.items)
    assert bad.metrics["rollout"]["max_steps"] == 50 and bad.metrics["n_errors"] == 0


def test_a_broken_game_loses_only_its_episode(alf: Settings, alf_root: Path,
                                              tmp_path: Path) -> None:
    from a2rl.tasks.alfworld.data import game_dir, list_games
    from a2rl.tasks.alfworld.task import AlfWorldTask
    from a2rl.tasks.interactive import run_rollouts

    root = tmp_path / "alf"
    shutil.copytree(alf_root, root)
    broken = list_games(root, "dev")[0]
    (game_dir(root, broken) / "game.tw-pddl").write_text('{"pddl_domain": "(define", ')
    task = AlfWorldTask()
    items = task.load_split("dev", with_task_options(alf, "alfworld", data_dir=str(root)))
    items += task.load_split("test", with_task_options(alf, "alfworld", data_dir=str(root)))
    good = items[1]
    plan = expert_plan(game_dir(root, good["id"]))
    task_text = task.make_env(good).reset().observation.split(TASK_MARK, 1)[1]
    result = run_rollouts(task, items, ExpertEngine({task_text: plan}))
    by_id = {r.id: r for r in result.items}
    assert by_id[broken.id].episode and by_id[broken.id].episode["error"]
    assert not by_id[broken.id].correct and by_id[good["id"]].correct
    assert result.metrics["n_errors"] == 1


def test_expert_demonstrations(alf: Settings) -> None:
    from a2rl.tasks.alfworld.task import AlfWorldTask, demo_games

    rows = AlfWorldTask().train_items(alf)
    assert {r["instance_id"] for r in rows} == {
        "train/look_at_obj_in_light-Book-None-DeskLamp-902/trial_T20990101_000002_000002",
        "train/pick_and_place_simple-SprayBottle-None-Toilet-901/trial_T20990101_000001_000001"}
    first = rows[0]
    assert set(first) == {"id", "instance_id", "step", "prompt", "answer", "messages"}
    assert first["answer"] == "look" and first["messages"][1]["content"] == "look"
    assert "Actions: go to bed 1," in first["prompt"]
    assert AlfWorldTask().train_items(alf) == rows  # the cache gives the same rows
    assert demo_games([str(i) for i in range(10)], 3) == ["0", "3", "6"]


def test_workspace_env_api_trains_only(alf: Settings, alf_root: Path, tmp_path: Path) -> None:
    from a2rl.tasks.alfworld import game
    from a2rl.tasks.alfworld.data import list_games
    from a2rl.tasks.alfworld.task import AlfWorldTask

    task = AlfWorldTask()
    ws = tmp_path / "ws"
    prepare_workspace(task, ws, alf)
    assert (ws / "env" / "alfworld_game.py").read_text() == Path(game.__file__).read_text()
    manifest = json.loads((ws / "env" / "manifest.json").read_text())
    assert manifest["backend"] == "alfworld_env" and manifest["max_steps"] == 50
    names = [p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file()]
    assert not any("valid_seen" in n or "valid_unseen" in n for n in names)
    text = "".join(p.read_text() for p in (ws / "data").rglob("*") if p.is_file())
    assert "-903" not in text and "-904" not in text and "Mug" not in text
    script = (
        "import sys, json; sys.path.insert(0, 'env'); import a2rl_env, alfworld_env\n"
        "ids = a2rl_env.train_ids(); print('N', len(ids))\n"
        "rows = [json.loads(l) for l in open('data/train.jsonl')]\n"
        "iid = rows[0]['instance_id']\n"
        "plan = [r['answer'] for r in rows if r['instance_id'] == iid]\n"
        "pool = a2rl_env.make_pool([iid] * 2)\n"
        "pool.reset()\n"
        "assert pool.prompts([0])[0] == rows[0]['prompt']\n"
        "for a in plan: pool.step({i: a if i == 0 else 'look' for i in pool.active()})\n"
        "print('R', pool.episodes[0].total_reward, pool.episodes[0].success,"
        " pool.episodes[1].success)\n"
        "print('T', alfworld_env.task_type(iid))\n"
        f"dev = {list_games(alf_root, 'dev')[0].id!r}\n"
        "for bad in (lambda: a2rl_env.make(dev), lambda: a2rl_env.train_ids('test'),\n"
        "            lambda: a2rl_env.make_pool([dev])):\n"
        "    try:\n"
        "        bad()\n"
        "    except a2rl_env.SplitError:\n"
        "        print('REFUSED')\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=ws, capture_output=True, text=True,
                       timeout=120, env={"PATH": os.environ.get("PATH", "")})
    assert p.returncode == 0, p.stderr
    assert "N 2" in p.stdout and "R 1.0 True False" in p.stdout, p.stdout
    assert "T look_at_obj_in_light" in p.stdout and p.stdout.count("REFUSED") == 3


def test_registered_with_its_spec() -> None:
    from a2rl.tasks import get_task

    task = get_task("alfworld")
    assert task.spec.level == 3 and task.spec.splits["test"].n_items == 134
    assert "env" in task.spec.readonly_paths
    assert "a2rl alfworld download" in task.spec.description


def test_the_task_declares_its_download_command(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """`a2rl alfworld download` is the task's own command (tasks.registry.TASK_COMMANDS),
    and fails as every command does: one `a2rl: ...` line, no traceback."""
    from typer.testing import CliRunner

    from a2rl.cli.program import app
    from a2rl.tasks.alfworld import download as dl

    def offline(settings: object, force: bool = False) -> Path:
        raise RuntimeError("could not reach the games' host (no network?)")

    monkeypatch.setattr(dl, "download", offline)
    monkeypatch.setenv("A2RL_HOME", str(tmp_path))
    runner = CliRunner()
    listed = runner.invoke(app, ["--help"])
    assert listed.exit_code == 0 and "alfworld" in listed.output
    failed = runner.invoke(app, ["alfworld", "download"])
    assert failed.exit_code == 1, failed.output
    assert failed.output.strip().splitlines()[-1] == \
        "a2rl: could not reach the games' host (no network?)"
    assert "Traceback" not in failed.output
