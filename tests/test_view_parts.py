"""`a2rl view`'s parts without a browser: transcripts of each agent, the read-only store, the
token, the plots' ticks and curves, and the pages' speed on a synthetic run.

The CLI transcripts in tests/fixtures/transcripts are real stdout of the pinned Claude Code,
Codex, Gemini, OpenCode and OpenHands CLIs driven by tests/test_agent_clis.py's script
(list_files, run_command "echo hello", budget_status, a refused submit_checkpoint) against the
fake model APIs, with the temporary paths replaced.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient

from a2rl.analysis import build_report
from a2rl.analysis.plots import (
    curve_values,
    nice_ticks,
    score_plot,
    time_ticks,
    timeline_plot,
)
from a2rl.analysis.web import StoreOpenError, create_app, open_readonly
from a2rl.analysis.web.app import loopback_hosts, resolve_token
from a2rl.analysis.web.transcripts import attach_calls, parse
from a2rl.store import Store

from .conftest import require

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
SCRIPTED = ["list_files", "run_command", "budget_status", "submit_checkpoint"]


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("view_scale", ROOT / "bench" / "view_scale.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini-cli", "opencode",
                                   "openhands"])
def test_each_cli_transcript_becomes_one_message_list(agent: str) -> None:
    fmt, msgs = parse(next(FIXTURES.glob(f"{agent}.*")).read_bytes())  # OpenHands': not JSONL
    assert fmt == agent
    tools = [m for m in msgs if m.role == "tool"]
    assert [m.tool for m in tools] == SCRIPTED
    assert tools[1].arguments == {"command": "echo hello"} and "hello" in (tools[1].result or "")
    assert [m.is_error for m in tools] == [False, False, False, True]
    assert any(m.role == "assistant" and "All done." in m.text for m in msgs)


def _row(i: int, tool: str, error: bool = False) -> SimpleNamespace:
    return SimpleNamespace(id=i, tool=tool, arguments={"n": i}, result_summary=f"server {i}",
                           is_error=error, error="refused by the server" if error else None,
                           duration_ms=5.0)


def test_calls_attach_to_the_server_rows_in_order() -> None:
    _, msgs = parse((FIXTURES / "claude-code.jsonl").read_bytes())
    # The server also recorded a call the transcript lacks (between the 2nd and the 3rd).
    rows = [_row(1, "list_files"), _row(2, "run_command"), _row(3, "read_file"),
            _row(4, "budget_status"), _row(5, "submit_checkpoint", error=True)]
    out = [m for m in attach_calls(msgs, rows) if m.role == "tool"]
    assert [(m.tool, m.call_id) for m in out] == [
        ("list_files", 1), ("run_command", 2), ("read_file", 3), ("budget_status", 4),
        ("submit_checkpoint", 5)]
    assert out[0].result == "server 1" and out[4].result == "refused by the server"
    assert out[4].is_error and out[0].arguments == {"n": 1}


def test_unknown_output_is_shown_as_text() -> None:
    fmt, msgs = parse(b"plain words\nno json here\n")
    assert fmt == "text" and "no json here" in msgs[0].text
    assert parse(None) == ("none", [])


def test_the_store_opens_read_only_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "a2rl.db"
    with pytest.raises(StoreOpenError, match="nothing was created"):
        open_readonly(f"sqlite:///{missing}")
    assert not missing.parent.exists()
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreOpenError, match="not an a2rl store"):
        open_readonly(f"sqlite:///{other}")
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    Store(url).close()
    ro = open_readonly(url)
    with pytest.raises(Exception, match="readonly"):
        ro.put_blob(b"no writes")
    ro.close()


def test_view_cli_on_a_missing_store_says_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(tmp_path / "home"), A2RL_DB_URL=f"sqlite:///{tmp_path / 'x.db'}")
    p = subprocess.run([str(Path(sys.executable).parent / "a2rl"), "view", "--port", "9"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "no store at" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "x.db").exists()


def test_the_token_guards_every_request(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    Store(url).close()
    c = TestClient(create_app(url, token="s3cret"))
    assert c.get("/").status_code == 401
    assert c.get("/?token=wrong").status_code == 401
    assert c.get("/run/x/activity", headers={"Authorization": "Bearer s3cret"}).status_code == 404
    assert c.get("/?token=s3cret").status_code == 200
    assert c.get("/compare").status_code == 400  # the cookie from the line above lets it in
    assert resolve_token("127.0.0.1", None) is None
    assert resolve_token("0.0.0.0", None) and resolve_token("0.0.0.0", "t") == "t"


def test_on_loopback_only_loopback_host_names_are_answered(tmp_path: Path) -> None:
    """DNS rebinding: another site's name pointed at 127.0.0.1 must not read the store."""
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    Store(url).close()
    c = TestClient(create_app(url, hosts=loopback_hosts("127.0.0.1")),
                   base_url="http://127.0.0.1:8766")
    for host in ("127.0.0.1:8766", "localhost:8766", "[::1]:8766", "LOCALHOST", "127.0.0.1"):
        assert c.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("rebound.example:8766", "127.0.0.1.rebound.example", "localhost.example",
                 "[::2]:8766", ""):
        r = c.get("/", headers={"Host": host})
        assert r.status_code == 400 and "Invalid host header" in r.text, host
    assert "[::1]" in loopback_hosts("::1") and "127.0.0.2" in loopback_hosts("127.0.0.2")


