"""Stage attribution and `a2rl replay` through real runs of the arith toy (tiny model).

One run, driven through a real MCP client: a data job writes a file the first "training" job
reads; that job makes output/a from the base model, a second makes output/b from output/a (each
adds noise seeded by $A2RL_SEED to the weights' tensors: real checkpoints the grader scores, in
a second, no training), and only output/b is submitted. At its finish the never-submitted
output/a is kept and scored on dev; the attribution names both stages. Then `a2rl replay
--repeats 2` re-runs the recipe (the data job and both stages, each with the code it ran with)
in two runs of kind replay, each with a seed of its own, and sets the agent's score beside the
replicas'. The demo's own attribution (SFT, then GRPO) is checked on the demo run
(tests/test_demo.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from sqlmodel import select

from a2rl.analysis.attribution import attribution_section
from a2rl.analysis.replay_plan import CannotReplay, plan_replay, seed_note
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Evaluation, Run, Store

from .conftest import require_bwrap
from .helpers import text_of

pytestmark = [pytest.mark.timeout(600)]
A2RL = str(Path(sys.executable).parent / "a2rl")

NOISE = """\
import argparse, os, shutil, torch
from safetensors.torch import load_file, save_file
p = argparse.ArgumentParser()
p.add_argument("--init", required=True)
p.add_argument("--out", required=True)
a = p.parse_args()
assert open("code/data.txt").read().strip() == "made by the data job"
torch.manual_seed(int(os.environ["A2RL_SEED"]))
os.makedirs(a.out, exist_ok=True)
for name in os.listdir(a.init):  # config and tokenizer as they are; the weights with noise
    if name != "model.safetensors" and os.path.isfile(os.path.join(a.init, name)):
        shutil.copyfile(os.path.join(a.init, name), os.path.join(a.out, name))
weights = load_file(os.path.join(a.init, "model.safetensors"))
save_file({k: w + 0.02 * torch.randn_like(w) for k, w in weights.items()},
          os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
"""


async def _command(c: Client, command: str) -> str:
    """Run `command` to its end (a loaded machine may need more than one wait)."""
    r = await c.call_tool("run_command", {"command": command, "wait_s": 60})
    assert not r.is_error, text_of(r)
    job, output = r.structured_content, r.structured_content["output"]
    while job.get("status") == "running" or job.get("job", {}).get("state") == "running":
        st = await c.call_tool("job_status", {"job_id": r.structured_content["job_id"],
                                              "wait_s": 60})
        job, output = st.structured_content, output + st.structured_content["output"]
    code = job["exit_code"] if "exit_code" in job else job["job"]["exit_code"]
    assert code == 0, output
    return str(r.structured_content["job_id"])


@pytest.fixture(scope="module")
def made(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The finished run of the module and its store."""
    import anyio

    require_bwrap()
    db = tmp_path_factory.mktemp("stages") / "a2rl.db"
    settings = Settings(home=a2rl_home, db_url=f"sqlite:///{db}")
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="arith", budget="20m", start_clock=True).run

    async def drive() -> dict[str, str]:
        jobs: dict[str, str] = {}
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as c:
            await c.call_tool("edit_file", {"path": "code/noise.py", "new_text": NOISE})
            jobs["data"] = await _command(c, "echo 'made by the data job' > code/data.txt")
            jobs["a"] = await _command(c, "python code/noise.py --init base_model "
                                          "--out output/a")
            jobs["b"] = await _command(c, "python code/noise.py --init output/a --out output/b")
            r = await c.call_tool("submit_checkpoint", {"path": "output/b"})
            assert not r.is_error, text_of(r)
            sub = r.structured_content["submission_id"]
            while True:
                score = await c.call_tool("get_score", {"submission_id": sub, "wait_s": 60})
                if score.structured_content["status"] not in ("queued", "grading"):
                    break
        return jobs

    try:
        jobs = anyio.run(drive)
    finally:
        finish_run(settings, store, run.id, reason="agent finished")
    return {"settings": settings, "store": store, "run_id": run.id, "jobs": jobs, "db": db}


