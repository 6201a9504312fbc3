"""`a2rl fleet`: the plan, and a fleet of toy runs on a real two-node Ray cluster writing into
a real PostgreSQL, with a node killed mid-fleet, a resume, and `a2rl compare` over the fleet.

The end-to-end test is slow (each run trains two SFT steps, is graded on dev and finalized on
test; the reference agent stops after SFT); the plan and ledger tests are not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import col, select

from a2rl.fleet import FleetPlan, ledger, load_plan, plan_from_flags, resume_key
from a2rl.store import BudgetEvent, BudgetEventKind, Run, Store

from .baseline_seed import (  # noqa: F401  (fixtures)
    base_model_dir,
    baseline_rows,
    seed_base_model,
    seed_baseline,
)
from .conftest import require, require_bwrap
from .pg import PgServer

A2RL = str(Path(sys.executable).parent / "a2rl")
PLAN = """\
name = "{name}"
tasks = ["arith"]
repeats = 2
budget = "10m"
resource = "gpu_slot"
seed = 0

[[agents]]
name = "reference"
options = {{ sft_args = "--steps 2 --holdout 0 --batch 4 --max-length 48", stages = "sft" }}
"""


def test_plan_from_toml_expands_in_a_stable_order(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(name="p1"))
    plan = load_plan(path, repeats=3)  # the flag over the plan's 2
    runs = plan.runs()
    assert [resume_key(r) for r in runs] == [("arith", "reference", "", 0),
                                             ("arith", "reference", "", 1),
                                             ("arith", "reference", "", 2)]
    assert [r.seed for r in runs] == [0, 1, 2] and runs[0].agent_options["stages"] == "sft"
    assert [r.budget for r in runs] == ["10m"] * 3 and runs[1].fleet_id == "p1"
    flags = plan_from_flags("p2", ["arith"], ["llm:m1", "llm:m2", "reference"], 1, {})
    assert [(a.name, a.models) for a in flags.agents] == [("llm", ["m1", "m2"]),
                                                          ("reference", [None])]
    assert len(flags.runs()) == 3
    with pytest.raises(ValueError, match="fleet name"):
        FleetPlan(name="no spaces", tasks=["arith"], agents=[{"name": "reference"}])
    with pytest.raises(ValueError):
        FleetPlan(name="x", tasks=["arith"], agents=[{"name": "reference"}], budget="soon")


def test_ledger_resume_keys_and_failures(store: Store) -> None:
    plan = plan_from_flags("f", ["arith"], ["reference"], 3, {})
    specs = plan.runs()
    with store.session() as s:
        for i, status in enumerate(["finished", "running", "failed"]):
            s.add(Run(id=f"r{i}", task_id="arith", agent="reference", workspace="/x",
                      budget_s=60, status=status, fleet_id="f", fleet_repeat=i))
        s.add(Run(id="other", task_id="arith", agent="reference", workspace="/x",
                  budget_s=60, status="finished", fleet_id="g", fleet_repeat=1))
    assert ledger.done_keys(store, "f") == {resume_key(specs[0])}
    assert [r.id for r in ledger.open_runs(store, "f")] == ["r1"]
    assert [r.id for r in ledger.open_runs(store, "f", specs[1])] == ["r1"]
    ledger.mark_failed(store, ["r1", "r0"], "node lost")
    with store.session() as s:
        assert s.get(Run, "r1").status == "failed" and s.get(Run, "r1").end_reason == "node lost"
        assert s.get(Run, "r0").status == "finished"  # finished runs stay finished
        assert s.get(Run, "r1").ended_at is not None
        ends = s.exec(select(BudgetEvent).where(col(BudgetEvent.run_id).in_(["r0", "r1"]))).all()
    # closed through the run's clock like any other end: its one `finished` event says why
    assert [(e.run_id, e.kind, e.detail) for e in ends] == [
        ("r1", BudgetEventKind.finished, {"reason": "node lost", "status": "failed"})]


# --- end to end ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster_env(postgres: PgServer, tmp_path_factory: pytest.TempPathFactory,
                base_model_dir: Path, baseline_rows: list) -> Iterator[dict]:  # noqa: F811
    require_bwrap()
    try:
        import ray  # noqa: F401
    except ImportError:
        require(False, "ray is not installed: bash scripts/setup.sh (the fleet extra)")
    from .ray_cluster import start_cluster

    db_url = postgres.create_database()
    # the base model and its baseline, made once per session (neither is under test here)
    seed_baseline(db_url, baseline_rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env["A2RL_DB_URL"] = db_url
    # One slot a node: the fleet's two runs take one node each (a node running two at once is
    # the local fleet's case below, and each run costs the suite about 17 CPU-seconds).
    cluster = start_cluster(env, tmp_path_factory.mktemp("cluster"), slots=1,
                            model_dir=base_model_dir)
    try:
        yield {"cluster": cluster, "db_url": db_url, "env": env,
               "driver_home": tmp_path_factory.mktemp("driver-home")}
    finally:
        cluster.stop()


def _fleet(ctx: dict, plan: Path) -> subprocess.Popen[str]:
    env = {**ctx["env"], "A2RL_HOME": str(ctx["driver_home"])}
    return subprocess.Popen([A2RL, "fleet", "--plan", str(plan), "--address",
                             ctx["cluster"].address, "--json"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fleet_on_two_nodes_survives_a_lost_node_and_resumes(cluster_env: dict,
                                                             tmp_path: Path) -> None:
    ctx, cluster = cluster_env, cluster_env["cluster"]
    store = Store(ctx["db_url"])
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(name="toy"))
    node_a, node_b = cluster.nodes["a"].node_id, cluster.nodes["b"].node_id

    # 1. Two runs, one on each node; node b dies as soon as its run has started.
    proc = _fleet(ctx, plan)

    def runs() -> list[Run]:
        return ledger.fleet_runs(store, "toy")

    _wait_for(lambda: any(r.fleet_node == node_b for r in runs()) or proc.poll() is not None,
              240, "a run on the second node")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert cluster.kill_node("b") > 0
    out, err = proc.communicate(timeout=600)
    print(err)  # progress: shown with the failure, if any
    assert proc.returncode == 1, err[-3000:]  # some runs failed: the fleet says so
    first = json.loads(out)
    states = Counter(r["state"] for r in first["runs"])
    assert states["finished"] >= 1 and states["failed"] >= 1, first
    assert states["finished"] + states["failed"] == 2
    assert "queued" in err and "running" in err and "finished" in err  # progress on stderr
    rows = runs()
    assert {r.fleet_node for r in rows} == {node_a, node_b}  # both nodes ran runs
    assert all(r.status == "finished" for r in rows if r.fleet_node == node_a)
    lost = [r for r in rows if r.fleet_node == node_b]
    assert lost and all(r.status == "failed" and r.end_reason.startswith("node lost")
                        for r in lost)
    finished_before = {r.id for r in rows if r.status == "finished"}
    assert len(finished_before) == states["finished"]

    # 2. Resume: only the missing runs are made, on the node that is left.
    proc = _fleet(ctx, plan)
    out, err = proc.communicate(timeout=600)
    print(err)
    assert proc.returncode == 0, err[-3000:]
    second = json.loads(out)
    assert second["already_done"] == len(finished_before)
    assert len(second["runs"]) == 2 - len(finished_before)
    assert all(r["state"] == "finished" and r["node_id"] == node_a for r in second["runs"])
    rows = runs()
    done = [r for r in rows if r.status == "finished"]
    assert sorted(r.fleet_repeat for r in done) == [0, 1]  # every run once
    assert finished_before <= {r.id for r in done}
    assert len(rows) == 2 + len(lost)  # nothing else was recorded
    with store.session() as s:  # and nothing outside the fleet
        assert len(s.exec(select(Run)).all()) == len(rows)

    # 3. Compare from a machine that has none of the nodes' disks: only the database.
    elsewhere = {**ctx["env"], "A2RL_HOME": str(tmp_path / "elsewhere")}
    p = subprocess.run([A2RL, "compare", "--fleet", "toy", "--json"], env=elsewhere,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    comparison = json.loads(p.stdout)
    # the runs lost with node B are listed apart, as a2rl's failure, never as repeats
    assert len(comparison["rows"]) == 2 + len(lost)
    assert sum(r["counted"] for r in comparison["rows"]) == 2
    (group,) = comparison["groups"]
    assert group["runs"] == 2 and group["final_mean"] is not None
    assert group["not_counted"] == {"infrastructure failure": len(lost)}
    assert group["final_std"] is not None  # the spread across repeats


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ctrl_c_stops_a_local_fleet_and_finalizes_its_runs(
        tmp_path: Path, base_model_dir: Path, baseline_rows: list) -> None:  # noqa: F811
    """No --address: a local Ray instance and the default SQLite store. Ctrl-C (SIGINT to the
    foreground process group, as a terminal sends it) once the runs are under way."""
    require_bwrap()
    try:
        import ray  # noqa: F401
    except ImportError:
        require(False, "ray is not installed: bash scripts/setup.sh (the fleet extra)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    seed_baseline(f"sqlite:///{seed_base_model(tmp_path, base_model_dir) / 'a2rl.db'}",
                  baseline_rows)  # made once per session: neither is under test here
    # The local instance's files in a short folder of ours (unix socket paths are limited)
    ray_tmp = tempfile.mkdtemp(prefix="a2rl-ray-")
    env.update(A2RL_HOME=str(tmp_path), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
               RAY_TMPDIR=ray_tmp)
    try:
        _stop_local_fleet(env, tmp_path)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _stop_local_fleet(env: dict[str, str], tmp_path: Path) -> None:
    import signal

    proc = subprocess.Popen([A2RL, "fleet", "--name", "stopme", "--task", "arith", "--agent",
                             "reference", "--repeats", "3", "--resource", "slot", "--slots", "2",
                             "--agent-option", "sft_args=--steps 400 --holdout 0 --batch 4",
                             "--json"], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    store_path = tmp_path / "a2rl.db"
    _wait_for(lambda: store_path.exists() and sum(
        r.status == "running" for r in ledger.fleet_runs(Store(f"sqlite:///{store_path}"),
                                                         "stopme")) == 2
        or proc.poll() is not None, 240, "two running runs")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    time.sleep(3)  # let the agents start training
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=400)
    print(err)
    assert proc.returncode == 1, err[-3000:]
    result = json.loads(out)
    assert result["stopped"] is True
    states = Counter(r["state"] for r in result["runs"])
    assert states == {"interrupted": 2, "cancelled": 1}, result  # the third never started
    # the fleet's summary: interrupted runs are no results
    assert result["results"]["results"] == 0
    assert result["results"]["not_counted"] == {"interrupted": 2}
    rows = ledger.fleet_runs(Store(f"sqlite:///{store_path}"), "stopme")
    assert len(rows) == 2
    assert all(r.status == "finished" and r.agent_status == "interrupted" for r in rows)
    assert all(r.final_score is not None for r in rows)  # finalized: scored on test
