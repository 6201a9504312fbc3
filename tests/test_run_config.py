"""`RunConfig`, a run's one configuration: its errors are one line, every stored shape loads
(rows of older stores and archives), the row's columns and its config agree, the agent's
options are never stored, and a fleet hands its node the whole config as JSON."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from a2rl.cli import app
from a2rl.cli.options import GRADING_CLOCKS, PROFILES, PROTOCOLS
from a2rl.fleet import FleetPlan
from a2rl.fleet.node import node_config, run_argv, write_config
from a2rl.sandbox.local import LocalSettings
from a2rl.settings import Settings
from a2rl.store import (
    GradingClock,
    Profile,
    Protocol,
    Run,
    RunConfig,
    RunConfigError,
    RunSetup,
    RunStatus,
    Store,
)
from a2rl.tasks.profiles import PROFILES as TASK_PROFILES

from . import fake_agents  # noqa: F401  (registers the test agents)
from .conftest import require_bwrap

#: A run's config as every a2rl before `RunConfig` stored it: one flat dict.
LEGACY = {"baseline_evaluations": {"dev": 7, "test": 8}, "network": True,
          "allow_unisolated": False, "unsafe_local": False, "disk_volume": True,
          "task_options": {"base_model": "tiny-llama"}, "readonly_paths": ["base_model", "data"],
          "container": {"image": "a2rl-sandbox:1", "gpus": ["1"], "share_gpus": False,
                        "keep_container": True, "memory": "16g", "pids_limit": 512,
                        "cpus": None, "shm_size": "2g"}}


def test_enums_spell_the_words_the_cli_and_tasks_spell() -> None:
    """The CLI spells the choices out (it starts without importing the store) and the tasks
    spell the profiles (they do not import the store): the same words."""
    assert tuple(Protocol) == PROTOCOLS and tuple(GradingClock) == GRADING_CLOCKS
    assert tuple(Profile) == PROFILES == TASK_PROFILES


@pytest.mark.parametrize(("fields", "line"), [
    ({"protocol": "papr"}, "protocol: must be one of heldout, paper, not 'papr'"),
    ({"profile": "both"}, "profile: must be one of a2rl, paper, not 'both'"),
    ({"grading_clock": "stopped"}, "grading_clock: must be one of counted, paused, not "
                                   "'stopped'"),
    ({"budget": "soon"}, "budget: bad duration 'soon': use forms like 90s, 20m, 2h, 1h30m"),
    ({"max_submissions": 0}, "max_submissions: Input should be greater than or equal to 1"),
    ({"gpus": ["0", "x"]}, "gpus: takes device numbers such as 0 or 0,1, not '0,x'"),
    ({"netwrok": True}, "netwrok: is not a setting of a run"),
    ({"profile": "x", "seed": "y"}, "profile: must be one of a2rl, paper, not 'x'; seed: Input "
                                    "should be a valid integer, unable to parse string as an "
                                    "integer"),
])
def test_a_bad_config_is_one_line_naming_the_field(fields: dict, line: str) -> None:
    with pytest.raises(RunConfigError) as caught:
        RunConfig.build(**fields)
    assert str(caught.value) == line and "\n" not in line
    assert caught.value.field == next(iter(fields))
    assert isinstance(caught.value, ValueError)  # what create_run's callers catch


def test_feedback_split_follows_the_protocol() -> None:
    assert RunConfig().feedback_split == "dev"
    assert RunConfig.build(protocol="paper").feedback_split == "test"
    assert RunConfig.build(protocol=Protocol.paper, profile="paper").profile == Profile.paper


def test_the_agents_options_are_never_dumped() -> None:
    """They may hold an API key: no dump carries them (the store, archives, --json), only the
    node's JSON, which reads back whole."""
    config = RunConfig.build(agent="codex", agent_options={"openai_api_key": "sk-secret"})
    assert "sk-secret" not in json.dumps(config.model_dump(mode="json"))
    assert "sk-secret" not in json.dumps(config.stored()) and "sk-secret" not in repr(config)
    assert RunConfig.parse(config.node_json()).agent_options == {"openai_api_key": "sk-secret"}


