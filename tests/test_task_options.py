"""Tasks own their options and their evaluation; the grading seam; declared read-only inputs.

- options: defaults < deprecated global settings < `[tasks.<id>]` < `-T`; one-line errors;
  recorded on the run, sent to the grader, in every provenance; `a2rl tasks <id>` lists them.
- evaluation: `grading.evaluate` runs the task's own `evaluate`, whatever the task's class.
- read-only inputs: a task declaring an extra one gets it mounted read-only for its run.
- the seam: tasks import only `a2rl.grading.seam` of grading; grading imports no task.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from a2rl.grading import evaluate
from a2rl.grading.seam import GenerationEngine, ItemResult, Prompt, TaskScore
from a2rl.settings import Settings, load_settings
from a2rl.stats import WILSON_METHOD, wilson_interval
from a2rl.store import Run, Store
from a2rl.tasks import (
    OptionsError,
    TaskOptions,
    base_model_name,
    get_task,
    parse_assignments,
    register,
    service_handlers,
)
from a2rl.tasks.gsm8k.task import GSM8KTask
from a2rl.tasks.spec import GraderSettings, TaskSpec

from .conftest import require_bwrap
from .fixture_task import FixtureTask

REPO = Path(__file__).resolve().parents[1]
A2RL = str(Path(sys.executable).parent / "a2rl")


# --- a task with options, its own evaluation and an extra read-only input ----------------------
class GreetOptions(TaskOptions):
    greeting: str = Field("hi", description="what the grader expects")
    times: int = Field(1, ge=1, description="how often")

    legacy_settings: ClassVar[dict[str, str]] = {}


def write_secrets(task: Any, workspace: Path, settings: Settings, link_base_model: bool) -> None:
    (workspace / "secrets").mkdir(exist_ok=True)
    (workspace / "secrets" / "key.txt").write_text("given\n")


class GreetTask(FixtureTask):
    """Scored by its own `evaluate` (no `score_outputs`), with an input folder of its own."""

    options_model = GreetOptions
    spec = TaskSpec(id="greet", level=1, title="Greeting (options test)",
                    description="# greet\n", version="1", default_budget="30m",
                    readonly_paths=["base_model", "data", "secrets"], toy=True)

    def load_split(self, split: Any, settings: Settings) -> list[dict[str, Any]]:
        opts = self.options(settings)
        assert isinstance(opts, GreetOptions)
        return [{"id": f"{split}-{i}", "want": opts.greeting * opts.times} for i in range(4)]

    def evaluate(self, items: Sequence[dict[str, Any]], engine: GenerationEngine,
                 grader: GraderSettings) -> TaskScore:
        outputs = engine.generate(["say it"] * len(items), max_new_tokens=4)
        return TaskScore.from_items([ItemResult(id=it["id"], prompt="say it", output=o,
                                                expected=it["want"], correct=o == it["want"])
                                     for it, o in zip(items, outputs, strict=True)])

    workspace_parts = (write_secrets,)  # its own input, after the shared layout


register("greet", GreetTask)


class EchoEngine:
    engine_name, engine_version = "echo", "1"

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        return [self.answer] * len(prompts)


# --- options ------------------------------------------------------------------------------------
def test_options_resolve_defaults_then_legacy_then_table_then_flags(tmp_path: Path) -> None:
    base = Settings(home=tmp_path)
    assert GSM8KTask().options(base).data_dir == ""
    legacy = base.updated({"legacy_task_settings": {"gsm8k_dir": "/legacy"},
                                     "task_base_models": {"gsm8k": "/m/g"}})
    assert GSM8KTask().options(legacy).data_dir == "/legacy"
    assert base_model_name(GSM8KTask(), legacy) == "/m/g"
    table = legacy.updated({"tasks": {"gsm8k": {"data_dir": "/table"}}})
    assert GSM8KTask().options(table).data_dir == "/table"
    flagged = GSM8KTask().with_options({"data_dir": "/flag", "base_model": "tiny-llama"})
    assert flagged.options(table).data_dir == "/flag"
    assert base_model_name(flagged, table) == "tiny-llama"
    assert GSM8KTask().options(table).data_dir == "/table"  # with_options made a copy
    # the option is what the task reads its data from
    fixture = REPO / "tests" / "fixtures" / "gsm8k"
    assert len(GSM8KTask().with_options({"data_dir": str(fixture)}).load_split("test", base)) \
        == 4


def test_bad_options_are_one_line_naming_task_key_and_allowed(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    with pytest.raises(OptionsError) as err:
        get_task("gsm8k").with_options({"nope": "1"})
    message = str(err.value)
    assert "gsm8k" in message and "'nope'" in message and "data_dir" in message
    assert "\n" not in message
    with pytest.raises(OptionsError) as err:
        get_task("webshop").with_options({"num_products": "many"}).options(settings)
    message = str(err.value)
    assert "webshop" in message and "num_products" in message and "integer" in message
    assert "\n" not in message
    bad_table = settings.updated({"tasks": {"greet": {"colour": "red"}}})
    with pytest.raises(OptionsError, match=r"greet: no option 'colour' \(\[tasks.greet\]"):
        get_task("greet").options(bad_table)
    with pytest.raises(OptionsError, match="use -T key=value"):
        parse_assignments(["data_dir"])
    assert parse_assignments(["a=b=c", "x="]) == {"a": "b=c", "x": ""}


def test_config_toml_task_tables(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[a2rl]\nbase_model = "tiny-llama"\n\n[tasks.gsm8k]\ndata_dir = "/from/toml"\n'
        '[tasks.webshop]\nnum_products = 7\n')
    settings, sources = load_settings(environ={"A2RL_HOME": str(tmp_path)})
    assert settings.tasks == {"gsm8k": {"data_dir": "/from/toml"},
                              "webshop": {"num_products": 7}}
    assert sources["tasks"].startswith("file:")
    assert get_task("gsm8k").options(settings).data_dir == "/from/toml"
    assert get_task("webshop").options(settings).num_products == 7
    # a deprecated variable is under the table, and -T over both
    legacy, _ = load_settings(environ={"A2RL_HOME": str(tmp_path), "A2RL_GSM8K_DIR": "/env"})
    assert get_task("gsm8k").options(legacy).data_dir == "/from/toml"
    assert get_task("gsm8k").with_options({"data_dir": "/t"}).options(legacy).data_dir == "/t"


# the built-in tasks' deprecated global settings: (config.toml key, variable, option, value)
OLD_SETTINGS = [
    ("gsm8k", "gsm8k_dir", "data_dir", "/g"),
    ("alpacaeval", "alpacaeval_dir", "data_dir", "/a"),
    ("alpacaeval", "alpacaeval_reference_file", "reference_file", "alpaca_eval.json"),
    ("webshop", "webshop_dir", "data_dir", "/w"),
    ("webshop", "webshop_num_products", "num_products", 7),
    ("alfworld", "alfworld_dir", "data_dir", "/alf"),
    ("deepsearchqa", "deepsearchqa_dir", "data_dir", "/d"),
    ("deepsearchqa", "deepsearchqa_corpus", "corpus", "/c.jsonl"),
    ("deepsearchqa", "deepsearchqa_search_url", "search_url", "http://127.0.0.1:9/s"),
    ("deepsearchqa", "deepsearchqa_search_key_env", "search_key_env", "MY_SEARCH_KEY"),
]


@pytest.mark.parametrize("where", ["top", "a2rl table", "variables"])
def test_deprecated_settings_still_set_their_options(tmp_path: Path, where: str) -> None:
    """An old config.toml (keys at the top or under [a2rl]) or old variables still set each
    task's option; the task table is over them, -T over both; the settings module names no
    task (each task's options declare their old names)."""
    def toml(value: Any) -> str:
        return json.dumps(value)  # a JSON string or integer is a TOML one

    lines = [f"{name} = {toml(value)}" for _, name, _, value in OLD_SETTINGS]
    environ = {"A2RL_HOME": str(tmp_path)}
    if where == "variables":
        environ |= {f"A2RL_{name.upper()}": str(value) for _, name, _, value in OLD_SETTINGS}
    else:
        header = "[a2rl]\n" if where == "a2rl table" else ""
        (tmp_path / "config.toml").write_text(header + "\n".join(lines) + "\n")
    settings, sources = load_settings(environ=environ)
    assert sources["legacy_task_settings"] == ("env" if where == "variables" else
                                               f"file:{tmp_path / 'config.toml'}")
    for task_id, _, option, value in OLD_SETTINGS:
        assert getattr(get_task(task_id).options(settings), option) == value, (task_id, option)
    table = settings.updated({"tasks": {"webshop": {"num_products": 3}}})
    assert get_task("webshop").options(table).num_products == 3
    assert get_task("webshop").options(table).data_dir == "/w"
    assert get_task("webshop").with_options({"num_products": "2"}).options(table) \
        .num_products == 2
    source = (REPO / "a2rl" / "settings.py").read_text().lower()
    assert not [name for _, name, _, _ in OLD_SETTINGS if name in source]


def test_bad_deprecated_settings_are_named_where_they_were_set(tmp_path: Path) -> None:
    from a2rl.settings import SettingsError

    config = tmp_path / "config.toml"
    config.write_text("webshop_num_products = -1\n")
    with pytest.raises(SettingsError) as err:
        load_settings(environ={"A2RL_HOME": str(tmp_path)})
    assert str(err.value) == (f"{config}: webshop_num_products = -1: should be greater than or "
                              "equal to 0")
    config.write_text('gsm8k_dri = "/x"\n')
    with pytest.raises(SettingsError, match="'gsm8k_dri' is not a setting; did you mean "
                                            "'gsm8k_dir'"):
        load_settings(environ={"A2RL_HOME": str(tmp_path)})
    config.unlink()
    with pytest.raises(SettingsError) as err:
        load_settings(environ={"A2RL_HOME": str(tmp_path), "A2RL_WEBSHOP_NUM_PRODUCTS": "x"})
    assert str(err.value) == "A2RL_WEBSHOP_NUM_PRODUCTS='x': must be an integer"


def test_a_plugin_tasks_declared_old_name_is_a_setting_too(tmp_path: Path) -> None:
    """Declaring `legacy_settings` is all a task does: the name is then accepted from
    config.toml and the environment, and sets the option."""
    class OldGreetOptions(GreetOptions):
        legacy_settings: ClassVar[dict[str, str]] = {"times": "greet_times_r28"}

    (tmp_path / "config.toml").write_text("greet_times_r28 = 4\n")
    settings, _ = load_settings(environ={"A2RL_HOME": str(tmp_path)})
    assert OldGreetOptions.resolve("greet", settings).times == 4
    env, _ = load_settings(environ={"A2RL_HOME": str(tmp_path / "none"),
                                    "A2RL_GREET_TIMES_R28": "5"})
    assert OldGreetOptions.resolve("greet", env).times == 5


def test_cli_applies_an_old_config_toml(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env |= {"A2RL_HOME": str(tmp_path), "A2RL_WEBSHOP_NUM_PRODUCTS": "9"}
    (tmp_path / "config.toml").write_text('gsm8k_dir = "/old/gsm8k"\n')
    p = subprocess.run([A2RL, "tasks", "gsm8k", "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)["options"]}
    assert rows["data_dir"]["value"] == "/old/gsm8k"
    assert rows["data_dir"]["deprecated_setting"] == "gsm8k_dir"
    p = subprocess.run([A2RL, "config", "show", "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["legacy_task_settings"] == {
        "value": {"gsm8k_dir": "/old/gsm8k", "webshop_num_products": 9}, "source": "env"}


def test_cli_lists_a_tasks_options_and_refuses_bad_ones(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env["A2RL_HOME"] = str(tmp_path)
    p = subprocess.run([A2RL, "tasks", "webshop"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "num_products" in p.stdout and "int" in p.stdout and "webshop_dir" in p.stdout
    p = subprocess.run([A2RL, "tasks", "gsm8k", "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    doc = json.loads(p.stdout)
    rows = {r["name"]: r for r in doc["options"]}
    assert rows["data_dir"]["type"] == "str" and rows["data_dir"]["default"] == ""
    assert rows["data_dir"]["description"] and "base_model" in rows
    p = subprocess.run([A2RL, "create", "--task", "gsm8k", "-T", "nope=1"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "no option 'nope'" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # nothing was made
    p = subprocess.run([A2RL, "tasks", "nosuch"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "unknown task" in p.stderr


# --- options on the run, to the grader, in provenance ------------------------------------------
def test_run_records_options_and_the_grader_uses_them(settings: Settings, store: Store,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from a2rl.grading import worker
    from a2rl.server import create_run, finish_run

    resolutions = count_resolutions(monkeypatch)
    created = create_run(settings, store, task_id="greet", budget="30m", baseline=False,
                         task_options={"greeting": "hello", "times": "2"})
    run = created.run
    assert len(resolutions) == 1  # once, when the run is made; everything after reads it
    try:
        with store.session() as s:
            row = s.get(Run, run.id)
            assert row is not None
            assert row.task_options == {"base_model": "", "greeting": "hello", "times": 2}
            assert row.readonly_paths == ["base_model", "data", "secrets"]
        # the grader rebuilds the task from the run's record, not from its own settings
        seen: dict[str, Any] = {}

        def fake_evaluate(task: Any, checkpoint_dir: Path, split: str, st: Settings,
                          generation: Any = None) -> Any:
            seen["options"] = task.options(st).model_dump()
            task.base_model_dir(st)
            return evaluate(task, checkpoint_dir, split, st, engine=EchoEngine("hellohello"),
                            generation=generation)

        monkeypatch.setattr(importlib.import_module("a2rl.grading.evaluate"), "evaluate",
                            fake_evaluate)
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        (ckpt / "model.safetensors").write_bytes(b"x")
        # a grading process whose config.toml changed since, even to a table the run's
        # creation would have refused, grades under the run's options, resolving nothing
        changed = settings.updated({"tasks": {"greet": {"greeting": "bye", "nope": 1}}})
        spec = worker.WorkerSpec(task_id="greet", checkpoint_dir=str(ckpt), split="dev",
                                 task_options=row.task_options,
                                 settings=changed.model_dump(mode="json"))
        result = json.loads(worker.run_spec(spec))
        assert seen["options"]["greeting"] == "hello" and seen["options"]["times"] == 2
        assert len(resolutions) == 1
        assert result["score"] == 1.0
        assert result["provenance"]["task_options"] == row.task_options
    finally:
        finish_run(settings, store, run.id)


def count_resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The task ids `TaskOptions.resolve` is called for from now on."""
    calls: list[str] = []
    original = TaskOptions.resolve.__func__  # type: ignore[attr-defined]

    def counted(cls: type[TaskOptions], task_id: str, *args: Any, **kwargs: Any) -> TaskOptions:
        calls.append(task_id)
        return original(cls, task_id, *args, **kwargs)

    monkeypatch.setattr(TaskOptions, "resolve", classmethod(counted))
    return calls


def test_the_cli_resolves_a_runs_options_once_for_its_checks_and_the_run(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """`a2rl create/run` resolve -T over the settings once; the checks before the run is made
    and `create_run` take that record as it is (a config.toml changed in between is not
    read again: the run records what was checked)."""
    from a2rl.cli.options import run_config, task_options
    from a2rl.cli.preflight import check_run
    from a2rl.tasks import task_of_run

    table = settings.updated({"tasks": {"greet": {"times": 3}}})
    resolutions = count_resolutions(monkeypatch)
    record = task_options("greet", ["greeting=hey"], table)
    assert record == {"base_model": "", "greeting": "hey", "times": 3}
    config = run_config(task_id="greet", task_options=record, task_options_resolved=True)
    check_run(table, config)
    bad = table.updated({"tasks": {"greet": {"times": 5, "nope": 1}}})
    task = task_of_run("greet", "a2rl", config.task_options, resolved=True, settings=bad)
    assert task.options().model_dump() == record
    assert resolutions == ["greet"]
    # a config made without the CLI (a library caller, a fleet's node) is resolved there
    later = table.updated({"tasks": {"greet": {"times": 5}}})
    fresh = task_of_run("greet", "a2rl", {"greeting": "hey"}, resolved=False, settings=later)
    assert fresh.options().model_dump() == {**record, "times": 5}
    assert resolutions == ["greet", "greet"]
    with pytest.raises(OptionsError, match="no option 'nope'"):
        task_of_run("greet", "a2rl", {}, resolved=False, settings=bad)


def test_old_runs_read_empty_options_and_legacy_readonly_inputs(tmp_path: Path) -> None:
    from a2rl.tools.runtime import readonly_inputs

    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "env").mkdir()
    old = Run(id="r-old", task_id="arith", workspace=str(ws), budget_s=60, config={})
    assert old.task_options == {} and old.readonly_paths is None
    assert readonly_inputs(old) == ["data", "env"]  # what exists of the legacy list
    new = Run(id="r-new", task_id="greet", workspace=str(ws), budget_s=60,
              config={"readonly_paths": ["base_model", "data", "secrets"]})
    assert readonly_inputs(new) == ["base_model", "data", "secrets"]


# --- evaluation is the task's strategy ---------------------------------------------------------
def test_grading_runs_the_tasks_own_evaluation(settings: Settings, tmp_path: Path) -> None:
    task = get_task("greet").with_options({"greeting": "yo"})
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"x")
    good = evaluate(task, ckpt, "dev", settings, engine=EchoEngine("yo"))
    assert good.score == 1.0 and good.n_items == 4
    assert (good.ci_low, good.ci_high) == pytest.approx((wilson_interval(4, 4)[0], 1.0))
    assert good.provenance["ci_method"] == WILSON_METHOD
    assert good.provenance["task_options"]["greeting"] == "yo"
    bad = evaluate(task, ckpt, "dev", settings, engine=EchoEngine("hi"))
    assert bad.score == 0.0 and bad.metrics["n_correct"] == 0


def test_task_score_from_items_writes_the_accuracy_block_once() -> None:
    items = [ItemResult(id=str(i), prompt="", output="", expected="", correct=i < 3)
             for i in range(4)]
    score = TaskScore.from_items(items, extra=1)
    assert score.score == 0.75 and score.n_correct == 3 and score.n_items == 4
    assert score.metrics == {"accuracy": 0.75, "n_correct": 3, "extra": 1}
    assert score.ci == wilson_interval(3, 4) and score.ci_method == WILSON_METHOD
    rate = TaskScore.from_items(items, metric="success_rate", count=False)
    assert list(rate.metrics) == ["success_rate"]
    empty = TaskScore.from_items([])
    assert (empty.score, empty.ci) == (0.0, (0.0, 1.0))
    # a task's own interval is kept, widened to hold its score
    own = TaskScore(score=0.5, n_items=4, n_correct=2, ci=(0.6, 0.7), ci_method="mine")
    assert own.interval() == (0.5, 0.7)


def test_every_task_declares_services_and_evaluate_without_type_checks() -> None:
    for task_id in ("arith", "gsm8k", "textquest", "greet"):
        task = get_task(task_id)
        assert callable(task.evaluate) and isinstance(service_handlers(task, Settings()), dict)


# --- read-only inputs the task declares ---------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_declared_readonly_input_cannot_be_written(settings: Settings, store: Store) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from a2rl.sandbox.workspace_fs import WorkspaceError
    from a2rl.server import create_run, finish_run
    from a2rl.server.run import build_runtime

    require_bwrap()
    created = create_run(settings, store, task_id="greet", budget="30m", baseline=False)
    run = created.run
    try:
        rt = build_runtime(settings, store, run)
        assert "secrets" in rt.workspace.readonly_names
        with pytest.raises((WorkspaceError, ToolError), match="read-only input"):
            rt.workspace.parts("secrets/key.txt", write=True)
        sandbox = rt.sandbox.get()
        sandbox.spawn("j-ro", "echo changed > secrets/key.txt; touch secrets/new; "
                              "echo ok > code/mine.txt")
        assert sandbox.wait("j-ro", 60).exit_code is not None
        secrets = Path(run.workspace) / "secrets"
        assert (secrets / "key.txt").read_text() == "given\n"
        assert not (secrets / "new").exists()
        assert (Path(run.workspace) / "code" / "mine.txt").read_text() == "ok\n"
    finally:
        finish_run(settings, store, run.id)


# --- the fleet ---------------------------------------------------------------------------------
def test_fleet_plans_carry_task_options_to_each_run(tmp_path: Path) -> None:
    from a2rl.fleet.node import node_config, write_config
    from a2rl.fleet.plan import FleetPlan
    from a2rl.store import RunConfig

    plan = FleetPlan.model_validate({
        "name": "f", "tasks": ["gsm8k", "arith"], "agents": [{"name": "reference"}],
        "task_options": {"gsm8k": {"data_dir": "/d", "base_model": "tiny-llama"}}})
    runs = {r.task_id: r for r in plan.runs()}
    assert runs["gsm8k"].task_options == {"data_dir": "/d", "base_model": "tiny-llama"}
    assert runs["arith"].task_options == {}
    for task, folder in (("gsm8k", tmp_path / "g"), ("arith", tmp_path / "a")):
        folder.mkdir()
        on_node = RunConfig.parse(write_config(node_config(runs[task], "n", []), folder)
                                  .read_text())
        assert on_node.task_options == runs[task].task_options
