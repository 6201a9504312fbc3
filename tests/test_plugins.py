"""Plugins: the one registry mechanism (`a2rl.registry`) behind tasks, agents, sandbox backends
and grading engines, and a real package (tests/plugin_pkg) that adds a task and an agent through
entry points, installed into a throwaway environment and run end to end with the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from a2rl.clients.base import AgentContext, AgentLaunch, BaseConnector
from a2rl.clients.transcript import Message
from a2rl.registry import PluginLoadError, Registry, UnknownName
from a2rl.tasks import Task, get_task, list_tasks, task_ids, task_load_errors
from a2rl.tasks.registry import TASKS

PLUGIN_SRC = Path(__file__).parent / "plugin_pkg"


def _write_dist(site: Path, name: str, entry_points: dict[str, dict[str, str]]) -> None:
    """An installed distribution as importlib.metadata finds it: a dist-info with entry points."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in eps.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


# --- the mechanism ---------------------------------------------------------------------------
def test_registry_loads_on_first_use_and_says_what_is_known() -> None:
    reg: Registry[object] = Registry("widget", group=None)
    reg.register("odict", "collections:OrderedDict")
    reg.register("made", lambda: "built")
    assert reg.names() == ["odict", "made"] and "odict" in reg and "nope" not in reg
    assert reg.create("made") == "built" and type(reg.create("odict")).__name__ == "OrderedDict"
    with pytest.raises(UnknownName) as err:
        reg.load("nope")
    assert str(err.value) == "unknown widget 'nope'; known widgets: made, odict"
    assert isinstance(err.value, KeyError)  # callers that caught KeyError still do


def test_a_broken_target_is_one_line_when_used_and_never_breaks_the_others() -> None:
    reg: Registry[object] = Registry("widget", check=callable)
    reg.register("fine", "collections:OrderedDict")
    reg.register("missing", "no_such_module_a2rl:Thing")
    reg.register("notcallable", "a2rl.tasks.arith.task:N_TRAIN")
    with pytest.raises(PluginLoadError) as err:
        reg.load("missing")
    message = str(err.value)
    assert "\n" not in message and message.startswith("widget 'missing' (code, ")
    assert "no_such_module_a2rl:Thing" in message and "ModuleNotFoundError" in message
    with pytest.raises(PluginLoadError, match="'notcallable' .* is not a valid widget"):
        reg.load("notcallable")
    loaded, errors = reg.load_all()
    assert list(loaded) == ["fine"] and set(errors) == {"missing", "notcallable"}


