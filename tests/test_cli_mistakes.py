"""Every command with its common mistakes, as real processes: unknown run ids, unknown tasks, no
model hub, a dead agent endpoint or one refusing the key, an agent's unknown or mistyped
options, task data missing or not in the task's schema, bad or missing files, bad option
values, filters that match nothing. Each is answered by exactly one `a2rl: ...` line on stderr
(with --quiet: no progress lines), exit 2, no traceback, and the store keeps what it had: no
run made, the existing runs untouched, no run folder left.

One process per case, several at a time (each mostly waits on its imports), against one store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from a2rl.store import Run, Store

from .fake_openai import FakeOpenAI

A2RL = str(Path(sys.executable).parent / "a2rl")
T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
DEAD_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    needle: str  # what the one line must say
    home: str = "main"  # "main": the shared store; "broken": a home with a broken config.toml
    env: tuple[tuple[str, str], ...] = ()  # variables added to the command's environment


def case(needle: str, *args: str, home: str = "main", **env: str) -> Case:
    return Case(args, needle, home, tuple(env.items()))


def _cases(files: Path, llm_url: str) -> list[Case]:
    llm = ("run", "--agent", "llm", "--model", "m", "--llm-base-url", llm_url)
    # a base model of one's own: a folder (its config.json is all the check reads)
    own = ("-T", f"base_model={files / 'model'}")
    return [
        # unknown run ids
        case("'r-nope' does not exist", "show", "r-nope"),
        case("'r-nope' does not exist", "finish", "r-nope"),
        case("'r-nope' does not exist", "report", "r-nope"),
        case("'r-nope' does not exist", "export", "r-nope"),
        case("r-nope", "serve", "--run", "r-nope"),
        # unknown tasks, agents, values
        case("nope", "create", "--task", "nope"),
        case("nope", "run", "--task", "nope"),
        case("nope", "demo", "--task", "nope"),
        case("nope", "tasks", "nope"),
        case("nope", "run", "--agent", "nope"),
        case("--budget", "create", "--budget", "abc"),
        case("--budget", "run", "--budget", "-5m"),
        case("--repeats", "run", "--repeats", "0"),
        case("--max-submissions", "create", "--max-submissions", "0"),
        case("--gpus", "create", "--gpus", "first"),
        case("--status", "runs", "--status", "nope"),
        case("--format", "report", "r-keep", "--format", "pdf"),
        case("--profile", "tasks", "arith", "--profile", "nope"),
        case("--port", "serve", "--http", "--port", "70000"),
        case("--seed", "run", "--seed", "abc"),
        case("--grading-clock", "run", "--grading-clock", "never"),
        case("nope", "create", "-T", "nope=1"),
        # a backend or an engine no registry knows, from the settings: before the run is made
        case("A2RL_SANDBOX__BACKEND='vm': unknown, use 'local' or 'docker'", "create",
             A2RL_SANDBOX__BACKEND="vm"),
        case("A2RL_GRADING__ENGINE='nope': unknown, use 'auto', 'transformers', 'static' or "
             "'vllm'", "run", A2RL_GRADING__ENGINE="nope"),
        case("--backend", "create", "--backend", "vm"),
        case("--agent-option", "run", "--agent-option", "=3"),
        case("--nope", "runs", "--nope"),
        # the agent's model: no hub for the base model, a dead endpoint
        case("-T data_dir=FOLDER (a2rl tasks gsm8k)", "create", "--task", "gsm8k"),
        case("Qwen/Qwen2.5-1.5B", "run", "--task", "gsm8k"),
        case("127.0.0.1:9", "run", "--agent", "llm", "--model", "m", "--llm-base-url", DEAD_URL),
        case("--llm-base-url", "run", "--agent", "llm", "--model", "m"),
        # bad or missing files
        case("missing.tar.gz", "import", str(files / "missing.tar.gz")),
        case("not-an-archive", "import", str(files / "not-an-archive.tar.gz")),
        case("missing.toml", "fleet", "--plan", str(files / "missing.toml")),
        case("broken.toml", "fleet", "--plan", str(files / "broken.toml")),
        # an output path under a file (a missing folder is made; this can't be)
        case("not-an-archive", "report", "r-keep", "--out",
             str(files / "not-an-archive.tar.gz" / "r.md")),
        case("not-an-archive", "export", "r-keep", "--out",
             str(files / "not-an-archive.tar.gz" / "r.tar.gz")),
        case("config.toml", "runs", home="broken"),
        case("config.toml", "create", home="broken"),
        # the task's data, before anything is made: the same line from create and fleet
        # (and run: they share `a2rl.cli.preflight`)
        case("/nonexistent/train.jsonl not found", "create", "--task", "gsm8k",
             "-T", "data_dir=/nonexistent", *own),
        case("/nonexistent/train.jsonl not found", "fleet", "--name", "f", "--task", "gsm8k",
             "--agent", "reference", "-T", "data_dir=/nonexistent", *own),
        # the agent's options: unknown keys, wrong types, a key variable named and unset
        case("its options are: llm_base_url", *llm, "--agent-option", "base_url=x"),
        case("llm_max_turns='abc'", *llm, "--agent-option", "llm_max_turns=abc"),
        case("'reference' has no option 'bogus'", "fleet", "--name", "f", "--task", "arith",
             "--agent", "reference", "--agent-option", "bogus=1"),
        case("NOPE_UNSET in the environment", *llm, "--llm-api-key-env", "NOPE_UNSET"),
        # the endpoint's answer to an authenticated request
        case("HTTP 401 (Incorrect API key provided", *llm, OPENAI_API_KEY="sk-wrong"),
        # filters that match nothing: one rule
        case("no runs match", "runs", "--task", "gsm8k"),
    ]


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One store with a finished and a running run, and the files the cases name."""
    main = tmp_path_factory.mktemp("mistakes-home")
    store = Store(f"sqlite:///{main / 'a2rl.db'}")
    with store.session() as s:
        s.add(Run(id="r-keep", task_id="arith", agent="reference", workspace=str(main / "w"),
                  budget_s=1200, status="finished", created_at=T0, started_at=T0,
                  deadline=T0 + timedelta(minutes=20), ended_at=T0 + timedelta(minutes=5),
                  end_reason="agent finished", baseline_test=0.0, final_score=0.9))
        s.add(Run(id="r-live", task_id="arith", workspace=str(main / "w2"), budget_s=600,
                  status="running", created_at=T0, started_at=T0,
                  deadline=T0 + timedelta(days=3650)))
    broken = tmp_path_factory.mktemp("broken-home")
    (broken / "config.toml").write_text("backend = [unclosed\n")
    files = tmp_path_factory.mktemp("mistake-files")
    (files / "not-an-archive.tar.gz").write_text("just text\n")
    (files / "broken.toml").write_text("[fleet\nname = \n")
    (files / "model").mkdir()
    (files / "model" / "config.json").write_text('{"model_type": "llama"}')
    return {"main": main, "broken": broken, "files": files, "store": store}


