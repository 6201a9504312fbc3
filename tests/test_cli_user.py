"""The CLI as a user meets it: what each command prints, and every mistake a user can make
answered by one `a2rl: ...` line on stderr, a non-zero exit, no traceback and no file made.

In-process through typer's CliRunner (the same `a2rl.cli.errors.A2rlGroup.main` the installed
command runs), except where only a real process shows it (--version, -h, a store that cannot be
opened).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlmodel import select
from typer.testing import CliRunner

from a2rl.cli import app
from a2rl.server import create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Evaluation, EvaluationKind, Job, Run, Store, Submission, ToolCall

A2RL = str(Path(sys.executable).parent / "a2rl")


@pytest.fixture(autouse=True)
def _keep_logging() -> Iterator[None]:
    """The CLI configures the root logger and A2RL_LOG_LEVEL once per command; in-process
    that would outlive the test."""
    root, level = logging.getLogger(), logging.getLogger().level
    saved = os.environ.get("A2RL_LOG_LEVEL")
    yield
    root.setLevel(level)
    if saved is None:
        os.environ.pop("A2RL_LOG_LEVEL", None)
    else:
        os.environ["A2RL_LOG_LEVEL"] = saved


def _env(home: Path, **extra: str) -> dict[str, str | None]:
    """Only this home: no A2RL_* of the caller's."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(home), COLUMNS="200", **extra)  # help without wrapped choices
    return env


def cli(home: Path, *args: str, **extra: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=_env(home, **extra))


def proc(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(home), **extra)
    return subprocess.run([A2RL, *args], env=env, capture_output=True, text=True, timeout=120)


