"""Evaluation profiles (`a2rl` and `paper`): the registry builds each task per profile, the
profile travels from the CLI and fleet plans to the run, the grader worker and every
evaluation's provenance, and the baseline cache keeps profiles apart."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.fleet import FleetPlan
from a2rl.fleet.node import node_config, write_config
from a2rl.grading import evaluate
from a2rl.grading.baseline import baseline_key
from a2rl.grading.worker import WorkerSpec
from a2rl.settings import Settings, parse_duration
from a2rl.store import Run, RunConfig, Store
from a2rl.tasks import get_task, list_tasks
from a2rl.tasks import opencompass as oc
from a2rl.tasks.profiles import PAPER_BUDGET, check_profile

from .opencompass_fixture import build_wheel

GSM8K_FIXTURE = Path(__file__).parent / "fixtures" / "gsm8k"
#: The reference harness's tasks (its autorl_bench/benchmarks/__init__.py: BENCHMARKS, minus
#: the `smith-*` ones discovered at run time), each of which declares its paper profile.
PAPER_TASKS = frozenset({"gsm8k", "humaneval", "alpacaeval", "alfworld", "webshop",
                         "deepsearchqa"})
A2RL = str(Path(sys.executable).parent / "a2rl")


@pytest.fixture
def paper_home(a2rl_home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings whose home (the session's: the tiny model is built once) holds the fixture
    OpenCompass wheel where the paper profile looks, its digest the one the check expects
    (the real wheel's on a user's machine)."""
    wheel = build_wheel(a2rl_home / "opencompass")
    monkeypatch.setattr(oc, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    return Settings(home=a2rl_home, tasks={"gsm8k": {"data_dir": str(GSM8K_FIXTURE)}},
                    base_model="tiny-llama", grading={"max_new_tokens": 8})


def test_registry_builds_one_task_per_profile() -> None:
    a2rl, paper = get_task("gsm8k"), get_task("gsm8k", "paper")
    assert a2rl is get_task("gsm8k", "a2rl") and paper is get_task("gsm8k", "paper")
    assert (a2rl.profile, paper.profile) == ("a2rl", "paper")
    assert (a2rl.spec.profile, paper.spec.profile) == ("a2rl", "paper")
    # the a2rl task is untouched by building its paper twin
    assert a2rl.spec.default_budget == "10h" and a2rl.spec.grader.max_new_tokens == 256
    assert paper.spec.default_budget == PAPER_BUDGET == "12h"
    # the harness's tasks, and the toys (which keep their a2rl evaluation)
    # (the paper list holds the built-in tasks a paper profile exists for; a test may have
    # registered tasks of its own, as `greet` in test_task_options.py, which add no paper task)
    builtin = PAPER_TASKS | {"arith", "textquest"}
    assert {t.spec.id for t in list_tasks("paper")} & (builtin | {"fixture"}) == builtin
    assert all(t.profile == "paper" for t in list_tasks("paper"))
    assert {t.spec.id for t in list_tasks()} >= PAPER_TASKS | {"arith", "textquest"}
    # each task says whether the harness has it; the toys do not, and keep their evaluation
    declared = {t.spec.id for t in list_tasks() if t.has_paper_profile}
    assert declared & (builtin | {"fixture"}) == PAPER_TASKS
    assert get_task("arith", "paper").evaluated_as == "a2rl"
    assert get_task("gsm8k", "paper").evaluated_as == "paper"


def test_bad_profiles_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="profile must be one of a2rl, paper, not 'papr'"):
        get_task("gsm8k", "papr")
    with pytest.raises(ValueError, match="'fixture' has no paper profile"):
        get_task("fixture", "paper")  # neither the harness's task nor a toy
    with pytest.raises(ValueError, match="build a profile from the a2rl task"):
        get_task("gsm8k", "paper").with_profile("a2rl")
    assert check_profile("paper") == "paper"


def test_fleet_plan_and_node_carry_the_profile(tmp_path: Path) -> None:
    plan = FleetPlan(name="f", tasks=["gsm8k"], agents=[{"name": "reference"}],
                     profile="paper", protocol="heldout")
    (spec,) = plan.runs()
    assert spec.profile == "paper" and spec.protocol == "heldout"
    on_node = RunConfig.parse(write_config(node_config(spec, "node-1", []), tmp_path)
                              .read_text())
    assert on_node.profile == "paper" and on_node.fleet_node == "node-1"
    assert FleetPlan(name="f", tasks=["gsm8k"], agents=[{"name": "x"}]).runs()[0].profile \
        == "a2rl"
    with pytest.raises(ValueError, match="must be one of a2rl, paper, not 'both'"):
        FleetPlan(name="f", tasks=["gsm8k"], agents=[{"name": "x"}], profile="both")