def test_a_legacy_config_loads_typed() -> None:
    config = RunConfig.from_stored(LEGACY)
    assert config.network is True and config.unsafe_local is False
    assert config.task_options == {"base_model": "tiny-llama"}
    assert config.gpus == ["1"] and config.keep_container is True  # from the container's
    setup = config.setup
    assert setup.baseline_evaluations == {"dev": 7, "test": 8} and setup.disk_volume is True
    assert setup.readonly_paths == ["base_model", "data"] and setup.allow_unisolated is False
    assert setup.sandbox == LEGACY["container"]  # the backend's options, under their new name
    assert RunSetup.model_validate({"container": {"image": "x"}}).sandbox == {"image": "x"}
    assert RunConfig.from_stored({}).setup.readonly_paths is None  # the oldest: nothing
    # a key a newer a2rl stored is left out, not a run that cannot be read
    assert RunConfig.from_stored({"network": True, "later_knob": 1}).network is True


def test_old_rows_load_typed_and_match_their_columns(db_url: str) -> None:
    """A row stored before `RunConfig` (a flat dict, none of the columns' fields) reads as a
    whole config agreeing with its columns; reading writes nothing; changing one of those
    columns stores the config in the new shape, agreeing with it."""
    store = Store(db_url)
    with store.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO run (id, task_id, status, backend, protocol, profile, workspace, "
            "budget_s, grading_clock, created_at, config, seed, agent, driver_model, fleet_id, "
            "fleet_repeat, fleet_node) VALUES ('r-old', 'gsm8k', 'finished', 'docker', "
            "'paper', 'paper', '/x', 60, 'paused', '2026-01-01', :config, 3, 'codex', 'm1', "
            "'f1', 2, 'n1')"), {"config": json.dumps(LEGACY)})
    with store.session() as s:
        run = s.get(Run, "r-old")
        assert run is not None and isinstance(run.config, RunConfig)
        config = run.config
        assert (config.task_id, config.backend, config.protocol, config.profile) == (
            "gsm8k", "docker", "paper", "paper")
        assert (config.grading_clock, config.seed, config.agent, config.driver_model) == (
            "paused", 3, "codex", "m1")
        assert (config.fleet_id, config.fleet_repeat, config.fleet_node) == ("f1", 2, "n1")
        assert config.feedback_split == "test" and config.network is True
        assert run.task_options == {"base_model": "tiny-llama"}
        assert run.readonly_paths == ["base_model", "data"]
    with store.engine.connect() as conn:  # read, not rewritten
        raw = conn.execute(text("SELECT config FROM run WHERE id = 'r-old'")).scalar_one()
    assert (json.loads(raw) if isinstance(raw, str) else raw) == LEGACY
    with store.session() as s:
        s.get(Run, "r-old").status = RunStatus.failed  # not the config's: stays as it was
    with store.engine.connect() as conn:
        raw = conn.execute(text("SELECT config FROM run WHERE id = 'r-old'")).scalar_one()
    assert (json.loads(raw) if isinstance(raw, str) else raw) == LEGACY
    with store.session() as s:
        s.get(Run, "r-old").fleet_node = "n2"
    with store.engine.connect() as conn:
        raw = conn.execute(text("SELECT config FROM run WHERE id = 'r-old'")).scalar_one()
    stored = json.loads(raw) if isinstance(raw, str) else raw
    assert stored["setup"]["baseline_evaluations"] == {"dev": 7, "test": 8}
    assert stored["task_id"] == "gsm8k" and stored["protocol"] == "paper"
    assert stored["fleet_node"] == "n2" and stored["gpus"] == ["1"]
    assert "agent_options" not in stored
    store.close()


def test_a_new_row_and_its_config_agree(store: Store) -> None:
    """The columns are what SQL filters on: a row made with them reads them in its config,
    and one made from a config has them as columns."""
    run = Run(id="r-1", task_id="arith", workspace="/w", budget_s=60, protocol="paper",
              config={"network": True})
    assert run.config.protocol == "paper" and run.config.network is True
    config = RunConfig.build(task_id="gsm8k", profile="paper", seed=4, fleet_id="f",
                             backend="docker")
    made = Run(id="r-2", workspace="/w", budget_s=60, config=config, **config.row_values())
    with store.session() as s:
        s.add(run)
        s.add(made)
    with store.session() as s:
        assert s.get(Run, "r-1").config.feedback_split == "test"
        again = s.get(Run, "r-2")
        assert (again.task_id, again.profile, again.seed, again.fleet_id) == (
            "gsm8k", "paper", 4, "f")
        assert again.config.model_dump() == config.model_dump()