def test_entry_points_add_names_without_import_and_code_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_dist(tmp_path, "a2rl-test-widgets", {"a2rl.test-widgets": {
        "ext": "no_such_module_a2rl:Widget", "builtin": "no_such_module_a2rl:Other"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[object] = Registry("widget", group="a2rl.test-widgets")
    reg.register("builtin", "collections:OrderedDict", source="builtin")
    assert reg.names() == ["builtin", "ext"]
    assert reg.entry("ext").source == "entry point of a2rl-test-widgets"
    assert type(reg.create("builtin")).__name__ == "OrderedDict"  # not the plugin's
    with pytest.raises(PluginLoadError, match="entry point of a2rl-test-widgets"):
        reg.load("ext")


def test_listing_tasks_and_agents_imports_none_of_them() -> None:
    code = ("import sys, a2rl.tasks, a2rl.clients.registry as c\n"
            "ids, agents = a2rl.tasks.task_ids(), c.agent_names()\n"
            "mods = [m for m in sys.modules if m.startswith(('a2rl.tasks.', 'a2rl.clients.'))]\n"
            "print(ids, agents, sorted(mods))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    ids, agents, mods = out.split("] [")
    assert "'arith'" in ids and "'alfworld'" in ids and "'claude-code'" in agents
    for heavy in ("a2rl.tasks.arith.task", "a2rl.tasks.alfworld", "a2rl.tasks.gsm8k",
                  "a2rl.clients.llm", "a2rl.clients.claude_code", "a2rl.clients.openhands"):
        assert heavy not in mods, mods


def test_a_task_plugin_that_fails_is_named_and_the_others_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_dist(tmp_path, "a2rl-broken-task", {"a2rl.tasks": {
        "broken": "no_such_module_a2rl.task:Broken", "notatask": "collections:OrderedDict"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    TASKS.refresh()
    try:
        assert {"broken", "notatask", "arith"} <= set(task_ids())
        assert "arith" in [t.spec.id for t in list_tasks()]
        errors = task_load_errors()
        assert set(errors) >= {"broken", "notatask"}
        assert "ModuleNotFoundError" in errors["broken"] and "not a valid task" in errors[
            "notatask"]
        with pytest.raises(KeyError, match="task 'broken' .*cannot be loaded"):
            get_task("broken")
    finally:
        monkeypatch.undo()
        TASKS.refresh()
    assert "broken" not in task_ids()


def test_register_replaces_a_task_and_checks_what_it_builds() -> None:
    from a2rl.tasks.arith.task import ArithTask
    from a2rl.tasks.registry import register, unregister

    class Renamed(ArithTask):
        pass

    try:
        register("arith2", Renamed)
        with pytest.raises(PluginLoadError, match="'arith2' .* has spec.id 'arith'; the two "):
            get_task("arith2")
        register("arith2", lambda: "not a task")  # type: ignore[arg-type, return-value]
        with pytest.raises(PluginLoadError, match="built a str, not a Task"):
            get_task("arith2")
        first = Renamed()
        first.spec = first.spec.model_copy(update={"id": "arith2"})
        register("arith2", lambda: first)
        assert get_task("arith2") is first and get_task("arith2") is first  # built once
        second = Renamed()
        second.spec = first.spec
        register("arith2", lambda: second)  # a new registration drops the built instance
        assert get_task("arith2") is second

        class OldShape(Renamed):  # services as the method tasks had before they had parts
            def services(self, settings):  # type: ignore[override]
                return {}

        old = OldShape()
        old.spec = first.spec
        register("arith2", lambda: old)
        with pytest.raises(PluginLoadError, match="'arith2' .*`services` must be a mapping"):
            get_task("arith2")
    finally:
        unregister("arith2")
    assert "arith2" not in task_ids()


def test_sandbox_backends_and_grading_engines_are_registries() -> None:
    from a2rl.grading.engine_select import ENGINES, choose_engine
    from a2rl.sandbox.local import LocalSandbox
    from a2rl.sandbox.registry import BACKENDS
    from a2rl.tools.run_sandbox import make_sandbox

    assert BACKENDS.names() == ["local", "docker"] and BACKENDS.load("local") is LocalSandbox
    with pytest.raises(ToolError, match="unknown sandbox backend 'vm': use local or docker"):
        make_sandbox("vm", None)  # type: ignore[arg-type]
    assert ENGINES.names() == ["transformers", "static", "vllm"]
    assert choose_engine("transformers", cuda=False, vllm=False) == "transformers"
    assert ENGINES.create("transformers").identity(cuda=False)[0] == "transformers"


# --- what a task declares --------------------------------------------------------------------
#: A plugin task whose score is a mean reward in [0, 1], not a share of items correct: it
#: declares its own paired interval (a paired bootstrap of the mean reward's difference).
REWARD_PLUGIN = """
import json
from a2rl.stats import bootstrap_interval, clip_difference, weighted_mean
from a2rl.tasks import Task, TaskSpec
from a2rl.tasks.improvement import PairedInterval
from a2rl.tasks.spec import GraderSettings, SplitInfo

METHOD = "paired bootstrap of the mean reward (reward plugin)"


def rewards(scored):
    return [json.loads(it["parsed"])["reward"] for it in scored.items]


class RewardTask(Task):
    def __init__(self, task_id="reward"):
        self.spec = TaskSpec(
            id=task_id, level=1, title="Mean reward", description="(test)", version="1",
            default_base_model="tiny-llama", default_budget="10m", toy=True,
            splits={s: SplitInfo(n_items=4, visible=s == "train", source="test")
                    for s in ("train", "dev", "test")},
            grader=GraderSettings(max_new_tokens=4, stop=[], batch_size=4))

    def train_items(self, settings):
        return []

    def load_split(self, split, settings):
        return []

    def build_prompt(self, item):
        return [{"role": "user", "content": item["prompt"]}]

    def paired_interval(self, final, base):
        after, before = rewards(final), rewards(base)
        diff = [a - b for a, b in zip(after, before, strict=True)]
        low, high = bootstrap_interval(weighted_mean(diff), len(diff))
        low, high = clip_difference(low, high, -base.score, 1.0 - base.score)
        return PairedInterval(estimate=final.score - base.score, low=low, high=high,
                              method=METHOD, n_paired=len(diff)), None


class UndeclaredTask(RewardTask):
    paired_interval = Task.paired_interval  # the default, for proportions

    def __init__(self):
        super().__init__("undeclared")
"""


def test_a_plugin_task_with_a_non_proportion_score_gets_its_declared_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from a2rl.analysis.improvement import Scored, paired_improvement
    from a2rl.tasks.registry import unregister

    (tmp_path / "a2rl_reward_plugin.py").write_text(REWARD_PLUGIN)
    _write_dist(tmp_path, "a2rl-reward-plugin", {"a2rl.tasks": {
        "reward": "a2rl_reward_plugin:RewardTask",
        "undeclared": "a2rl_reward_plugin:UndeclaredTask"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    TASKS.refresh()
    try:
        def scored(rewards: list[float]) -> Scored:
            items = [{"id": f"q{i}", "correct": r == 1.0, "parsed": json.dumps({"reward": r})}
                     for i, r in enumerate(rewards)]
            return Scored(sum(rewards) / len(rewards), items[::-1])  # any order: paired by id

        before = [0.1, 0.2, 0.3, 0.2] * 10
        after = [r + 0.4 for r in before[:36]] + before[36:]
        iv, note = paired_improvement(scored(after), scored(before), "reward")
        assert note is None and iv is not None, note
        assert iv.method == "paired bootstrap of the mean reward (reward plugin)"
        assert iv.n_paired == 40 and iv.estimate == pytest.approx(0.36)
        assert 0 < iv.low <= iv.estimate <= iv.high <= 1 - 0.2 and not iv.within_noise
        # the same scores under the default interval: not a share of items correct, no interval
        iv, note = paired_improvement(scored(after), scored(before), "undeclared")
        assert iv is None and "not the share of items correct" in str(note)
    finally:
        monkeypatch.undo()
        TASKS.refresh()
        for name in ("reward", "undeclared"):
            unregister(name)  # and the instances built
    assert "reward" not in task_ids()


# --- what a connector declares ---------------------------------------------------------------
TRANSCRIPTS = Path(__file__).parent / "fixtures" / "transcripts"


class _Process(BaseConnector):
    """A process agent that does nothing: these tests are about its transcript parser."""

    kind = "process"

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        return AgentLaunch(argv=["/bin/true"], cwd=ctx.home)


class _Steps(_Process):
    """A plugin agent whose transcript is `step <tool>` lines, a format no built-in reads."""

    name, title = "steps", "Steps (test)"

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        lines = data.decode().splitlines()
        if not lines or not all(line.startswith("step ") for line in lines):
            return None
        return [Message(role="tool", tool=line.split()[1]) for line in lines]


class _Greedy(_Process):
    """Claims every JSON-lines transcript: asked first only when it is the run's agent."""

    name, title = "greedy", "Greedy (test)"

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        return [Message(role="info", text="greedy")] if data.startswith(b"{") else None


class _Broken(_Process):
    name, title = "broken-parser", "Broken parser (test)"

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        raise ValueError("a bug in a plugin's parser")


@pytest.fixture
def test_agents() -> Iterator[None]:
    from a2rl.clients.registry import AGENTS

    for factory in (_Steps, _Greedy, _Broken):
        AGENTS.register(factory.name, factory)
    try:
        yield
    finally:
        for factory in (_Steps, _Greedy, _Broken):
            AGENTS.unregister(factory.name)


def test_a_plugin_agents_transcript_is_read_by_its_own_parser(test_agents: None) -> None:
    from a2rl.analysis.web.transcripts import parse

    steps = b"step list_files\nstep run_command\n"
    for agent in ("steps", None, "claude-code"):  # its own; and found by the others' scan
        fmt, msgs = parse(steps, agent)
        assert fmt == "steps" and [m.tool for m in msgs] == ["list_files", "run_command"]
    claude = (TRANSCRIPTS / "claude-code.jsonl").read_bytes()
    assert parse(claude, "greedy") == ("greedy", [Message(role="info", text="greedy")])
    assert parse(claude, "broken-parser")[0] == "claude-code"  # its error: the next parser
    assert parse(claude, "claude-code")[0] == parse(claude, None)[0] == "claude-code"
    assert parse(b"nobody's format\n", "steps")[0] == "text"


class _SlowVersion(_Process):
    """An agent whose CLI answers `--version` after a while, as a Node or Python CLI does."""

    title = "Slow version (test)"

    def version(self) -> str | None:
        time.sleep(1.5)
        return f"{self.name}-1"


def test_agents_are_asked_their_versions_at_once_and_listed_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`a2rl agents` asks every agent at once (it waited on each CLI's `--version` in turn):
    three slow ones take about one's time, and the rows keep the registry's order."""
    from a2rl.clients import registry

    slow = [type(f"_Slow{i}", (_SlowVersion,), {"name": f"slow-{i}"}) for i in range(3)]
    names = [factory.name for factory in slow]
    for factory in slow:
        registry.AGENTS.register(factory.name, factory)
    # only these agents listed: the built-in CLIs' own start-ups are not what is timed
    monkeypatch.setattr(registry, "agent_names", lambda: names)
    try:
        started = time.monotonic()
        rows = registry.list_connectors()
        took = time.monotonic() - started
    finally:
        for factory in slow:
            registry.AGENTS.unregister(factory.name)
    assert [r["name"] for r in rows] == names
    assert [r["version"] for r in rows] == ["slow-0-1", "slow-1-1", "slow-2-1"]
    assert 1.5 <= took < 3.0, took  # one at a time would be 4.5 s at least


def test_an_agent_lacking_a_declared_member_is_named_one_line() -> None:
    from a2rl.clients.registry import AGENTS, get_connector

    class Bare:  # the pre-declaration shape: no options_model, missing_config, unreachable...
        name, title, kind, experimental = "bare", "Bare", "process", False

        def installed(self) -> bool:
            return True

        def version(self) -> str | None:
            return None

    class Quiet(BaseConnector):  # in-process, without `run`: the orchestrator would fail late
        name, title, kind = "quiet", "Quiet", "inprocess"

    AGENTS.register("bare", Bare)
    AGENTS.register("quiet", Quiet)
    try:
        with pytest.raises(PluginLoadError) as err:
            get_connector("bare")
        with pytest.raises(PluginLoadError) as quiet:
            get_connector("quiet")
    finally:
        AGENTS.unregister("bare")
        AGENTS.unregister("quiet")
    assert "\n" not in str(err.value) and "BaseConnector" in str(err.value)
    assert ("lacks options_model, missing_config, unreachable, parse_transcript, "
            "transcript_usage, prepare (" in str(err.value))
    assert "lacks run (" in str(quiet.value)


# --- a real plugin package, installed and run end to end ------------------------------------
@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A throwaway venv that sees this environment's packages (a2rl included) and has
    tests/plugin_pkg installed: nothing is added to the environment the tests run in.

    Why a venv rather than PYTHONPATH: the grading worker runs `python -I`, which ignores
    PYTHON* variables but keeps the interpreter's site-packages, so a plugin must be installed
    where `sys.executable`'s site finds it, as a user's would be."""
    root = tmp_path_factory.mktemp("plugin-env")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    # this environment's site-packages (with a2rl's editable install) after the venv's own
    (site / "zz_a2rl_parent.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    src = root / "src"  # built from a copy: the build leaves egg-info and build/ behind
    shutil.copytree(PLUGIN_SRC, src)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "--target",
                    str(site), str(src)], check=True, capture_output=True, timeout=300)
    # the console script, as pip writes it for a2rl: `a2rl run` serves in-process agents
    # through `<bin>/a2rl serve` beside the interpreter
    script = venv / "bin" / "a2rl"
    script.write_text(f"#!{python}\nimport sys\nfrom a2rl.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    yield script


def _a2rl(a2rl: Path, home: Path, *args: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("A2RL_", "PYTHON"))}
    clean |= {"A2RL_HOME": str(home), **(env or {})}
    return subprocess.run([str(a2rl), *args], env=clean, capture_output=True, text=True,
                          timeout=600)


#: the viewer's conversation of a run (format, messages paired with the server's calls)
TRANSCRIPT_OF_RUN = """
import json, sys
from a2rl.analysis.web import queries
from a2rl.analysis.web.transcripts import attach_calls, parse
from a2rl.settings import load_settings
from a2rl.store import Store
store = Store(load_settings()[0].database_url)
run = queries.get_run(store, sys.argv[1])
fmt, msgs = parse(queries.blob(store, run.agent_transcript_sha), run.agent)
msgs = attach_calls(msgs, queries.calls(store, run.id))
print(json.dumps({"format": fmt, "messages": [m.model_dump(mode="json") for m in msgs]}))
"""


#: the engines the run's baseline evaluations were generated with, from their provenance, and
#: what each item's output was
BASELINE_ENGINES = """
import json, sys
from a2rl.settings import load_settings
from a2rl.store import Run, Store
from a2rl.store.queries import baseline_evaluation
store = Store(load_settings()[0].database_url)
with store.session() as s:
    run = s.get(Run, sys.argv[1])
    found = [e for e in (baseline_evaluation(s, run, split) for split in ("dev", "test")) if e]
    print(json.dumps([sorted({(e.provenance["engine"], e.provenance["engine_version"])
                              for e in found}),
                      [item["output"] for e in found for item in e.items]]))
"""


def _python(a2rl: Path, home: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`code` run by the plugin environment's interpreter, against the store under `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2RL_", "PYTHON"))}
    env["A2RL_HOME"] = str(home)
    return subprocess.run([str(a2rl.parent / "python"), "-c", code, *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_an_installed_plugin_task_and_agent_run_end_to_end(plugin_env: Path,
                                                           tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed = _a2rl(plugin_env, home, "tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows["echo"]["title"] == "Echo a word (example plugin)" and "arith" in rows
    agents = _a2rl(plugin_env, home, "agents", "--json")
    assert agents.returncode == 0, agents.stderr
    idle = next(r for r in json.loads(agents.stdout) if r["name"] == "idle")
    assert idle["installed"] and idle["kind"] == "inprocess" and idle["version"] == "0.1.0"

    # the plugin's backend and engine are offered like the built-in ones
    helped = _a2rl(plugin_env, home, "run", "-h", env={"COLUMNS": "300"})
    assert "<local|docker|stamped-local>" in helped.stdout, helped.stdout
    # each with a section of its own: a config.toml table, a variable (`-` as `_`)
    config = home / "config.toml"
    home.mkdir(exist_ok=True)
    config.write_text('[sandbox.stamped-local]\nstamp = "the test\'s stamp"\n')
    env = {"A2RL_GRADING__ENGINE": "plain-twice", "A2RL_GRADING__PLAIN_TWICE__TIMES": "3"}
    shown = json.loads(_a2rl(plugin_env, home, "config", "show", "--json", env=env).stdout)
    assert shown["sandbox"]["stamped_local"]["stamp"] == {"value": "the test's stamp",
                                                          "source": f"file:{config}"}
    assert shown["grading"]["plain_twice"]["times"] == {"value": 3, "source": "env"}
    assert shown["sandbox"]["docker"]["memory"]["value"] == "16g"  # the built-ins' too
    bad = _a2rl(plugin_env, home, "runs", env={"A2RL_GRADING__PLAIN_TWICE__TIMES": "0"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "A2RL_GRADING__PLAIN_TWICE__TIMES=0: " in bad.stderr, bad.stderr
    assert "greater than or equal to 1" in bad.stderr and "Traceback" not in bad.stderr
    run = _a2rl(plugin_env, home, "run", "--task", "echo", "--agent", "idle", "--budget", "3m",
                "--backend", "stamped-local", "--json", env=env)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["task"] == "echo" and summary["agent"] == "idle"
    assert summary["baseline_score"] is not None and summary["submissions"] == 0
    # nothing submitted: no final score, as `a2rl show` says (not the baseline's)
    assert summary["final_score"] is None and summary["final_note"] == "no submission"
    assert summary["tool_calls"] >= 2, (summary, run.stderr)  # read_file, budget_status
    shown = json.loads(_a2rl(plugin_env, home, "show", summary["run_id"], "--json").stdout)
    assert shown["status"] == "finished" and shown["task_id"] == "echo"
    # the job ran in the plugin backend's sandbox, and the baseline was graded by its engine
    assert shown["backend"] == "stamped-local"
    (job,) = shown["job_list"]
    assert job["exit_code"] == 0 and "A2RL_STAMPED_BY" in job["command"], job
    frozen = shown["evaluation_config"]
    assert (frozen["grading"]["engine"], frozen["engine_name"]) == ("plain-twice",
                                                                    "plain-twice")
    assert frozen["grading"]["plain_twice"] == {"times": 3}  # its section, frozen with the run
    assert frozen["engine_version"].startswith("0.1.0+"), frozen
    engines = _python(plugin_env, home, BASELINE_ENGINES, summary["run_id"])
    assert engines.returncode == 0, engines.stderr
    used, outputs = json.loads(engines.stdout)
    assert used == [["plain-twice", frozen["engine_version"]]]
    # its section reached the evaluation: each completion said three times
    assert len(outputs) == 16 + 24
    for said in outputs:
        once = said[:(len(said) - 2) // 3]
        assert len(said) % 3 == 2 and said == f"{once} {once} {once}", said
    # the agent's own transcript, recorded by its connector and read back by its own parser
    conv = _python(plugin_env, home, TRANSCRIPT_OF_RUN, summary["run_id"])
    assert conv.returncode == 0, conv.stderr
    shown_conv = json.loads(conv.stdout)
    assert shown_conv["format"] == "idle"
    tools = [(m["tool"], m["call_id"] is not None) for m in shown_conv["messages"]
             if m["role"] == "tool"]
    assert tools == [("read_file", True), ("budget_status", True),  # paired with the server's
                     ("run_command", True)]
    assert shown_conv["messages"][-1]["text"] == "idle: stopped after 3 steps"
    said = next(m["result"] for m in shown_conv["messages"] if m["tool"] == "run_command")
    assert "made by the test's stamp" in json.dumps(said), said  # its section reached the job


def test_the_plugin_is_not_in_the_test_environment(plugin_env: Path) -> None:
    """Installed only in the throwaway venv: here the task does not exist."""
    assert "echo" not in task_ids()
    with pytest.raises(KeyError, match="unknown task 'echo'"):
        get_task("echo")
    assert issubclass(TASKS.load("arith"), Task)  # type: ignore[arg-type]


def test_a_broken_installed_plugin_is_one_line_and_the_rest_still_list(plugin_env: Path,
                                                                        tmp_path: Path) -> None:
    (site,) = (plugin_env.parent.parent / "lib").glob("python*/site-packages")
    _write_dist(site, "a2rl-broken-plugin", {"a2rl.tasks": {"broken": "gone_a2rl_mod:Task"},
                                              "a2rl.agents": {"ghost": "gone_a2rl_mod:Agent"}})
    home = tmp_path / "home"
    listed = _a2rl(plugin_env, home, "tasks")
    assert listed.returncode == 0, listed.stderr
    assert {"arith", "echo"} <= {line.split()[0] for line in listed.stdout.splitlines()}
    warnings = listed.stderr.splitlines()
    assert len(warnings) == 1, listed.stderr
    (warning,) = warnings
    assert warning.startswith("warning: task 'broken' (entry point of a2rl-broken-plugin, "
                              "gone_a2rl_mod:Task) cannot be loaded: ModuleNotFoundError")
    created = _a2rl(plugin_env, home, "create", "--task", "broken")
    assert created.returncode == 2 and "Traceback" not in created.stderr
    assert "task 'broken' (entry point of a2rl-broken-plugin" in created.stderr
    agents = _a2rl(plugin_env, home, "agents", "--json")
    ghost = next(r for r in json.loads(agents.stdout) if r["name"] == "ghost")
    assert not ghost["installed"] and "cannot be loaded" in ghost["title"]
    assert any(r["name"] == "idle" and r["installed"] for r in json.loads(agents.stdout))