def test_paper_run_records_profile_and_writes_paper_workspace(paper_home: Settings) -> None:
    from a2rl.server import create_run

    store = Store(f"sqlite:///{paper_home.home / 'profiles.db'}")
    created = create_run(paper_home, store, task_id="gsm8k", profile="paper", baseline=False)
    run = created.run
    with store.session() as s:
        row = s.get(Run, run.id)
        assert row is not None and row.profile == "paper" and row.protocol == "heldout"
    assert run.budget_s == 12 * 3600
    ws = Path(run.workspace)
    rows = [json.loads(line) for line in (ws / "data" / "train.jsonl").open()]
    assert len(rows) == 12  # every train row of the fixture: no dev held back under paper
    assert rows[0]["messages"][:-1] == rows[0]["chat"] and len(rows[0]["chat"]) == 5
    assert "paper profile" in (ws / "TASK.md").read_text()
    a2rl_run = create_run(paper_home, store, task_id="gsm8k", baseline=False).run
    assert a2rl_run.profile == "a2rl" and a2rl_run.budget_s == 10 * 3600
    assert len((Path(a2rl_run.workspace) / "data" / "train.jsonl").read_text().splitlines()) \
        == 9
    # the grading worker's spec, as grading/queue.py builds it from the run
    spec = WorkerSpec.model_validate({"task_id": row.task_id, "profile": row.profile,
                                      "checkpoint_dir": "/nowhere", "split": "dev"})
    assert get_task(spec.task_id, spec.profile).profile == "paper"
    with pytest.raises(ValueError, match="^profile: must be one of a2rl, paper, not 'nope'$"):
        create_run(paper_home, store, task_id="gsm8k", profile="nope", baseline=False)


def test_provenance_and_baseline_key_follow_the_profile(paper_home: Settings) -> None:
    from a2rl.tasks.gsm8k.task import GSM8KTask

    a2rl = GSM8KTask(data_dir=GSM8K_FIXTURE, base_model="tiny-llama")
    paper = a2rl.with_profile("paper")
    base = paper.base_model_dir(paper_home)
    res = evaluate(paper, base, "dev", paper_home)
    assert res.provenance["profile"] == "paper" and res.n_items == 3
    assert res.provenance["generation"]["stop"] == ["Question:"]
    assert res.items[0].prompt.startswith("Question: ") and "step by step" in res.items[0].prompt
    assert evaluate(a2rl, base, "dev", paper_home).provenance["profile"] == "a2rl"
    assert baseline_key(a2rl, base, paper_home) != baseline_key(paper, base, paper_home)