def _rows(store: Store) -> list[tuple[Any, ...]]:
    with store.session() as s:
        return [(r.id, r.status, r.final_score, r.ended_at, r.end_reason)
                for r in s.exec(select(Run).order_by(Run.id)).all()]


def _run(home: Path, args: tuple[str, ...],
         extra: tuple[tuple[str, str], ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("A2RL_") and k not in ("OPENAI_API_KEY", "NOPE_UNSET")}
    # no model hub, whatever this machine can reach: the missing-hub cases must not download
    env.update(A2RL_HOME=str(home), HF_HUB_OFFLINE="1", COLUMNS="200", **dict(extra))
    return subprocess.run([A2RL, "--quiet", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(600)
def test_every_mistake_is_one_line_exit_2_and_loses_nothing(homes: dict[str, Any]) -> None:
    before = _rows(homes["store"])
    with FakeOpenAI(["done"], api_key="sk-right") as fake:  # answers 401 to another key
        cases = _cases(homes["files"], fake.base_url)
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda c: _run(homes[c.home], c.args, c.env), cases))
        assert not fake.requests  # refused before the run: no chat completion was asked for
    problems = []
    for c, p in zip(cases, results, strict=True):
        lines = p.stderr.strip().splitlines()
        ok = (p.returncode == 2 and "Traceback" not in p.stderr + p.stdout and len(lines) == 1
              and lines[0].startswith("a2rl: ") and c.needle in lines[0])
        if not ok:
            problems.append(f"a2rl {' '.join(c.args)}: exit {p.returncode}, "
                            f"stderr {p.stderr[-600:]!r}")
    assert not problems, "\n".join(problems)
    assert _rows(homes["store"]) == before  # no run made, none changed
    assert not list((homes["main"] / "runs").glob("r-*"))  # and no run folder left
    assert not (homes["broken"] / "a2rl.db").exists()  # a refused command makes no store
