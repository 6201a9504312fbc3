"""The level-3 toy task `textquest`: its workspace (env/ API, demonstrations), the API's
refusal of hidden instances, and an `a2rl run` with the reference agent learning online."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from a2rl.settings import Settings
from a2rl.store import Evaluation, Run, Store
from a2rl.tasks import get_task, prepare_workspace, secret_seed
from a2rl.tasks.textquest import game

from .baseline_seed import base_model_dir, seed_base_model  # noqa: F401  (a fixture)
from .conftest import require_bwrap
from .helpers import workspace_text

A2RL = str(Path(sys.executable).parent / "a2rl")


@pytest.fixture(scope="module")
def settings(a2rl_home: Path) -> Settings:
    return Settings(home=a2rl_home)  # the session's home: the tiny model is built once


@pytest.fixture(scope="module")
def workspace(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    prepare_workspace(get_task("textquest"), ws, settings)
    return ws


def test_spec_and_demonstrations(settings: Settings, workspace: Path) -> None:
    task = get_task("textquest")
    assert task.spec.level == 3 and "env" in task.spec.readonly_paths
    rows = [json.loads(line) for line in (workspace / "data" / "train.jsonl").open()]
    assert len(rows) > 300 and {"prompt", "answer", "messages", "instance_id"} <= set(rows[0])
    seen = " ".join(r["prompt"] for r in rows)
    assert all(c in seen for c in game.DEMO_COLORS)
    assert not any(f"a {c} lamp" in seen for c in set(game.RULE) - set(game.DEMO_COLORS))
    assert max(len(r["prompt"]) for r in rows) < 100  # the char-level model's context is 128
    dev = task.load_split("dev", settings)
    assert len(dev) == 200 and task.load_split("dev", settings) == dev  # stable
    assert sum(task.episode_group(it) == "new" for it in dev) > 100  # RL must find most games


def test_env_folder_is_readonly_and_holds_no_secret(settings: Settings,
                                                    workspace: Path) -> None:
    env = workspace / "env"
    assert sorted(p.name for p in env.iterdir()) == [
        "README.md", "a2rl_env.py", "manifest.json", "textquest_game.py"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o444 for p in env.iterdir())
    manifest = json.loads((env / "manifest.json").read_text())
    assert manifest["backend"] == "textquest_game" and manifest["max_steps"] == 4
    seed = str(secret_seed(settings, "textquest"))
    assert not any(seed in p.read_text() for p in workspace.rglob("*")
                   if p.is_file() and p.suffix in (".py", ".json", ".jsonl", ".md"))
    prepare_workspace(get_task("textquest"), workspace, settings)  # idempotent over 0444 files


PROBE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, "env")
    import a2rl_env, textquest_game
    out = {"a2rl_importable": True}
    try:
        import a2rl  # noqa: F401
    except ImportError:
        out["a2rl_importable"] = False
    ids = a2rl_env.train_ids()
    out["n_train"] = len(ids)
    pool = a2rl_env.make_pool([ids[0]] * 3 + [ids[1]])
    pool.reset()
    rooms = {i: textquest_game.train_rooms(i) for i in ids[:2]}
    while pool.active():
        idx = pool.active()
        prompts = pool.prompts(idx)
        acts = {}
        for i in idx:
            ep = pool.episodes[i]
            right = textquest_game.RULE[rooms[ep.id][ep.steps]]
            acts[i] = textquest_game.DIRECTIONS[right].upper() if i != 2 else "jump"
        pool.step(acts)
    out["success"] = [ep.success for ep in pool.episodes]
    out["prompt"] = prompts[0]
    refused = []
    for call in (lambda: a2rl_env.train_ids("dev"), lambda: a2rl_env.make("dev-0000"),
                 lambda: a2rl_env.make_pool([ids[0], "test-0001"]),
                 lambda: a2rl_env.make("train-99999")):
        try:
            call()
        except a2rl_env.SplitError as exc:
            refused.append(str(exc))
    out["refused"] = refused
    print(json.dumps(out))
""")


def test_env_api_inside_the_workspace(workspace: Path) -> None:
    """Run from the workspace root with an isolated interpreter and no site-packages: the API
    is stdlib-only, plays training games, and refuses every hidden instance."""
    p = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE], cwd=workspace,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["a2rl_importable"] is False  # nothing but the stdlib and env/
    assert out["n_train"] == game.N_TRAIN
    assert out["success"] == [True, True, False, True]
    assert out["prompt"].startswith("Escape the maze. | Room ")
    assert len(out["refused"]) == 4
    assert all("only training instances" in msg for msg in out["refused"])


#: The reference agent's SFT (100 steps); GRPO 30 updates of 8 games x 8 episodes at lr 1e-3
#: instead of its 50 at 3e-4 (at 3e-4 the reward starts rising after about 30 updates). Measured
#: with the scripts alone (SFT then GRPO, seeds 0-2, one thread each): mean reward of the first
#: 10 updates -> the last 10: 0.37 -> 0.63, 0.34 -> 0.49, 0.36 -> 0.59; 60% of the GRPO time.
GRPO_ITERS = 30
QUICK = ["--agent-option", f"grpo_args=--iters {GRPO_ITERS} --lr 1e-3"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reference_agent_learns_online(tmp_path: Path,
                                       base_model_dir: Path) -> None:  # noqa: F811
    require_bwrap()
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(seed_base_model(tmp_path, base_model_dir)))
    p = subprocess.run([A2RL, "run", "--task", "textquest", "--agent", "reference",
                        "--budget", "15m", *QUICK, "--json"], env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    assert summary["agent_status"] == "finished" and summary["submissions"] == 2
    from sqlmodel import select

    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        run = s.get(Run, summary["run_id"])
        evals = s.exec(select(Evaluation).where(Evaluation.run_id == run.id)).all()
    assert run.status == "finished" and {e.split for e in evals} == {"dev", "test"}
    for ev in evals:
        assert ev.status == "done" and ev.n_items == len(ev.items) and ev.ci_low <= ev.score
        episode = ev.items[0]["episode"]
        assert {"actions", "observations", "rewards", "success", "error"} <= set(episode)
        assert ev.metrics["rollout"]["max_steps"] == 4
    # the online GRPO of the reference agent: its mean reward per iteration rises
    log = workspace_text(run.workspace, "logs/grpo_env.jsonl")
    rewards = [json.loads(line)["mean_reward"] for line in log.splitlines()]
    assert len(rewards) == GRPO_ITERS
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.1, rewards
