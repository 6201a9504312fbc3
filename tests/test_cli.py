"""The command line as a user runs it: settings precedence, create/show/runs/finish, --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from a2rl.settings import load_settings, parse_duration

from .baseline_seed import (  # noqa: F401  (fixtures)
    base_model_dir,
    baseline_rows,
    seed_base_model,
    seed_baseline,
)

A2RL = str(Path(sys.executable).parent / "a2rl")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(home), **extra)
    return env


def _seeded(home: Path, rows: list, model_dir: Path) -> Path:
    """`home` with the tiny base model and a store holding the default task's baseline (both
    made once per session)."""
    home.mkdir(parents=True, exist_ok=True)
    seed_baseline(f"sqlite:///{home / 'a2rl.db'}", rows)
    return seed_base_model(home, model_dir)


def _a2rl(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([A2RL, *args], env=_env(home, **extra), capture_output=True,
                          text=True, timeout=120)


def test_settings_precedence(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[server]\nport = 9000\nmax_wait_s = 10\n[sandbox]\nbackend = "docker"\n')
    env = {"A2RL_HOME": str(tmp_path), "A2RL_SERVER__MAX_WAIT_S": "20"}
    settings, sources = load_settings({"sandbox.backend": "local"}, environ=env)
    assert settings.server.port == 9000 and sources["server.port"].startswith("file:")
    assert settings.server.max_wait_s == 20 and sources["server.max_wait_s"] == "env"
    assert settings.sandbox.backend == "local" and sources["sandbox.backend"] == "cli"
    assert sources["recording.output_head_bytes"] == "default"


def test_parse_duration() -> None:
    assert parse_duration("90") == 90 and parse_duration("20m") == 1200
    assert parse_duration("1h30m") == 5400
    for bad in ("", "abc", "0", "5x"):
        try:
            parse_duration(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


def test_config_show_json(tmp_path: Path) -> None:
    p = _a2rl(tmp_path, "config", "show", "--json", A2RL_SERVER__PORT="9123")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["server"]["port"] == {"value": 9123, "source": "env"}
    assert doc["db_url"]["value"].endswith("a2rl.db")


def test_create_show_runs_finish(tmp_path: Path, baseline_rows: list,  # noqa: F811
                                 base_model_dir: Path) -> None:  # noqa: F811
    _seeded(tmp_path, baseline_rows, base_model_dir)
    p = _a2rl(tmp_path, "create", "--task", "arith", "--budget", "10m", "--json")
    assert p.returncode == 0, p.stderr
    # progress while the baseline is scored, on stderr, and only the JSON on stdout
    assert "scoring the base model" in p.stderr and "baseline dev" in p.stderr, p.stderr
    created = json.loads(p.stdout)
    quiet = _a2rl(tmp_path, "--quiet", "create", "--task", "arith", "--json")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    other = json.loads(quiet.stdout)["run_id"]
    baseline = json.loads(_a2rl(tmp_path, "show", other, "--json").stdout)["baseline_test"]
    said = _a2rl(tmp_path, "finish", other)
    # the end reason, its kind and the final score (none: no submission) on the one line
    assert said.returncode == 0 and said.stdout.strip() == (
        f"run {other} finished (finished by a2rl finish; agent finished): no final score "
        f"(no submission), baseline test {baseline:.3f}"), said.stdout
    again = _a2rl(tmp_path, "finish", other)  # nothing to do: it says so, and when it ended
    assert again.returncode == 0 and again.stdout.startswith(
        f"run {other} had already finished at "), again.stdout
    assert created["token"].startswith("a2rl_") and created["budget_s"] == 600
    run_id = created["run_id"]
    shown = json.loads(_a2rl(tmp_path, "show", run_id, "--json").stdout)
    assert shown["id"] == run_id and shown["status"] == "created"
    assert "token_hash" not in shown and created["token"] not in json.dumps(shown)
    assert shown["baseline_test"] is not None and shown["baseline_test"] <= 0.05
    runs = json.loads(_a2rl(tmp_path, "runs", "--status", "created", "--json").stdout)
    assert [r["id"] for r in runs] == [run_id]
    done = _a2rl(tmp_path, "finish", run_id, "--json")
    assert done.returncode == 0, done.stderr
    finished = json.loads(done.stdout)  # the keys of `show --json`: no stored baseline as final
    assert finished["status"] == "finished" and finished["final_score"] is None
    assert finished["final_note"] == "no submission" and "token_hash" not in finished
    # No submission: no final score and no improvement (the harness's rule), with why; closed
    # by `a2rl finish` before its deadline, a result (its agent runs outside a2rl)
    shown = json.loads(_a2rl(tmp_path, "show", run_id, "--json").stdout)
    assert shown["final_score"] is None and shown["final_note"] == "no submission"
    assert shown["improvement"] is None
    assert shown["improvement_note"] == "no improvement: no submission"
    assert shown["end_kind"] == "agent_finished" and shown["result"] is True
    shown_lines = _a2rl(tmp_path, "show", run_id).stdout.splitlines()
    assert any(line.split() == ["improvement", "–", "(no", "submission)"]
               for line in shown_lines), shown_lines
    assert any(line.split() == ["final", "(test)", "-", "(no", "submission)"]
               for line in shown_lines), shown_lines


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    p = _a2rl(tmp_path, "create", "--task", "nope")
    assert p.returncode == 2 and "unknown task 'nope'" in p.stderr and "Traceback" not in p.stderr
    p = _a2rl(tmp_path, "create", "--budget", "soon")
    assert p.returncode == 2 and "bad duration" in p.stderr
    p = _a2rl(tmp_path, "show", "r-missing")
    assert p.returncode == 2 and "does not exist" in p.stderr
    p = _a2rl(tmp_path, "serve")
    assert p.returncode == 2 and "--run" in p.stderr


def test_gc_keeps_live_runs_and_final_copies(tmp_path: Path,
                                             baseline_rows: list,  # noqa: F811
                                             base_model_dir: Path) -> None:  # noqa: F811
    _seeded(tmp_path, baseline_rows, base_model_dir)
    ck = tmp_path / "checkpoints"
    (ck / "r-gone" / "s-1").mkdir(parents=True)
    (ck / "r-gone" / "s-1" / "model.safetensors").write_bytes(b"x" * 100)
    live = json.loads(_a2rl(tmp_path, "create", "--budget", "5m", "--json").stdout)["run_id"]
    (ck / live / "s-2").mkdir(parents=True)
    done = json.loads(_a2rl(tmp_path, "create", "--budget", "5m", "--json").stdout)
    _a2rl(tmp_path, "finish", done["run_id"])
    control = Path(done["workspace"]).parent / "control"
    control.mkdir(exist_ok=True)
    with open(control / "sparse.img", "wb") as f:  # 1 GB long, 3 MB written
        f.truncate(1 << 30)
        f.write(os.urandom(3 << 20))
    (control / "alias").hardlink_to(control / "sparse.img")  # one file, counted once
    expected = sum(os.lstat(p).st_blocks * 512 for p in [
        ck / "r-gone", ck / "r-gone" / "s-1", ck / "r-gone" / "s-1" / "model.safetensors", control,
        *(x for x in control.rglob("*") if x.name != "alias")])
    p = _a2rl(tmp_path, "gc", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    # what the disk got back, by blocks: not 100 bytes, not the 1 GB the sparse file claims
    assert doc["bytes_freed"] == expected and (3 << 20) < expected < (8 << 20), doc
    assert not (ck / "r-gone").exists() and not control.exists()
    assert (ck / live / "s-2").exists()
    _a2rl(tmp_path, "finish", live)


def test_report_and_compare_commands(tmp_path: Path) -> None:
    p = _a2rl(tmp_path, "report", "r-missing")
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr
    p = _a2rl(tmp_path, "report", "r-missing", "--format", "pdf")
    assert p.returncode == 2 and "--format" in p.stderr
    p = _a2rl(tmp_path, "compare", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["rows"] == []


def _key_problems(doc: Any, where: str) -> list[str]:
    """Where a document names a run other than by `run_id` or a task other than by `task_id`
    (an old key is allowed beside the new one, equal to it: the alias kept one release)."""
    if isinstance(doc, list):
        return [p for x in doc for p in _key_problems(x, where)]
    if not isinstance(doc, dict):
        return []
    found = [p for v in doc.values() for p in _key_problems(v, where)]
    if isinstance(doc.get("task"), str) and doc.get("task_id") != doc["task"]:
        found.append(f"{where}: 'task' {doc['task']!r} without an equal 'task_id'")
    if str(doc.get("id", "")).startswith("r-") and doc.get("run_id") != doc["id"]:
        found.append(f"{where}: run 'id' {doc['id']!r} without an equal 'run_id'")
    return found


def _named(doc: Any, key: str) -> set[str]:
    """The values of `key` anywhere in the document."""
    if isinstance(doc, list):
        return {v for x in doc for v in _named(x, key)}
    if not isinstance(doc, dict):
        return set()
    here = {str(doc[key])} if key in doc else set()
    return here | {v for x in doc.values() for v in _named(x, key)}


def test_every_json_output_names_runs_and_tasks_alike(tmp_path: Path,
                                                     baseline_rows: list,  # noqa: F811
                                                     base_model_dir: Path) -> None:  # noqa: F811
    """One convention over every command's `--json`: a run is `run_id`, a task `task_id`."""
    home, other = _seeded(tmp_path / "home", baseline_rows, base_model_dir), tmp_path / "other"
    created = _a2rl(home, "create", "--budget", "5m", "--json")
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["run_id"]
    docs: dict[str, Any] = {"create": json.loads(created.stdout)}
    archive = tmp_path / "r.tar.gz"
    commands = {"finish": ["finish", run_id], "runs": ["runs"], "show": ["show", run_id],
                "tasks": ["tasks"], "tasks --profile": ["tasks", "--profile", "paper"],
                "tasks arith": ["tasks", "arith", "--profile", "a2rl"],
                "compare": ["compare", run_id], "audit": ["audit", run_id],
                "export": ["export", run_id, "--out", str(archive)], "gc": ["gc"],
                "agents": ["agents"], "config show": ["config", "show"]}
    for name, args in commands.items():
        p = _a2rl(home, *args, "--json")
        assert p.returncode in (0, 1) and p.stdout, f"{name}: {p.stderr}"
        docs[name] = json.loads(p.stdout)
    p = _a2rl(other, "import", str(archive), "--json")
    assert p.returncode == 0, p.stderr
    docs["import"] = json.loads(p.stdout)
    problems = [p for name, doc in docs.items() for p in _key_problems(doc, name)]
    assert not problems, problems
    for name in ("create", "finish", "runs", "show", "compare", "audit", "export", "import"):
        assert run_id in _named(docs[name], "run_id"), name
    for name in ("create", "finish", "runs", "show", "compare", "tasks", "tasks --profile",
                 "tasks arith"):
        assert "arith" in _named(docs[name], "task_id"), name
