"""The grader's one-shot processes started plain (`python -I -m ...`) against warm (forked from
`grading.prefork`'s fork server), in one run.

One arith run (tiny base model) and one trained stand-in checkpoint; each round validates it
(`run_validator`, what every submit_checkpoint does) and evaluates it on dev (`run_worker`, 200
items, what every score does), once started plain (`A2RL_PREFORK=0`) and once warm, the two
interleaved so that a change of the machine's load hits both. The fork server is started
before the rounds (a server starts it at its first validation or evaluation); its start is
printed apart. Prints the median seconds of each and the ratio warm/plain.

    .venv/bin/python bench/prefork.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from a2rl.grading import prefork
from a2rl.grading.queue import run_worker
from a2rl.grading.validate import ValidationLimits, run_validator
from a2rl.grading.worker import WorkerSpec
from a2rl.server import create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_grading_checks import save_perturbed  # noqa: E402


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(rounds: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    settings = Settings(home=home)
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="arith", budget="1h", baseline=False).run
    base = Path(run.workspace) / "base_model"
    copy = save_perturbed(base, home / "trained", 0.3)
    spec = WorkerSpec(task_id="arith", checkpoint_dir=str(copy), split="dev",
                      settings=settings.model_dump(mode="json"))

    def validate() -> None:
        assert run_validator(copy, base, "trained", 0, ValidationLimits()).ok

    def evaluate() -> None:
        result, error, _ = run_worker(spec, timeout_s=600)
        assert result is not None, error

    started = time.perf_counter()
    server = prefork._fork_server()
    assert server is not None and server._ready.wait(300) and server.alive
    start_s = time.perf_counter() - started
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(rounds):
            for mode in ("plain", "warm"):
                if mode == "plain":
                    os.environ["A2RL_PREFORK"] = "0"
                else:
                    os.environ.pop("A2RL_PREFORK", None)
                times.setdefault((mode, "validation"), []).append(_timed(validate))
                times.setdefault((mode, "evaluation"), []).append(_timed(evaluate))
    finally:
        os.environ.pop("A2RL_PREFORK", None)
        finish_run(settings, store, run.id)
        store.close()
        shutil.rmtree(home, ignore_errors=True)
    print(f"fork server start (imports, once per server): {start_s:.2f} s")
    print(f"{'process':<12} {'plain s':>8} {'warm s':>8} {'warm/plain':>11}   ({rounds} rounds, "
          f"medians, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    for what in ("validation", "evaluation"):
        plain = statistics.median(times[("plain", what)])
        warm = statistics.median(times[("warm", what)])
        print(f"{what:<12} {plain:>8.2f} {warm:>8.2f} {warm / plain:>11.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    main(parser.parse_args().rounds)
