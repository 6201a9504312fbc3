"""From the toy to one's own setup: one's data, endpoint and agent options, each checked before
a run is made and told truthfully after it (issue 45).

Cheap by design: the data, options and endpoint checks are pure functions or one request to a
local OpenAI-compatible server (tests/fake_openai.py); a run's folder and gc use the fixture
task (no model); the one real run is in test_llm_agent / test_orchestrator style, once. The
refusals as a user meets them (one line, exit 2, nothing made) are cases of
tests/test_cli_mistakes.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from a2rl.cli import app
from a2rl.clients.options import AgentOptions, AgentOptionsError
from a2rl.clients.options_doc import options_markdown
from a2rl.clients.orchestrator import error_line, returned_end
from a2rl.llm import endpoint_refusal
from a2rl.server import create_run, finish_run
from a2rl.server.gc import collect_garbage
from a2rl.settings import Settings
from a2rl.store import AgentStatus, Run, Store
from a2rl.store.owners import process_owner
from a2rl.tasks import TaskDataError, get_task
from a2rl.tools.sandbox import volume

from .conftest import require_bwrap
from .fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]


def write_gsm8k(folder: Path, n_train: int, n_test: int, bad_row: int | None = None) -> Path:
    """GSM8K files of `n_train` and `n_test` rows in the dataset's schema (row `bad_row` of
    train without its `#### N` line)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        rows = [{"question": f"What is {i} + 1?",
                 "answer": f"{i} + 1 = <<{i}+1={i + 1}>>{i + 1}"
                           + ("" if split == "train" and i + 1 == bad_row else f"\n#### {i + 1}")}
                for i in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def cli(home: Path, *args: str):  # type: ignore[no-untyped-def]
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(home), COLUMNS="200")
    return CliRunner().invoke(app, list(args), env=env)


# -- the task tells the truth about its data ------------------------------------------------------

def test_own_gsm8k_data_give_the_runs_splits_and_its_task_md(tmp_path: Path) -> None:
    """300 train and 40 test rows of one's own: 225 train, 75 dev (the last quarter below
    400 rows), 40 test, in TASK.md, `a2rl tasks gsm8k -T data_dir=` and the check."""
    settings = Settings(home=tmp_path / "home")
    folder = write_gsm8k(tmp_path / "gsm8k", 300, 40)
    task = get_task("gsm8k").with_options({"data_dir": str(folder)})
    splits = task.check_data(settings)
    assert {k: v.n_items for k, v in splits.items()} == {"train": 225, "dev": 75, "test": 40}
    assert "rows 225-299" in splits["dev"].source and "last quarter" in splits["dev"].source
    md = task.task_md(settings)
    assert "225 training problems" in md and "75 problems, rows 225-299" in md
    assert "the 40 problems of the dataset's test split" in md
    assert "7273" not in md and "1319" not in md and "last quarter of fewer than 400" in md
    paper = get_task("gsm8k", "paper").with_options({"data_dir": str(folder)})
    assert {k: v.n_items for k, v in paper.check_data(settings).items()} == {
        "train": 300, "dev": 75, "test": 40}
    assert "all 300 problems" in paper.task_md(settings)
    shown = cli(tmp_path / "home", "tasks", "gsm8k", "-T", f"data_dir={folder}", "--json")
    data = json.loads(shown.stdout)["data"]
    assert data["state"] == "ready" and data["splits"]["train"]["n_items"] == 225
    text = cli(tmp_path / "home", "tasks", "gsm8k", "-T", f"data_dir={folder}").stdout
    assert re.search(r"dev\s+75\s+hidden", text), text


@pytest.mark.parametrize("make,needle", [
    (lambda d: write_gsm8k(d, 20, 4, bad_row=3), "row 3 is not in the dataset's schema"),
    (lambda d: d, "train.jsonl not found (-T data_dir="),
    (lambda d: write_gsm8k(d, 1, 4), "a run needs at least 2"),
    (lambda d: write_gsm8k(d, 8, 0), "test.jsonl has no rows"),
])
def test_bad_gsm8k_data_are_one_line(tmp_path: Path, make, needle: str) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "data"
    folder.mkdir()
    make(folder)
    task = get_task("gsm8k").with_options({"data_dir": str(folder)})
    with pytest.raises(TaskDataError) as info:
        task.check_data(Settings(home=tmp_path / "home"))
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_tasks_lists_what_the_installed_data_give(tmp_path: Path) -> None:
    """ALFWorld and WebShop show their games and goals (not 0), and say how to fetch them."""
    out = cli(tmp_path / "home", "tasks", "--json")
    rows = {r["task_id"]: r for r in json.loads(out.stdout)}
    assert rows["alfworld"]["splits"] == {"train": 3553, "dev": 140, "test": 134}
    assert rows["alfworld"]["data"]["state"] == "not_downloaded"
    assert rows["alfworld"]["data"]["fetch"] == "a2rl alfworld download"
    assert rows["webshop"]["splits"]["train"] == 10587
    assert "gdown" in rows["webshop"]["data"]["fetch"]
    assert rows["arith"]["data"]["state"] == "generated"
    text = cli(tmp_path / "home", "tasks").stdout
    assert "[train ~3553, dev ~140, test ~134]" in text
    assert "not downloaded: a2rl alfworld download" in text
    assert "[train 6000, dev 200, test 500]" in text  # generated: exact, no ~