def test_the_stage_never_submitted_is_scored_at_the_finish(made: dict[str, Any]) -> None:
    store: Store = made["store"]
    jobs = made["jobs"]
    with store.session() as s:
        stage = s.exec(select(Evaluation).where(Evaluation.run_id == made["run_id"],
                                                Evaluation.kind == "stage")).all()
    assert len(stage) == 1 and stage[0].status == "done", [e.error for e in stage]
    assert stage[0].metrics["stage_job"] == jobs["a"] and stage[0].split == "dev"
    kept = made["settings"].home_dir / "checkpoints" / made["run_id"] / f"stage-{jobs['a']}"
    assert (kept / "model.safetensors").is_file()
    a = attribution_section(store, made["run_id"])
    assert a is not None and a.split == "dev"
    first, second = a.stages
    assert (first.checkpoint, first.job_id, first.seen_by_agent) == ("output/a", jobs["a"],
                                                                     False)
    assert (second.checkpoint, second.job_id, second.seen_by_agent) == ("output/b", jobs["b"],
                                                                        True)
    assert first.score is not None and second.score is not None
    assert first.gain == pytest.approx(first.score - a.baseline)  # type: ignore[operator]
    assert second.gain == pytest.approx(second.score - first.score)
    assert first.interval is not None and second.interval is not None
    shown = subprocess.run([A2RL, "show", made["run_id"]], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "A2RL_HOME": str(
                               made["settings"].home_dir), "A2RL_DB_URL": f"sqlite:///{made['db']}"})
    assert "never seen by the agent" in shown.stdout, shown.stdout + shown.stderr


def test_the_replay_plan_is_the_recipe_behind_the_final_checkpoint(made: dict[str, Any]
                                                                   ) -> None:
    plan = plan_replay(made["store"], made["run_id"])
    jobs = made["jobs"]
    # the data job is in: the first stage read what it wrote
    assert [s.job_id for s in plan.stages] == [jobs["data"], jobs["a"], jobs["b"]]
    assert plan.submit_path == "output/b"
    assert plan.stages[1].files["code/noise.py"] == NOISE.encode()
    assert "reads $A2RL_SEED" in seed_note(plan.stages)
    with pytest.raises(CannotReplay, match="does not exist"):
        plan_replay(made["store"], "r-typo")


def test_replay_grades_replicas_beside_the_agents_score(made: dict[str, Any]) -> None:
    env = {**os.environ, "A2RL_HOME": str(made["settings"].home_dir),
           "A2RL_DB_URL": f"sqlite:///{made['db']}"}
    p = subprocess.run([A2RL, "replay", made["run_id"], "--repeats", "2", "--seed", "7",
                        "--json"], capture_output=True, text=True, timeout=560, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert [r["seed"] for r in doc["replicas"]] == [7, 8]
    assert all(r["final"] is not None for r in doc["replicas"]), doc
    assert doc["mean"] is not None and doc["interval"] is not None and doc["std"] is not None
    assert doc["agent_final"] is not None and isinstance(doc["agent_within"], bool)
    store: Store = made["store"]
    with store.session() as s:
        replicas = [s.get(Run, r["run_id"]) for r in doc["replicas"]]
    for run, r in zip(replicas, doc["replicas"], strict=True):
        assert run is not None and run.kind == "replay" and run.replay_of == made["run_id"]
        assert run.seed == r["seed"] and run.final_score == r["final"]
        assert run.task_id == "arith" and run.budget_s == 1200
    # replays are never an agent's result
    table = subprocess.run([A2RL, "compare", "--json"], capture_output=True, text=True,
                           timeout=120, env=env)
    rows = {row["run_id"]: row for row in json.loads(table.stdout)["rows"]}
    assert all(not rows[r["run_id"]]["counted"] for r in doc["replicas"])
    assert rows[made["run_id"]]["counted"]
    # the gain by route: the attribution's stages summed by route, in the run's group
    gains = rows[made["run_id"]]["route_gains"]
    attribution = attribution_section(store, made["run_id"])
    assert attribution is not None and gains
    assert sum(gains.values()) == pytest.approx(sum(s.gain or 0 for s in attribution.stages))
    [group] = [g for g in json.loads(table.stdout)["groups"] if g["task"] == "arith"
               and g["agent"] is None]
    assert group["route_gains"] == pytest.approx(gains)
    # bad input: one line, nothing made
    live = subprocess.run([A2RL, "replay", "r-typo"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert live.returncode == 2 and live.stderr.count("\n") == 1, live.stderr
