"""One evaluation at a time per device.

The grader shares the machine (and on one GPU, the device) with the agent's jobs; two
evaluations at once would only slow each other and risk running out of memory. An exclusive
`flock` on a file under `$A2RL_HOME/locks/` serialises evaluations across every process of the
installation and is released by the kernel if the holder dies.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from a2rl.settings import Settings


class DeviceBusy(TimeoutError):
    """The device lock was not acquired within the wait."""


@contextmanager
def device_lock(settings: Settings, device: str = "default",
                wait_s: float | None = None) -> Iterator[None]:
    """Hold the device's lock; wait forever by default, or raise `DeviceBusy` after `wait_s`.

    Not re-entrant: do not nest two `device_lock` calls for one device in one process.
    """
    path = settings.home_dir / "locks" / f"grading-{device}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:  # type: ignore[operator]
                    raise DeviceBusy(f"grading device {device!r} is busy") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