def test_readme_task_table_states_the_full_datas_splits() -> None:
    """The README's table gives each split's size first, as the task's spec states it."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| task | level | visible (train)"):]
    rows = [r for r in table.splitlines()[2:] if r.startswith("| `")]
    assert len(rows) == 8
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        task = get_task(cells[0].strip("`").split("`")[0])
        for cell, split in zip(cells[2:5], ("train", "dev", "test"), strict=True):
            first = int(re.search(r"\d[\d,]*", cell).group().replace(",", ""))  # type: ignore[union-attr]
            assert first == task.spec.splits[split].n_items, (task.spec.id, split, cell)


# -- an agent's options, typed and documented ----------------------------------------------------

def test_agent_options_are_typed_and_refused_by_name() -> None:
    from a2rl.clients.llm import LlmAgentOptions
    from a2rl.clients.options import OpenAIProviderOptions
    from a2rl.clients.reference import ReferenceOptions

    with pytest.raises(AgentOptionsError, match=r"agent 'llm' has no option 'base_url' "
                       r"\(--agent-option\); its options are: llm_base_url, llm_api_key_env"):
        LlmAgentOptions.parse("llm", {"base_url": "http://x/v1"})
    with pytest.raises(AgentOptionsError, match=r"llm_max_turns='abc': .*integer.*int >= 1"):
        LlmAgentOptions.parse("llm", {"llm_max_turns": "abc"})
    with pytest.raises(AgentOptionsError, match=r"stages='grpo'.*one of sft, sft\+grpo"):
        ReferenceOptions.parse("reference", {"stages": "grpo"})
    with pytest.raises(AgentOptionsError, match="it takes no options"):
        AgentOptions.parse("by-hand", {"x": "1"})
    parsed = LlmAgentOptions.parse("llm", {"llm_max_turns": "3", "llm_temperature": ""})
    assert parsed.llm_max_turns == 3 and parsed.llm_temperature is None
    secret = OpenAIProviderOptions.describe()
    assert next(r for r in secret if r["name"] == "openai_api_key")["default"] is None


def test_docs_agent_options_are_written_from_the_models() -> None:
    """docs/agent-options.md is `python -m a2rl.clients.options_doc`'s output, and every option a
    connector reads is one its model declares."""
    from a2rl.clients.options_doc import builtin_rows
    from a2rl.clients.registry import BUILTIN_AGENTS

    rows = builtin_rows()
    assert (ROOT / "docs" / "agent-options.md").read_text() == options_markdown(rows), \
        "docs/agent-options.md is stale: python -m a2rl.clients.options_doc > docs/agent-options.md"
    models = {name: model for name, _title, model in rows}
    for name, target in BUILTIN_AGENTS.items():
        module = target.split(":")[0].removeprefix("a2rl.clients.")
        folder = ROOT / "clients" / module  # a connector may be a package of modules
        files = sorted(folder.glob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]
        source = "\n".join(f.read_text() for f in files)
        read = set(re.findall(r"options(?:\.get\(|\[)\"([a-z_]+)\"", source))
        assert read <= set(models[name].model_fields), (name, read - set(models[name].model_fields))


# -- the endpoint's answer to an authenticated request ------------------------------------------

def test_endpoint_refusal_reads_401_403_404_and_passes_a_good_key() -> None:
    with FakeOpenAI(["done"], api_key="sk-right") as fake:
        wrong = endpoint_refusal(fake.base_url, "KEY", environ={"KEY": "sk-wrong"})
        assert wrong is not None and "HTTP 401 (Incorrect API key provided: sk-***)" in wrong
        assert wrong.endswith("with the key in KEY")
        none = endpoint_refusal(fake.base_url, "KEY", environ={})
        assert none is not None and "with no key: KEY is not set" in none
        assert "--llm-api-key-env" in none
        assert endpoint_refusal(fake.base_url, "KEY", environ={"KEY": "sk-right"}) is None
        path = endpoint_refusal(fake.base_url.removesuffix("/v1"), "KEY",
                                environ={"KEY": "sk-right"})
        assert path is not None and "HTTP 404" in path and "ends in /v1" in path
        assert not fake.requests  # no chat completion was asked for: the check costs nothing
    dead = endpoint_refusal("http://127.0.0.1:9/v1", "KEY", environ={})
    assert dead is not None and "nothing answers at 127.0.0.1:9" in dead


# -- the end cause, stored -----------------------------------------------------------------------

def test_a_turn_limit_is_the_budgets_end_and_an_error_line_is_one_safe_line() -> None:
    assert returned_end(None) == (AgentStatus.finished, None)
    status, error = returned_end("turn limit: stopped after 3 turns (llm_max_turns)")
    assert status == AgentStatus.budget and error == \
        "turn limit: stopped after 3 turns (llm_max_turns)"
    assert returned_end("spending limit: $2.00 of $1.00") == (AgentStatus.budget, None)
    assert error_line("Traceback ...\n  at x\nError: HTTP 401\x1b[31m red\n\n") == \
        "Error: HTTP 401\\x1b[31m red"
    assert len(error_line("x" * 5000)) == 300


# -- nothing left by a failed create; gc removes what the store does not know ---------------------

def test_a_failed_create_leaves_no_folder_and_no_mount(settings: Settings, store: Store,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from .fixture_task import FixtureTask

    def broken(self, settings: Settings) -> list[dict]:  # type: ignore[no-untyped-def]
        raise RuntimeError("the data broke while the workspace was written")

    monkeypatch.setattr(FixtureTask, "train_items", broken)
    before = set(settings.runs_dir.glob("r-*"))  # the session's home holds others' runs
    with pytest.raises(RuntimeError, match="data broke"):
        create_run(settings, store, task_id="fixture", budget="10m", baseline=False)
    assert set(settings.runs_dir.glob("r-*")) == before
    with open("/proc/self/mountinfo") as f:
        mounted = [line.split()[4] for line in f if str(settings.runs_dir) in line]
    assert all(any(m.startswith(f"{b}/") for b in before) for m in mounted), mounted


def test_gc_removes_unknown_run_folders_after_the_grace_never_a_live_one(
        tmp_path: Path) -> None:
    require_bwrap()
    # a home of its own: gc removes what this test's store does not know, and the session's
    # shared home holds other tests' runs and checkpoint copies
    settings = Settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path / 'gc.db'}")
    store = Store(settings.database_url)
    made = create_run(settings, store, task_id="fixture", budget="10m", baseline=False)
    known = Path(made.run.workspace).parent
    with store.session() as s:  # a run whose row is gone (a store replaced): its folder is
        s.delete(s.get(Run, made.run.id))  # unknown, its volume still mounted
    old = time.time() - 7200
    folders = {name: settings.runs_dir / name for name in ("r-old", "r-young", "r-live", "r-dead")}
    for name, folder in folders.items():
        (folder / "workspace").mkdir(parents=True)
        if name in ("r-live", "r-dead"):  # `maker`: whose folder it is while it is being made
            (folder / "maker").write_text(process_owner() if name == "r-live" else
                                          process_owner().rsplit(":", 2)[0] + ":999999999:1")
        for path in (folder / "maker", folder):
            if path.exists() and name != "r-young":
                os.utime(path, (old, old))
    os.utime(known, (old, old))
    result = collect_garbage(settings, store, grace_s=3600)
    gone = {Path(p).name for p in result["removed"]}
    assert gone == {"r-old", "r-dead", known.name}, result
    assert folders["r-young"].exists() and folders["r-live"].exists() and not known.exists()
    assert not os.path.ismount(known / "workspace") and not volume.loops_of(
        known / volume.IMAGE_NAME)
    store.close()


# -- connect your own agent: the README's client, run against a real `a2rl serve` ----------------

def test_the_example_mcp_client_runs_against_a2rl_serve(settings: Settings,
                                                        store: Store) -> None:
    require_bwrap()
    made = create_run(settings, store, task_id="fixture", budget="10m", baseline=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url,
               PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    try:
        p = subprocess.run([sys.executable, str(ROOT / "examples" / "mcp_client.py"),
                            made.run.id], env=env, capture_output=True, text=True, timeout=180)
    finally:  # its sandbox started at the first call: stopped, its volume released
        finish_run(settings, store, made.run.id)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "tool run_command(command, wait_s)" in p.stdout and "# fixture" in p.stdout
    assert "exit 0: train.jsonl" in p.stdout and "s of 600 s left" in p.stdout
    from .helpers import calls

    assert [c.tool for c in calls(store, made.run.id)] == [
        "read_file", "run_command", "budget_status"]
    # the README shows the same client: its `work` is the example's, line for line
    readme = (ROOT / "README.md").read_text()
    example = (ROOT / "examples" / "mcp_client.py").read_text()
    work = example[example.index("async def work"):example.index("\n\n\nasync def main")]
    assert work in readme