def one_line_error(result, *needles: str) -> str:  # type: ignore[no-untyped-def]
    """The result of a user's mistake: exit 2, one `a2rl:` line, the needles in it."""
    err = result.stderr
    assert result.exit_code if hasattr(result, "exit_code") else result.returncode, err
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 2, (code, err, getattr(result, "exception", None))
    assert "Traceback" not in err + result.stdout, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("a2rl: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- the program itself ----------------------------------------------------------------------

def test_version_help_completion_and_choices(tmp_path: Path) -> None:
    p = proc(tmp_path, "--version")
    assert p.returncode == 0 and re.fullmatch(r"a2rl \d+\.\d+\.\d+\S*\n", p.stdout), p
    p = cli(tmp_path, "-h")
    assert p.exit_code == 0 and "Usage" in p.stdout and "--install-completion" in p.stdout
    assert "--quiet" in p.stdout and "--log-level" in p.stdout
    create = cli(tmp_path, "create", "-h").stdout
    for choice in ("local|docker", "heldout|paper", "none|bridge", "counted|paused"):
        assert choice in create, (choice, create)
    assert "md|html|json" in cli(tmp_path, "report", "-h").stdout
    assert "over [tasks.<id>] in config.toml" in create  # not eaten as rich markup
    for command in ("create", "report", "runs", "serve", "view"):
        text = cli(tmp_path, command, "-h").stdout
        assert "<bool>" not in text and "--help" in text, text  # a flag takes no value
    assert "created|running|finalizing|finished|failed" in cli(tmp_path, "runs", "-h").stdout
    completion = CliRunner().invoke(app, [], prog_name="a2rl", env={
        "_A2RL_COMPLETE": "complete_bash", "COMP_WORDS": "a2rl create --backend ",
        "COMP_CWORD": "3"})
    assert completion.stdout.split() == ["local", "docker"], completion.stdout
    assert list(tmp_path.iterdir()) == []


def test_logging_is_configured_once_and_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our handler goes first, so the MCP server's own setup (INFO, per request) is a no-op and
    its per-request lines stay off the terminal unless asked for."""
    import io

    from mcp.server.mcpserver.utilities.logging import configure_logging

    from a2rl.cli.program import configure_logging as _configure_logging

    root = logging.getLogger()
    handlers = list(root.handlers)
    chatty = logging.getLogger("mcp.server.lowlevel.server")
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        root.handlers.clear()
        _configure_logging("warning")
        configure_logging("INFO")
        chatty.setLevel(logging.INFO)  # a logger with a level of its own propagates too
        chatty.info("Processing request of type CallToolRequest")
        chatty.warning("something to see")
        _configure_logging("info")
        chatty.info("now shown")
    finally:
        chatty.setLevel(logging.NOTSET)
        root.handlers[:] = handlers
    assert len(terminal.getvalue().splitlines()) == 2, terminal.getvalue()
    assert "Processing request" not in terminal.getvalue()
    assert "something to see" in terminal.getvalue() and "now shown" in terminal.getvalue()
    assert os.environ["A2RL_LOG_LEVEL"] == "info"  # what a child `a2rl serve` inherits


# -- mistakes ----------------------------------------------------------------------------------

def test_unknown_run_everywhere_creates_no_store(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for args in (["show", "r-nope"], ["report", "r-nope"], ["finish", "r-nope"],
                 ["export", "r-nope"], ["serve", "--run", "r-nope"]):
        one_line_error(cli(home, *args), "run 'r-nope' does not exist")
    assert cli(home, "runs").stdout.startswith("no runs yet")
    assert json.loads(cli(home, "runs", "--json").stdout) == []
    assert json.loads(cli(home, "compare", "--json").stdout)["rows"] == []
    assert not home.exists(), list(home.rglob("*"))


def test_unusable_store_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a2rl.db").write_bytes(b"this is not a database" * 100)
    p = proc(tmp_path, "show", "r-1")
    one_line_error(p, "cannot open the store", "a2rl.db", "not a database")
    r = cli(tmp_path, "runs", A2RL_DB_URL="postgresql://me:hunter2@127.0.0.1:1/a2rl")
    line = one_line_error(r, "cannot open the store", "127.0.0.1:1", "refused")
    assert "hunter2" not in line


def test_commands_that_read_leave_another_programs_sqlite_file_alone(tmp_path: Path) -> None:
    """As `a2rl view`: a SQLite file of another schema is refused in one line, unchanged (no
    a2rl table made in it, not switched to WAL)."""
    import hashlib
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
        conn.execute("INSERT INTO photos (path) VALUES ('a.jpg')")
    conn.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    url = f"sqlite:///{other}"
    for args in (["runs"], ["show", "r-1"], ["report", "r-1"], ["compare"], ["gc"],
                 ["export", "r-1"], ["finish", "r-1"], ["serve", "--run", "r-1"]):
        one_line_error(cli(tmp_path, *args, A2RL_DB_URL=url), str(other), "not an a2rl store",
                       "nothing was changed")
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, -shm
    with sqlite3.connect(other) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    conn.close()
    assert tables == ["photos"]


def test_bad_settings_name_the_file_key_and_what_is_allowed(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nbackend = "dockr"\n')
    one_line_error(cli(tmp_path, "runs"), str(config), "sandbox.backend = 'dockr'",
                   "'local' or 'docker'")
    one_line_error(cli(tmp_path, "config", "show"), str(config), "backend")
    config.write_text('backend = "dockr"\n')  # a deprecated flat name: named as written
    one_line_error(cli(tmp_path, "runs"), str(config), ": backend = 'dockr'")
    config.write_text('[sandbox]\nbackend = "local\n')
    one_line_error(cli(tmp_path, "runs"), str(config), "TOML")
    config.unlink()
    one_line_error(cli(tmp_path, "runs", A2RL_SERVER__PORT="80a"), "A2RL_SERVER__PORT='80a'",
                   "integer")
    one_line_error(cli(tmp_path, "runs", A2RL_HTTP_PORT="80a"), "A2RL_HTTP_PORT='80a'",
                   "integer")  # a deprecated name: the error alone, as written
    one_line_error(cli(tmp_path, "runs", A2RL_GRADING__ENGINE="fast"),
                   "A2RL_GRADING__ENGINE='fast'", "'vllm'")


def test_unknown_keys_bad_sizes_and_counts_out_of_range_are_named(tmp_path: Path) -> None:
    """A typo in config.toml is not ignored; sizes are parsed as the sandbox parses them and
    counts are range-checked when the settings load, not when a run first needs them."""
    config = tmp_path / "config.toml"
    config.write_text('sandbox_memroy = "8g"\n')
    line = one_line_error(cli(tmp_path, "runs"), str(config), "'sandbox_memroy' is not a setting",
                          "did you mean 'sandbox_memory'")  # the deprecated name is closest
    assert "config show" in line
    config.write_text('[sandbox.local]\nmemroy = "8g"\n')  # a typo in a section
    one_line_error(cli(tmp_path, "runs"), str(config), "'sandbox.local.memroy' is not a setting",
                   "'sandbox.local.memory'")
    config.write_text('[a2rl.sandbox]\nbackend = "local"\n[a2rl.judge]\nmodle = "m"\n'
                      '\n[tasks.arith]\n')
    one_line_error(cli(tmp_path, "runs"), "'judge.modle' is not a setting", "'judge.model'")
    config.write_text("[a2rl]\nbase_model = \"\"\n\n[a2rl.sandbox]\ndisk = \"1g\"\n")  # in [a2rl]
    assert cli(tmp_path, "runs").exit_code == 0
    config.write_text('base_model = ""\n[a2rl]\nbase_model = "x"\n')  # beside [a2rl]
    one_line_error(cli(tmp_path, "runs"), "'base_model' is not a setting")
    for text, needles in (
            ('[sandbox.local]\nmemory = "lots"', ("sandbox.local.memory = 'lots'", "not a size",
                                                 "16g")),
            ('[sandbox.docker]\nshm_size = "2 gigs"', ("sandbox.docker.shm_size", "not a size")),
            ('[sandbox]\ndisk = "-1g"', ("sandbox.disk = '-1g'", "cannot be negative")),
            ("[sandbox.local]\npids_limit = -4", ("sandbox.local.pids_limit = -4",
                                                  "greater than or equal to 0")),
            ("[judge]\nconcurrency = 0", ("judge.concurrency = 0", "greater than or equal to 1")),
            ("[server]\nport = 99999", ("server.port = 99999", "less than or equal to 65535")),
            ("[judge]\ntimeout_s = 0", ("judge.timeout_s = 0", "greater than 0")),
            ('sandbox_memory = "lots"', ("sandbox_memory = 'lots'", "not a size"))):
        config.write_text(text + "\n")
        one_line_error(cli(tmp_path, "runs"), str(config), *needles)
    config.write_text("[sandbox]\nfile_size = \"1.5g\"\n[sandbox.local]\nmemory = 1048576\n")
    shown = json.loads(cli(tmp_path, "config", "show", "--json").stdout)
    assert shown["sandbox"]["local"]["memory"]["value"] == "1048576"  # a TOML integer: bytes
    assert shown["sandbox"]["file_size"]["value"] == "1.5g"
    config.unlink()
    one_line_error(cli(tmp_path, "runs", A2RL_SANDBOX__LOCAL__MEMORY="lots"),
                   "A2RL_SANDBOX__LOCAL__MEMORY='lots'", "not a size")
    one_line_error(cli(tmp_path, "runs", A2RL_JUDGE__CONCURRENCY="0"),
                   "A2RL_JUDGE__CONCURRENCY=0", "greater than or equal to 1")
    one_line_error(cli(tmp_path, "runs", A2RL_SANDBOX__DOCKER__MEMROY="1g"),
                   "A2RL_SANDBOX__DOCKER__MEMROY='1g'", "not a setting")


def test_bad_flags_are_refused_before_anything_is_made(tmp_path: Path) -> None:
    home = tmp_path / "home"
    one_line_error(cli(home, "create", "--budget", "0"), "--budget", "got '0'")
    one_line_error(cli(home, "create", "--budget", "soon"), "bad duration 'soon'")
    one_line_error(cli(home, "create", "--max-submissions", "-1"), "--max-submissions")
    one_line_error(cli(home, "run", "--max-submissions", "0"), "--max-submissions")
    one_line_error(cli(home, "create", "--backend", "dockr"), "--backend", "'docker'")
    one_line_error(cli(home, "create", "--network", "host"), "--network", "'bridge'")
    one_line_error(cli(home, "create", "--task", "nope"), "unknown task 'nope'")
    one_line_error(cli(home, "run", "--gpus", "all"), "--gpus")
    one_line_error(cli(home, "report", "r-1", "--format", "pdf"), "--format", "'md'")
    one_line_error(cli(home, "report", "r-1", "--out", str(tmp_path / "no" / "r.md")),
                   "does not exist", str(tmp_path / "no"))
    one_line_error(cli(home, "fleet", "--plan", str(tmp_path / "plan.toml")), "plan.toml",
                   "No such file")
    one_line_error(cli(home, "import", str(tmp_path / "a.tar.gz")), "no such file")
    one_line_error(cli(home, "runs", "--status", "done"), "--status")
    one_line_error(cli(home, "frobnicate"), "No such command")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        one_line_error(cli(home, "serve", "--http", "--port", port), "cannot listen", port)
    demo = cli(home, "demo", "--task", "nope")
    one_line_error(demo, "unknown task 'nope'")
    assert "creating a run" not in demo.stderr
    assert not home.exists(), list(home.rglob("*"))


def test_ports_are_range_checked_and_bound_before_serving(tmp_path: Path) -> None:
    """A port out of range (flag, file or variable), a port in use or a host that is not this
    machine's: one line, and `view` says "serving" only once it holds its port."""
    home = tmp_path / "home"
    for args in (["serve", "--http", "--port", "99999"], ["view", "--port", "99999"],
                 ["view", "--port", "-1"], ["serve", "--http", "--port", "0"]):
        one_line_error(cli(home, *args), "--port", "65535" if "99999" in args else "1")
    one_line_error(cli(home, "runs", A2RL_SERVER__PORT="99999"), "A2RL_SERVER__PORT=99999",
                   "less than or equal to 65535")
    assert not home.exists(), list(home.rglob("*"))
    (tmp_path / "config.toml").write_text("[server]\nport = 99999\n")
    one_line_error(cli(tmp_path, "config", "show"), str(tmp_path / "config.toml"),
                   "server.port = 99999", "65535")
    (tmp_path / "config.toml").unlink()
    Store(f"sqlite:///{tmp_path / 'a2rl.db'}").close()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        r = cli(tmp_path, "view", "--port", port)
        one_line_error(r, f"cannot listen on 127.0.0.1:{port}", "in use")
        assert "serving" not in r.stderr
    r = cli(tmp_path, "view", "--host", "nosuch.invalid")
    one_line_error(r, "cannot listen on nosuch.invalid:8766")
    assert "serving" not in r.stderr
    assert "8766" in cli(tmp_path, "view", "-h").stdout  # its own default, beside serve's 8765
    # A free port: "serving" names it, and the page answers there.
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = str(probe.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    p = subprocess.Popen([A2RL, "view", "--port", port], env={**env, "A2RL_HOME": str(tmp_path)},
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        assert f"serving the store read-only at http://127.0.0.1:{port}/" in line, line
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).text == "ok"
        rebound = httpx.get(f"http://127.0.0.1:{port}/", timeout=10,
                            headers={"Host": f"rebound.example:{port}"})
        assert rebound.status_code == 400  # a DNS name rebound to loopback reads nothing
    finally:
        p.terminate()
        p.wait(30)


def test_key_value_flags_share_one_parser(tmp_path: Path) -> None:
    """`-T` and `--agent-option` read KEY=VALUE with the one parser: the same one-line error,
    naming the flag, before anything is made."""
    home = tmp_path / "home"
    one_line_error(cli(home, "run", "--agent-option", "steps"), "--agent-option 'steps'",
                   "use --agent-option key=value")
    one_line_error(cli(home, "fleet", "--name", "f", "--task", "arith", "--agent",
                       "reference", "--agent-option", "=3"), "--agent-option '=3'")
    one_line_error(cli(home, "create", "-T", "data_dir"), "-T 'data_dir'", "use -T key=value")
    assert not home.exists(), list(home.rglob("*"))


def test_run_checks_the_agents_key_before_creating_the_run(tmp_path: Path) -> None:
    from a2rl.clients.orchestrator import check_options
    from a2rl.clients.registry import get_connector
    from a2rl.store import RunConfig

    home = tmp_path / "home"
    no_keys = {k: "" for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY",
                               "GEMINI_API_KEY")}
    one_line_error(cli(home, "run", "--agent", "llm"), "--model", "--llm-base-url")
    one_line_error(cli(home, "run", "--agent", "llm", "--model", "m"), "--llm-base-url")
    for agent, var in (("claude-code", "ANTHROPIC_API_KEY"), ("codex", "OPENAI_API_KEY"),
                       ("gemini-cli", "GEMINI_API_KEY")):
        connector = get_connector(agent)
        if not connector.installed():  # the key check comes after "is it installed"
            continue
        one_line_error(cli(home, "run", "--agent", agent, **no_keys), var)
        check_options(RunConfig(agent=agent, agent_options={var.lower(): "k"}), connector)
    assert not home.exists(), list(home.rglob("*"))
    for agent, var in (("claude-code", "ANTHROPIC_API_KEY"), ("codex", "OPENAI_API_KEY"),
                       ("gemini-cli", "GEMINI_API_KEY")):
        c = get_connector(agent)
        assert any(var in m for m in c.missing_config({}, None)) or os.environ.get(var)
        assert c.missing_config({var.lower(): "k"}, None) == []


def test_crashed_agent_stderr_tail() -> None:
    from a2rl.clients.orchestrator import stderr_tail

    err = b"starting\n" + b"".join(b"  at frame %d\n" % i for i in range(40)) + \
        b"\nError: 401 Unauthorized: invalid x-api-key\n\n"
    tail = stderr_tail(err)
    assert tail[-1] == "Error: 401 Unauthorized: invalid x-api-key"
    assert len(tail) == 12 and "starting" not in tail


# -- what the listing commands show -------------------------------------------------------------

T0 = datetime(2026, 12, 2, 13, 5, tzinfo=UTC)


@pytest.fixture
def listed(tmp_path: Path) -> Iterator[tuple[Path, Store]]:
    """Two recorded runs (rows as the server writes them) and one made and never used."""
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        s.add(Run(id="r-aaaa", task_id="arith", agent="reference", agent_version="0.1",
                  workspace="/w/a", budget_s=1200, status="finished", created_at=T0,
                  started_at=T0, deadline=T0 + timedelta(minutes=20),
                  ended_at=T0 + timedelta(minutes=3, seconds=20), end_reason="agent finished",
                  baseline_dev=0.1, baseline_test=0.12, final_score=0.5,
                  final_submission_id="s-1", seed=7, backend="docker",
                  config={"network": True, "container": {"image": "a2rl-test",
                                                         "gpus": ["0", "1"]}}))
        s.add(Run(id="r-bbbb", task_id="gsm8k", agent="llm", driver_model="qwen",
                  workspace="/w/b", budget_s=7200, status="running",
                  created_at=T0 + timedelta(hours=1), started_at=T0 + timedelta(hours=1)))
        s.add(Run(id="r-cccc", task_id="arith", workspace="/w/c", budget_s=600,
                  created_at=T0 + timedelta(hours=2)))
        s.add_all(ToolCall(run_id="r-aaaa", tool="run_command", started_at=T0,
                           is_error=i == 0) for i in range(3))
        s.add(Job(id="j-1", run_id="r-aaaa", command="python code/train.py --epochs 1",
                  state="exited", exit_code=0, started_at=T0,
                  ended_at=T0 + timedelta(seconds=75)))
        s.add(Submission(id="s-1", run_id="r-aaaa", path="output/ckpt", status="graded",
                         created_at=T0 + timedelta(minutes=2)))
        s.add(Submission(id="s-2", run_id="r-aaaa", path="base_model", status="refused",
                         error="Traceback ...\nValueError: train before submitting",
                         created_at=T0 + timedelta(minutes=3)))
        s.add(Evaluation(run_id="r-aaaa", submission_id="s-1", split="dev", score=0.45))
        # The baseline's and the final test evaluation's per-item results (6 and 25 of 50
        # right), from which show and runs pair the improvement's interval.
        s.add(Evaluation(run_id="r-aaaa", submission_id="s-1", kind=EvaluationKind.submission,
                         split="test", score=0.5, status="done", n_items=50,
                         items=[{"id": f"q{i}", "correct": i < 25} for i in range(50)]))
        s.add(Evaluation(kind=EvaluationKind.baseline, split="test", score=0.12, status="done",
                         n_items=50, items=[{"id": f"q{i}", "correct": i % 8 == 0 and i < 48}
                                for i in range(50)]))
    yield tmp_path, store
    store.close()


def test_runs_table_filters_and_json(listed: tuple[Path, Store]) -> None:
    home, _ = listed
    out = cli(home, "runs").stdout.splitlines()
    assert out[0].split()[:4] == ["RUN", "TASK", "AGENT", "STATUS"], out
    assert [line.split()[0] for line in out[1:]] == ["r-cccc", "r-bbbb", "r-aaaa"]
    a = next(line for line in out if line.startswith("r-aaaa"))
    assert "reference" in a and "2026-12-02 13:05" in a and "3m 20s" in a and "0.500" in a
    assert [x["id"] for x in json.loads(cli(home, "runs", "--task", "arith", "--json")
                                        .stdout)] == ["r-cccc", "r-aaaa"]
    assert [x["id"] for x in json.loads(cli(home, "runs", "--agent", "llm", "--json")
                                        .stdout)] == ["r-bbbb"]
    assert [x["id"] for x in json.loads(cli(home, "runs", "--status", "finished", "--json")
                                        .stdout)] == ["r-aaaa"]
    limited = cli(home, "runs", "--limit", "1")
    assert len(limited.stdout.splitlines()) == 2 and "2 older runs" in limited.stderr
    one_line_error(cli(home, "runs", "--agent", "nobody"), "no runs match")  # exit 2
    row = next(x for x in json.loads(cli(home, "runs", "--json").stdout) if x["id"] == "r-aaaa")
    shown = json.loads(cli(home, "show", "r-aaaa", "--json").stdout)
    assert {k: shown[k] for k in row} == row
    assert row["improvement"]["estimate"] == pytest.approx(0.38)  # 0.5 - 0.12, paired
    assert row["improvement"]["n_paired"] == 50 and row["improvement"]["low"] < 0.38
    assert row["tool_calls"] == 3 and row["tool_errors"] == 1 and row["submissions"] == 2


def test_show_prints_settings_counts_jobs_submissions_scores(listed: tuple[Path, Store]) -> None:
    home, _ = listed
    r = cli(home, "show", "r-aaaa")
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    for block in ("settings", "counts", "scores", "cost ledger", "jobs", "submissions"):
        assert re.search(rf"^{block}$", text, re.M), (block, text)
    assert re.search(r"tool calls\s+3 \(1 errors\)", text)
    assert re.search(r"ran\s+2026-12-02 13:05 to 2026-12-02 13:08 \(3m 20s of a 20m 00s "
                     r"budget\)", text), text
    assert re.search(r"baseline\s+dev 0.100\s+test 0.120", text)
    assert re.search(r"max submissions\s+unlimited", text) and re.search(r"seed\s+7", text)
    assert re.search(r"backend\s+docker \(image a2rl-test, GPUs 0,1\)", text)
    assert re.search(r"network\s+bridge", text)
    assert re.search(r"^  ?profile\s+a2rl$", text, re.M), text
    # a hand-made row: no CPU or memory measured, no ledger stored
    assert re.search(r"j-1\s+exited exit 0\s+1m 15s\s+cpu\s+-\s+peak\s+–\s+python code/train.py",
                     text), text
    assert re.search(r"ledger\s+none stored", text), text
    assert re.search(r"s-1\s+graded\s+output/ckpt\s+dev 0.450\s+test 0.500", text)
    assert "train before submitting" in text and "Traceback" not in text
    shown = json.loads(cli(home, "show", "r-aaaa", "--json").stdout)
    assert shown["submission_list"][0]["scores"] == {"dev": 0.45, "test": 0.5}
    assert shown["job_list"][0]["command"].startswith("python code/train.py")


def test_compare_skips_unstarted_runs_and_shows_no_spread_for_one(
        listed: tuple[Path, Store]) -> None:
    home, _ = listed
    doc = json.loads(cli(home, "compare", "--json").stdout)
    assert {r["run_id"] for r in doc["rows"]} == {"r-aaaa", "r-bbbb"}
    text = cli(home, "compare").stdout
    assert "r-cccc" not in text, text
    board = [line for line in text.splitlines() if re.match(r"\s*\d+\. ", line)]
    assert len(board) == 1 and not any("±" in line for line in board), text
    # the run still going is no result: listed apart, with why, and out of the leaderboard
    assert re.search(r"^r-bbbb .*\(still running\)$", text, re.M), text
    assert "gsm8k llm qwen: not counted: 1 still running" in text
    assert "leaderboard gsm8k" not in text
    both = json.loads(cli(home, "compare", "--include-unfinished", "--json").stdout)
    assert all(r["counted"] for r in both["rows"]) and set(both["leaderboard"]) == {
        "arith", "gsm8k"}


def test_compare_keeps_profiles_apart(listed: tuple[Path, Store]) -> None:
    """A paper run of the same task and agent is its own group and leaderboard, never averaged
    with the a2rl runs; --profile keeps one profile; show prints the profile."""
    home, store = listed
    with store.session() as s:
        for i, final in enumerate((0.9, 0.7)):
            s.add(Run(id=f"r-pap{i}", task_id="arith", agent="reference", workspace="/w/p",
                      budget_s=1200, status="finished", created_at=T0, started_at=T0,
                      ended_at=T0 + timedelta(minutes=5), profile="paper",
                      baseline_test=0.2, final_score=final, final_submission_id=f"s-p{i}"))
    doc = json.loads(cli(home, "compare", "--json").stdout)
    groups = {(g["task"], g["profile"], g["agent"]): g for g in doc["groups"]}
    assert groups[("arith", "paper", "reference")]["runs"] == 2
    assert groups[("arith", "paper", "reference")]["final_mean"] == pytest.approx(0.8)
    assert groups[("arith", "a2rl", "reference")]["runs"] == 1
    assert groups[("arith", "a2rl", "reference")]["final_mean"] == pytest.approx(0.5)
    assert set(doc["leaderboard"]) == {"arith", "arith (paper)"}  # gsm8k's run still runs
    assert {r["run_id"]: r["profile"] for r in doc["rows"]}["r-pap0"] == "paper"
    only = json.loads(cli(home, "compare", "--profile", "paper", "--json").stdout)
    assert {r["run_id"] for r in only["rows"]} == {"r-pap0", "r-pap1"}
    assert {r["run_id"] for r in json.loads(cli(home, "compare", "--profile", "a2rl",
                                                "--json").stdout)["rows"]} == {"r-aaaa",
                                                                                "r-bbbb"}
    text = cli(home, "compare").stdout
    assert "leaderboard arith (paper)" in text and re.search(r"r-pap0\s+arith\s+paper", text)
    assert re.search(r"^  ?profile\s+paper$", cli(home, "show", "r-pap0").stdout, re.M)
    bad = cli(home, "compare", "--profile", "harness")
    assert bad.exit_code != 0 and "harness" in bad.stderr


# -- a run made for real ------------------------------------------------------------------------

def test_serve_refuses_an_ended_run_and_untouched_runs_have_no_revision(
        tmp_path: Path) -> None:
    from a2rl.analysis import build_report

    settings = Settings(home=tmp_path, db_url=f"sqlite:///{tmp_path / 'a2rl.db'}")
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="fixture", baseline=False).run
    finish_run(settings, store, run.id)
    r = cli(tmp_path, "serve", "--run", run.id)
    one_line_error(r, f"run {run.id} has ended", "record is closed")
    with store.session() as s:
        assert s.exec(select(ToolCall)).all() == []
    shown = json.loads(cli(tmp_path, "show", run.id, "--json").stdout)
    assert shown["tool_calls"] == 0 and shown["revisions"] == 0
    rep = build_report(store, run.id)
    assert rep.metrics.revisions == 0 and rep.code_history == []
    store.close()