def test_ticks_are_round() -> None:
    ticks = nice_ticks(0.137, 0.862)
    assert ticks == [0.2, 0.4, 0.6, 0.8]
    assert time_ticks(3 * 3600) == [0, 1800, 3600, 5400, 7200, 9000, 10800]
    assert all(t % 60 == 0 for t in time_ticks(1000))


def _is_round(ticks: list[float]) -> bool:
    """Evenly spaced by 1, 2, 2.5 or 5 times a power of ten, each a multiple of that step."""
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}
    if len(ticks) < 2 or len(steps) != 1:
        return False
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    return (any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5))
            and all(math.isclose(t / step, round(t / step), abs_tol=1e-6) for t in ticks))


def test_the_html_report_is_the_viewers_sections_with_round_ticks(tmp_path: Path) -> None:
    """`a2rl report --format html` renders the viewer's templates and plots: round ticks, the
    final test score marked, the jobs' training curves, and still no script or network."""
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    rid = _bench().build_synthetic(store, calls=60, jobs=6, subs=4)  # type: ignore[attr-defined]
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(tmp_path), A2RL_DB_URL=url)
    out = tmp_path / "report.html"
    p = subprocess.run([str(Path(sys.executable).parent / "a2rl"), "report", rid, "--format",
                        "html", "--out", str(out)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    score = page[page.index('<svg id="score-plot"'):]
    score = score[:score.index("</svg>")]
    yticks = [float(v) for v in re.findall(r'class="ytick"[^>]*>([^<]+)<', score)]
    assert _is_round(yticks) and yticks[0] <= 0.3 and yticks[-1] >= 0.42, yticks
    assert not _is_round([0.23, 0.29, 0.36])  # what the report's own axis used to print
    timeline = page[page.index('<svg id="timeline-plot"'):]
    assert re.findall(r'class="xtick"[^>]*>([^<]+)<', timeline[:timeline.index("</svg>")]) == [
        "0.0s"] + [f"{h}h00m" for h in range(1, 9)]  # the 8-hour run, a tick per hour
    assert 'class="final"' in score and "final test 0.420" in score
    assert page.count('class="plot curve"') == 6 and 'aria-label="loss curve"' in page
    assert "Training curves" in page and f"loss · job {rid}-j5" in page
    assert "<script" not in page and not re.search(r"https?://", page)
    assert 'href="#job-' not in page  # no job is listed on this page: nothing to link to
    for sub in range(4):  # the score points and the routes link to the code history
        assert f'id="sub-{rid}-s{sub}"' in page and f'href="#sub-{rid}-s{sub}"' in page


def test_training_curves_from_trl_and_plain_logs() -> None:
    log = ("{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.1}\n"
           "step 2 loss=1.9\n{'loss': 1.5, 'epoch': 0.3}\n"
           "{'train_runtime': 9.1, 'train_loss': 1.9}\nreward: 0.25\n")
    v = curve_values(log)
    assert v["loss"] == [2.31, 1.9, 1.5] and v["reward"] == [0.25]
    assert v["train_loss"] == [1.9]


def test_the_score_plot_shows_the_final_test_score(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    rid = _bench().build_synthetic(store, calls=30, jobs=3, subs=3)  # type: ignore[attr-defined]
    rep = build_report(store, rid)
    svg = score_plot(rep.trajectory, rep.timeline.end_s, 0.42)
    assert "final test 0.420" in svg and svg.count('class="point"') == 3
    timeline = timeline_plot(rep.timeline)  # 8 hours: a tick per hour, labelled 0s, 1h00m...
    assert re.findall(r'class="xtick"[^>]*>([^<]+)<', timeline) == [
        "0.0s"] + [f"{h}h00m" for h in range(1, 9)]
    assert f'href="#job-{rid}-j0"' in timeline and f'href="#sub-{rid}-s2"' in timeline
    store.close()


def test_make_bench_runs_the_viewer_bench() -> None:
    require(shutil.which("make") is not None, "make is not installed: apt-get install make")
    p = subprocess.run(["make", "-n", "-C", str(ROOT), "bench"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert ".venv/bin/python bench/view_scale.py" in p.stdout.splitlines()


def test_pages_stay_fast_on_a_large_run(tmp_path: Path) -> None:
    """Loosely the bench's bounds (bench/view_scale.py) on a fifth of its run."""
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    rid = _bench().build_synthetic(store, calls=2000, jobs=100,  # type: ignore[attr-defined]
                                   subs=10)
    store.close()
    c = TestClient(create_app(url))
    for path in ("/", f"/run/{rid}"):
        started = time.perf_counter()
        r = c.get(path)
        took = time.perf_counter() - started
        assert r.status_code == 200 and took < 3.0, (path, took)
    page = c.get(f"/run/{rid}").text
    assert page.count('<details class="call') == 200  # the first page of the conversation only
    assert "show the next 200 of 1800 remaining" in page
    for bad in ("offset=abc", "offset=-5", "offset=" + "9" * 40):  # never a server error
        assert c.get(f"/run/{rid}/conversation?{bad}").status_code == 200
    assert c.get(f"/run/{rid}/call/abc").status_code == 404
    assert c.get(f"/run/{rid}/revision/999999").status_code == 404
    for what in ("call", "revision"):  # past the database's integers: no row, not a 500
        assert c.get(f"/run/{rid}/{what}/999999999999999999999").status_code == 404
    # A revision opened directly is a page of the viewer; the run page loads its fragment.
    rev = re.findall(r'<details class="revision" id="rev-(\d+)" data-diff="([^"]+)"', page)[0]
    assert rev[1] == f"/run/{rid}/revision/{rev[0]}?fragment=1"
    fragment = c.get(rev[1]).text
    assert fragment.startswith('<pre class="diff">') and "<html" not in fragment
    direct = c.get(f"/run/{rid}/revision/{rev[0]}").text
    assert direct.startswith("<!DOCTYPE html>") and "<style>" in direct and "<nav>" in direct
    assert f"Revision {rev[0]}: <code>code/train.py</code>" in direct
    assert '<pre class="diff">' in direct and f'<a href="/run/{rid}">run {rid}</a>' in direct
    assert c.get(f"/run/{rid}/job/nope").status_code == 404
    more = c.get(f"/run/{rid}/conversation?offset=1800").text
    assert more.count('<details class="call') == 200 and "load-more" not in more
    # A failed job's traceback is a failure whose evidence links to the job (its own page
    # when the job is not among those listed on the run page).
    bottom = c.get(f"/run/{rid}/report").json()["bottom"]
    assert "RuntimeError: synthetic failure" in bottom
    assert f'href="#job-{rid}-j24" class="evidence" data-job="/run/{rid}/job/{rid}-j24"' in bottom
    assert "RuntimeError: synthetic failure" in c.get(f"/run/{rid}/job/{rid}-j24").text


def test_pages_on_each_dialect_read_only(db_url: str) -> None:
    """SQLite and PostgreSQL: the pages render from a store opened read-only; writes fail."""
    store = Store(db_url)
    rid = _bench().build_synthetic(store, calls=40, jobs=4, subs=3)  # type: ignore[attr-defined]
    store.close()
    c = TestClient(create_app(db_url))
    assert rid in c.get("/").text
    page = c.get(f"/run/{rid}")
    assert page.status_code == 200 and "Conversation" in page.text
    report = c.get(f"/run/{rid}/report").json()
    assert "score-plot" in report["top"] and "Failures" in report["bottom"]
    ro = open_readonly(db_url)
    with pytest.raises(Exception, match="(?i)read-?only"):
        ro.put_blob(b"no writes")
    ro.close()


def test_a_postgres_database_that_is_not_a_store_is_left_alone(postgres: object) -> None:
    from sqlalchemy import create_engine, inspect

    url = postgres.create_database()  # type: ignore[attr-defined]
    with pytest.raises(StoreOpenError, match="not an a2rl store"):
        open_readonly(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == []
    engine.dispose()


def test_compare_counts_per_item_agreement(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    bench = _bench()
    # Two runs whose final test evaluations grade the same items with different answers.
    a = bench.build_synthetic(store, calls=20, jobs=2, subs=2, run_id="a")  # type: ignore[attr-defined]
    b = bench.build_synthetic(store, calls=20, jobs=2, subs=3, run_id="b",  # type: ignore[attr-defined]
                              final_seed=7)
    store.close()
    ia = {i["id"]: bool(i["correct"]) for i in bench._items(999, 0.42)}  # type: ignore[attr-defined]
    ib = {i["id"]: bool(i["correct"]) for i in bench._items(7, 0.42)}  # type: ignore[attr-defined]
    both = sum(ia[k] and ib[k] for k in ia)
    neither = sum(not ia[k] and not ib[k] for k in ia)
    only_a = sum(ia[k] and not ib[k] for k in ia)
    only_b = sum(ib[k] and not ia[k] for k in ia)
    assert only_a and only_b and both and neither  # the seeds make every count non-zero
    page = TestClient(create_app(url)).get(f"/compare?run={a}&run={b}").text
    assert (f"{len(ia)} items graded in every run's final evaluation: all runs right on "
            f"{both}, all wrong on {neither}, disagreeing on {only_a + only_b}") in page
    assert (f"<tr><td>{a}</td><td>{b}</td><td>{len(ia)}</td><td>{both + neither}</td>"
            f"<td>{only_a}</td><td>{only_b}</td></tr>") in page
    base = bench._items(0, 0.3)  # type: ignore[attr-defined]
    items = bench._items(999, 0.42)  # type: ignore[attr-defined]
    gained = sum(i["correct"] and not j["correct"] for i, j in zip(items, base, strict=True))
    lost = sum(j["correct"] and not i["correct"] for i, j in zip(items, base, strict=True))
    run_page = TestClient(create_app(url)).get(f"/run/{a}").text
    assert (f"+{gained} right that the base got wrong</span>, <span class=\"bad\">−{lost} "
            "wrong that the base got right") in run_page


def test_the_fleet_view_shows_one_fleets_runs(tmp_path: Path) -> None:
    """`/?fleet=NAME` and `a2rl view --fleet NAME` (the app's default fleet): that fleet's
    runs only, each run of a fleet tagged with a link to its fleet on the full list."""
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    bench = _bench()
    for rid, fleet in (("f1", "sweep"), ("f2", "sweep"), ("g1", "other"), ("solo", None)):
        bench.build_synthetic(store, calls=5, jobs=1, subs=1, run_id=rid,  # type: ignore[attr-defined]
                              fleet_id=fleet)
    store.close()

    def listed(html: str) -> list[str]:
        return re.findall(r'<td><a href="/run/([^"]+)">', html)

    everything = TestClient(create_app(url)).get("/").text
    assert sorted(listed(everything)) == ["f1", "f2", "g1", "solo"]
    assert everything.count('<a class="tag" href="/?fleet=sweep">sweep</a>') == 2
    one = TestClient(create_app(url)).get("/?fleet=sweep")
    assert one.status_code == 200 and "<h1>Fleet sweep</h1>" in one.text
    assert sorted(listed(one.text)) == ["f1", "f2"] and 'class="tag"' not in one.text
    default = TestClient(create_app(url, fleet="other")).get("/").text  # a2rl view --fleet other
    assert listed(default) == ["g1"] and "<h1>Fleet other</h1>" in default
    asked = TestClient(create_app(url, fleet="other")).get("/?fleet=sweep").text
    assert sorted(listed(asked)) == ["f1", "f2"]  # the query's fleet over the default
    none = TestClient(create_app(url)).get("/?fleet=nosuch").text
    assert "No runs in this store yet for fleet nosuch" in none and listed(none) == []
    page = TestClient(create_app(url)).get("/run/f1").text
    assert '<a href="/?fleet=sweep">fleet sweep</a>' in page


def test_calls_are_numbered_within_their_run(tmp_path: Path) -> None:
    """A run's first call is #1 on every page that numbers calls, though another run's calls
    came first in the store (ids are the store's; links still use them)."""
    from a2rl.server.recording import end_call, start_call
    from a2rl.store import Revision, Run

    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    with store.session() as s:
        for rid in ("r-first", "r-second"):
            s.add(Run(id=rid, task_id="fixture", workspace=str(tmp_path / rid), budget_s=60))
    for _ in range(44):
        end_call(store, start_call(store, "r-first", "budget_status", {}, "memory"),
                 time.perf_counter(), "{}", None)
    first = start_call(store, "r-second", "run_command", {"command": "echo hi"}, "memory")
    end_call(store, first, time.perf_counter(), '{"status":"exited"}', None)
    with store.session() as s:
        s.add(Revision(run_id="r-second", path="code/a.py", blob_sha=store.put_blob(b"x\n"),
                       source="tool", tool_call_id=first, size=2))
    store.close()
    assert first == 45
    c = TestClient(create_app(url))
    call_page = c.get(f"/run/r-second/call/{first}").text
    assert "Tool call #1: <code>run_command</code>" in call_page
    run_page = c.get("/run/r-second").text
    assert '<span class="muted"> · #1</span>' in run_page and "#45<" not in run_page
    assert f'data-call="/run/r-second/call/{first}">call #1</a>' in run_page
    revs = re.findall(r'id="rev-(\d+)"', run_page)
    assert ">call #1</a>" in c.get(f"/run/r-second/revision/{revs[0]}").text
