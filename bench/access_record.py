"""What the access recorder costs a job that opens many workspace files.

One run of the fixture task (local backend, its own workspace volume); a job makes N small
files, then jobs read them all and rewrite them all (one Python process each, open/close per
file), timed inside the job. Each timing is taken with the run's recorder watching, then
again after it is stopped (SIGTERM: it ends, the jobs run unrecorded), alternating, so that
the machine's load weighs on both alike. Also the recorder's own CPU for the whole run (its
journal's end line) and the number of rows the jobs' accesses made.

    .venv/bin/python bench/access_record.py [--n 20000] [--rounds 3] [--backend local]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from a2rl.sandbox import access
from a2rl.server import create_run, finish_run
from a2rl.server.run.hooks import build_runtime
from a2rl.settings import Settings
from a2rl.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tests.fixture_task  # noqa: E402, F401  (registers the fixture task)

MAKE = ("python3 -c \"import os\nos.makedirs('output/m', exist_ok=True)\n"
        "for i in range({n}): open(f'output/m/f{{i}}', 'w').write('x')\"")
TIMED = ("python3 -c \"import time\nt = time.perf_counter()\n"
         "for i in range({n}): open(f'output/m/f{{i}}'{mode}).{op}\n"
         "print(time.perf_counter() - t)\"")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backend", default="local")
    a = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="a2rl-bench-access-"))
    settings = Settings(home=home, db_url=f"sqlite:///{home}/a2rl.db",
                        sandbox={"backend": a.backend,
                                 "docker": {"image": "a2rl-sandbox-test:latest"}})
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="fixture", budget="2h", baseline=False).run
    rt = build_runtime(settings, store, run)
    sandbox = rt.sandbox.get()
    folder = access.folder_of(rt.dir / "control")
    count = 0

    def job(command: str) -> float:
        nonlocal count
        count += 1
        name = f"j-{count}"
        sandbox.spawn(name, command)
        sandbox.wait(name, 3600)
        return float((rt.job_logs.folder / f"{name}.log").read_text().split()[-1] or 0)

    read = TIMED.format(n=a.n, mode="", op="read()")
    write = TIMED.format(n=a.n, mode=", 'w'", op="write('y')")
    try:
        sandbox.spawn("j-make", MAKE.format(n=a.n))
        sandbox.wait("j-make", 3600)
        times: dict[str, list[float]] = {k: [] for k in ("read on", "read off", "write on",
                                                          "write off")}
        for _ in range(a.rounds):
            sandbox.watch_access()  # a recorder again
            times["read on"].append(job(read))
            times["write on"].append(job(write))
            pid = json.loads((folder / access.META).read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            while Path(f"/proc/{pid}").exists() and "Z" not in Path(
                    f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]:
                time.sleep(0.05)
            times["read off"].append(job(read))
            times["write off"].append(job(write))
    finally:
        finish_run(settings, store, run.id)
    lines = [json.loads(x) for x in (folder / access.JOURNAL).read_text().splitlines()]
    cpu = sum(x.get("cpu_s", 0) for x in lines if x.get("t") == "end")
    events = sum(x.get("events", 0) for x in lines if x.get("t") == "end")
    print(f"{a.n} files per job, {a.rounds} rounds, backend {a.backend}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for op in ("read", "write"):
        on, off = statistics.median(times[f"{op} on"]), statistics.median(times[f"{op} off"])
        print(f"{op}: {on:.2f} s watched, {off:.2f} s unwatched (median): "
              f"+{(on - off) / a.n * 1e6:.0f} us per file ({on / off:.1f}x)")
    print(f"recorder: {events} events, {cpu:.2f} CPU-s ({cpu / max(events, 1) * 1e6:.0f} us "
          "per event)")


if __name__ == "__main__":
    main()