def test_create_run_takes_a_config_and_records_it_as_made(settings: Settings,
                                                          store: Store) -> None:
    from a2rl.server import create_run

    config = RunConfig.build(task_id="arith", budget="30m", protocol="paper", seed=9,
                             agent="by-hand", agent_options={"key": "sk-x"})
    run = create_run(settings, store, config, baseline=False).run
    with store.session() as s:
        row = s.get(Run, run.id)
    assert (row.protocol, row.seed, row.agent, row.budget_s) == ("paper", 9, "by-hand", 1800)
    assert row.config.backend == settings.sandbox.backend  # resolved: the setting
    assert row.config.unsafe_local is settings.sandbox.section(LocalSettings).unsafe
    assert row.config.setup.readonly_paths is not None  # settled when it was made
    assert row.config.agent_options == {} and "sk-x" not in row.model_dump_json()
    with pytest.raises(RunConfigError, match="^protocol: must be one of heldout, paper"):
        create_run(settings, store, task_id="arith", protocol="held", baseline=False)
    with pytest.raises(TypeError):
        create_run(settings, store, config, seed=1)


def test_a_fleet_node_gets_the_whole_config_as_json(tmp_path: Path) -> None:
    plan = FleetPlan.model_validate({
        "name": "f", "tasks": ["arith"], "repeats": 2, "seed": 5, "protocol": "paper",
        "grading_clock": "paused", "network": True, "budget": "10m",
        "agents": [{"name": "codex", "models": ["m1"], "options": {"openai_api_key": "sk"}}],
        "task_options": {"arith": {"n": 3}}})
    second = plan.runs()[1]
    on_node = node_config(second, "node-7", ["2", "3"])
    path = write_config(on_node, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the agent's key
    assert run_argv(path)[-3:] == ["--json", "--config", str(path)]  # no other flag
    read = RunConfig.parse(path.read_text())
    assert read == on_node and read.agent_options == {"openai_api_key": "sk"}
    assert (read.fleet_id, read.fleet_repeat, read.fleet_node, read.seed) == ("f", 1, "node-7", 6)
    assert (read.protocol, read.grading_clock, read.network, read.gpus) == (
        "paper", "paused", True, ["2", "3"])
    assert (read.task_id, read.agent, read.driver_model, read.task_options) == (
        "arith", "codex", "m1", {"n": "3"})


def test_run_from_a_nodes_config_file(settings: Settings, tmp_path: Path) -> None:
    """`a2rl run --config FILE`, as a fleet's node starts it: the run is made from the JSON
    (fleet membership, protocol, seed, task options) and the agent gets its options; a bad
    file, or another run flag beside it, is one line."""
    require_bwrap()
    env = {k: None for k in os.environ if k.startswith("A2RL_")}
    env |= {"A2RL_HOME": str(settings.home), "A2RL_DB_URL": settings.database_url}
    config = RunConfig.build(
        task_id="arith", agent="test-snoops", budget="5m", protocol="paper", seed=11,
        fleet_id="fl", fleet_repeat=3, agent_options={"SNOOP_DB": "/nowhere/at-all"})
    path = write_config(node_config(config, "node-9", []), tmp_path)
    result = CliRunner().invoke(app, ["run", "--config", str(path), "--json"], env=env)
    assert result.exit_code in (0, 1), (result.stdout, result.stderr)  # 1: no score, no submit
    run_id = json.loads(result.stdout)["run_id"]
    store = Store(settings.database_url)
    with store.session() as s:
        row = s.get(Run, run_id)
    assert (row.fleet_id, row.fleet_repeat, row.fleet_node) == ("fl", 3, "node-9")
    assert (row.protocol, row.seed, row.agent) == ("paper", 11, "test-snoops")
    assert b"blocked /nowhere/at-all" in store.get_blob(row.agent_transcript_sha)
    with store.engine.connect() as conn:
        raw = conn.execute(text("SELECT config FROM run WHERE id = :i"), {"i": run_id})
        assert "/nowhere/at-all" not in str(raw.scalar_one())  # never stored
    store.close()

    def one_line(*args: str) -> str:
        result = CliRunner().invoke(app, ["run", *args], env=env)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.stderr
        return lines[0]

    assert "give no other run flag (--task, --seed)" in one_line(
        "--config", str(path), "--task", "arith", "--seed", "1")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task_id": "arith", "protocol": "both"}))
    assert one_line("--config", str(bad)) == (
        f"a2rl: --config {bad}: protocol: must be one of heldout, paper, not 'both'")
    assert one_line("--config", str(tmp_path / "none.json")).endswith(
        "none.json: No such file or directory")
