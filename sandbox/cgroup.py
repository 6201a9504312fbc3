"""A run's control group: the kernel's count of its processes, its memory wall, its kill switch.

The local backend puts a run's supervisor (and so every job it forks) into one cgroup per run,
where the server may write cgroups: the v1 `pids`, `memory` and `freezer` hierarchies (as on
hosts without a unified hierarchy, as root), or a writable cgroup v2 tree with the `pids` and
`memory` controllers. Processes cannot leave it (moving needs write access to another cgroup's
`cgroup.procs`, which the sandbox user lacks and the sandbox does not even mount), so killing
every process in it ends the run whatever its jobs did. Where no cgroup is writable (an
unprivileged user without a delegated subtree) the run's pid namespace is the kill switch and
the supervisor's own watch the only process limit; memory is then not limited.

Inside the run's group the supervisor and its jobs are apart: the supervisor in `sup/`, every
job in `jobs/`, which holds the run's memory and process limits. On v1 one supervisor thread
joins `jobs/` and forks every job's shim, which is then born inside; on v2 each shim moves
itself there before it starts the command (`jobs_entry`). Either way through a descriptor the
server opened (the sandbox mounts no cgroup folder; the kernel checks the opener's rights).
So a memory hog meets the out-of-memory killer in `jobs/`, where the supervisor's process is
not: its jobs die, never the supervisor (many small processes would otherwise make it, the
largest, the killer's pick). The run's group caps the two together, with room for the
supervisor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("pids", "memory", "freezer")
GROUP = "a2rl"
SUPERVISOR_RESERVE = 64  # the supervisor's own threads count against the pids limit
SUPERVISOR_MEMORY = 256 << 20  # the supervisor's room above the jobs' memory limit
SUP, JOBS = "sup", "jobs"  # the supervisor's and the jobs' groups inside the run's


class RunCgroup:
    """One run's cgroup folder(s); every method is a no-op where none could be made."""

    def __init__(self, run_id: str, root: Path = ROOT) -> None:
        self.run_id = run_id
        self.v2 = (root / "cgroup.controllers").exists()
        if self.v2:
            self.paths = {"": root / GROUP / run_id}
        else:
            self.paths = {c: root / c / GROUP / run_id for c in V1_CONTROLLERS
                          if os.access(root / c, os.W_OK)}
        self.root = root

    @property
    def exists(self) -> bool:
        return any(p.is_dir() for p in self.paths.values())

    def create(self, memory_bytes: int, pids_max: int) -> bool:
        """Make the cgroup, its `sup/` and `jobs/` groups and their limits; False where this
        host gives us none."""
        made = False
        for controller, path in list(self.paths.items()):
            try:
                if self.v2:
                    parent = path.parent
                    parent.mkdir(exist_ok=True)
                    for folder in (self.root, parent):  # controllers must be given downward
                        with contextlib.suppress(OSError):
                            (folder / "cgroup.subtree_control").write_text("+pids +memory")
                path.mkdir(parents=True, exist_ok=True)
                if self.v2:  # v2 holds processes in leaves only: sup/ and jobs/
                    with contextlib.suppress(OSError):
                        (path / "cgroup.subtree_control").write_text("+pids +memory")
                (path / SUP).mkdir(exist_ok=True)
                (path / JOBS).mkdir(exist_ok=True)
                made = True
            except OSError as exc:
                log.info("no %s cgroup for run %s: %s", controller or "v2", self.run_id, exc)
                del self.paths[controller]
                continue
            # The run's group: the jobs' limits plus the supervisor's room; jobs/: the limits.
            self._limit(controller, path, memory_bytes and memory_bytes + SUPERVISOR_MEMORY,
                        pids_max and pids_max + 2 * SUPERVISOR_RESERVE)
            self._limit(controller, path / JOBS, memory_bytes,
                        pids_max and pids_max + SUPERVISOR_RESERVE)
        return made

    def _limit(self, controller: str, path: Path, memory_bytes: int, pids_max: int) -> None:
        writes: list[tuple[str, str]] = []
        if controller in ("pids", "") and pids_max > 0:
            writes.append(("pids.max", str(pids_max)))
        if controller == "memory" and memory_bytes > 0:
            writes += [("memory.limit_in_bytes", str(memory_bytes)),
                       ("memory.memsw.limit_in_bytes", str(memory_bytes))]  # when swap counts
        if controller == "" and memory_bytes > 0:
            writes += [("memory.max", str(memory_bytes)), ("memory.swap.max", "0")]
        for name, value in writes:
            try:
                (path / name).write_text(value)
            except OSError as exc:
                if "memsw" not in name and "swap" not in name:
                    log.warning("cgroup limit %s=%s not set for run %s: %s", name, value,
                                self.run_id, exc)

    def add(self, pid: int) -> None:
        """Put the supervisor (and what it forks) into the run's `sup/` group."""
        for path in self.paths.values():
            with contextlib.suppress(OSError):
                (path / SUP / "cgroup.procs").write_text(str(pid))

    def jobs_entry(self) -> tuple[list[Path], bool]:
        """The files through which jobs enter the jobs' group, and whether they take a thread.

        v1 (one `tasks` file per hierarchy): one supervisor thread writes 0 there and joins,
        and every shim it forks is born inside; no job then pays a migration (about one RCU
        grace period, 8 ms here, on each command's path). v2 keeps a process's threads
        together for memory: each shim writes 0 to `cgroup.procs` and moves itself."""
        if self.v2:
            return ([self.paths[""] / JOBS / "cgroup.procs"] if "" in self.paths else []), False
        return [path / JOBS / "tasks" for path in self.paths.values()
                if (path / JOBS).is_dir()], True

    def oom_file(self) -> Path | None:
        """The file whose `oom_kill N` line counts the OOM kills of the jobs' group."""
        if self.v2:
            return self.paths[""] / JOBS / "memory.events" if "" in self.paths else None
        if "memory" not in self.paths:
            return None
        return self.paths["memory"] / JOBS / "memory.oom_control"

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.paths.values():
            for folder in (path, path / SUP, path / JOBS):
                with contextlib.suppress(OSError):
                    found.update(int(x) for x in (folder / "cgroup.procs").read_text().split())
        return found

    def kill_all(self, timeout: float = 10.0) -> bool:
        """SIGKILL every process in the cgroup; True once it is empty."""
        if not self.exists:
            return True
        freezer = self.paths.get("freezer")
        end = time.monotonic() + timeout
        while True:
            if self.v2:
                with contextlib.suppress(OSError):
                    (self.paths[""] / "cgroup.kill").write_text("1")
            if freezer is not None:  # frozen, nothing forks while we kill
                with contextlib.suppress(OSError):
                    (freezer / "freezer.state").write_text("FROZEN")
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if freezer is not None:
                with contextlib.suppress(OSError):
                    (freezer / "freezer.state").write_text("THAWED")
                # jobs a grader froze and never thawed (it died mid-evaluation) stay frozen
                # under a thawed parent on v1, and a frozen process never dies of SIGKILL
                with contextlib.suppress(OSError):
                    (freezer / JOBS / "freezer.state").write_text("THAWED")
            time.sleep(0.02)
            if not self.pids():
                return True
            if time.monotonic() > end:
                log.warning("run %s: processes left in its cgroup: %s", self.run_id, self.pids())
                return False

    def freeze_jobs(self, frozen: bool) -> bool:
        """Freeze (or thaw) the jobs' group: its processes stop where they are and take no CPU
        until thawed; the supervisor, in `sup/`, keeps answering. True when the kernel holds
        the group in the asked state (v1 `freezer.state`, v2 `cgroup.freeze` and its
        `frozen` event); False where this run has no freezer (then nothing changed)."""
        if self.v2:
            group = self.paths.get("")
            knob, want = (group / JOBS / "cgroup.freeze" if group else None), "1" if frozen else "0"
        else:
            group = self.paths.get("freezer")
            knob = group / JOBS / "freezer.state" if group else None
            want = "FROZEN" if frozen else "THAWED"
        if knob is None or not knob.exists():
            return False
        try:
            knob.write_text(want)
        except OSError as exc:
            log.warning("run %s: jobs not %s: %s", self.run_id, want.lower(), exc)
            return False
        end = time.monotonic() + 5.0  # v1 goes FREEZING first, v2 reports `frozen 1` later
        while time.monotonic() < end:
            if self._jobs_frozen() == frozen:
                return True
            time.sleep(0.01)
        log.warning("run %s: jobs' group did not reach %s", self.run_id, want)
        return False

    def _jobs_frozen(self) -> bool | None:
        with contextlib.suppress(OSError):
            if self.v2:
                events = (self.paths[""] / JOBS / "cgroup.events").read_text()
                return "frozen 1" in events.splitlines()
            return (self.paths["freezer"] / JOBS / "freezer.state").read_text().strip() == "FROZEN"
        return None

    def remove(self) -> None:
        for path in self.paths.values():
            for folder in (path / SUP, path / JOBS, path):
                with contextlib.suppress(OSError):
                    folder.rmdir()