def test_cli_tasks_shows_the_settings_in_force(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env["A2RL_HOME"] = str(tmp_path)
    out = subprocess.run([A2RL, "tasks", "--profile", "paper", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = {d["task_id"]: d for d in json.loads(out.stdout)}
    assert set(docs) == PAPER_TASKS | {"arith", "textquest"}
    assert docs["arith"]["paper_profile"].startswith("the a2rl evaluation, unchanged")
    assert docs["arith"]["default_budget"] == get_task("arith").spec.default_budget
    assert "paper_profile" not in docs["gsm8k"]
    gsm8k = docs["gsm8k"]
    assert gsm8k["profile"] == "paper" and gsm8k["max_new_tokens"] == 512
    assert gsm8k["splits"]["train"]["n_items"] == 7473 and gsm8k["default_budget"] == "12h"
    assert docs["humaneval"]["splits"]["test"]["n_items"] == 82
    # one task with --profile: its options and the settings in force under that profile
    one = subprocess.run([A2RL, "tasks", "gsm8k", "--profile", "paper", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    doc = json.loads(one.stdout)
    assert doc["task_id"] == "gsm8k" and doc["options"]
    assert {**doc["evaluation"], "task": "gsm8k"} == gsm8k  # the list's, less its old alias
    ours = json.loads(subprocess.run([A2RL, "tasks", "gsm8k", "--profile", "a2rl", "--json"],
                                     env=env, capture_output=True, text=True,
                                     timeout=120).stdout)["evaluation"]
    assert ours["profile"] == "a2rl" and ours["default_budget"] != "12h"
    text = subprocess.run([A2RL, "tasks", "gsm8k", "--profile", "paper"], env=env,
                          capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert "evaluation (paper profile):" in text and "  default_budget   12h" in text, text
    # the list: each task's splits, names and sizes
    listed = subprocess.run([A2RL, "tasks"], env=env, capture_output=True, text=True,
                            timeout=120).stdout.splitlines()
    line = next(x for x in listed if x.startswith("humaneval "))
    sizes = get_task("humaneval").spec.splits
    assert line.endswith("[" + ", ".join(f"{k} {v.n_items}" for k, v in sizes.items()) + "]")
    bad = subprocess.run([A2RL, "tasks", "--profile", "papr"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "'papr' is not one of 'a2rl', 'paper'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_worker_reads_the_runs_profile_from_the_store(tmp_path: Path) -> None:
    """The grader's spec, as `process_one` builds it from a stored request: it carries the
    run's profile."""
    from a2rl.grading import spec_for
    from a2rl.store import GradeRequest, Submission

    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    with store.session() as s:
        for run_id, profile in (("r-a", "a2rl"), ("r-p", "paper")):
            s.add(Run(id=run_id, task_id="gsm8k", workspace="/nonexistent", budget_s=60,
                      profile=profile))
            s.add(Submission(id=f"s-{run_id}", run_id=run_id, path="output/x",
                             checkpoint_dir="/nonexistent/ckpt"))
    with store.session() as s:
        for run_id in ("r-a", "r-p"):
            s.add(GradeRequest(run_id=run_id, submission_id=f"s-{run_id}", split="test"))
    specs = []
    with store.session() as s:
        for i in (1, 2):
            req = s.get(GradeRequest, i)
            assert req is not None
            sub = s.get(Submission, req.submission_id)
            specs.append(spec_for(s.get(Run, req.run_id), sub.checkpoint_dir or "",  # type: ignore[arg-type,union-attr]
                                  req.split, Settings(home=tmp_path)))
    store.close()
    assert [(sp.task_id, sp.profile, sp.split) for sp in specs] == [
        ("gsm8k", "a2rl", "test"), ("gsm8k", "paper", "test")]


def test_toy_tasks_run_under_paper_with_their_a2rl_evaluation(a2rl_home: Path,
                                                              tmp_path: Path) -> None:
    """A toy (arith) accepts the paper profile, so a fleet's `--profile paper` over a plan
    with a toy runs: the run records the profile, the evaluation is the a2rl one item for
    item, and its provenance says so; the harness's tasks' paper evaluations say nothing."""
    from a2rl.server import create_run

    settings = Settings(home=a2rl_home, base_model="tiny-llama", grading={"max_new_tokens": 4})
    a2rl, paper = get_task("arith"), get_task("arith", "paper")
    assert paper.profile == "paper" and paper.evaluated_as == "a2rl"
    assert paper.spec.grader == a2rl.spec.grader and paper.spec.splits == a2rl.spec.splits
    assert paper.spec.default_budget == a2rl.spec.default_budget
    assert get_task("gsm8k", "paper").evaluated_as == "paper"
    assert get_task("textquest", "paper").evaluated_as == "a2rl"
    plan = FleetPlan(name="toys", tasks=["arith"], agents=[{"name": "reference"}],
                     profile="paper")
    (spec,) = plan.runs()
    store = Store(f"sqlite:///{tmp_path / 'toys.db'}")
    run = create_run(settings, store, spec, baseline=False).run  # the plan's own config
    assert run.profile == "paper" and run.budget_s == parse_duration(a2rl.spec.default_budget)
    base = a2rl.base_model_dir(settings)
    ours, theirs = (evaluate(t, base, "dev", settings) for t in (a2rl, paper))
    assert (ours.score, [i.model_dump() for i in ours.items]) == (
        theirs.score, [i.model_dump() for i in theirs.items])
    assert theirs.provenance["profile"] == "paper"
    assert theirs.provenance["evaluated_as"] == "a2rl"
    assert "evaluated_as" not in ours.provenance
    store.close()
