"""Ending by a signal: SIGTERM and SIGHUP take the path Ctrl-C (SIGINT) takes.

Why one path: `timeout 900 a2rl demo`, a closed terminal, `kill PID` and a job scheduler all
end a process with SIGTERM or SIGHUP, whose default action kills Python on the spot: no
`finally`, so the run stayed "running" past its deadline and its container stayed behind.
Ctrl-C already finalizes (the orchestrator catches `KeyboardInterrupt`), so the other two are
made to raise it too, by calling whatever handles SIGINT at that moment: Python's own handler
(which raises `KeyboardInterrupt`) or, inside `anyio.run`, asyncio's (which cancels the main
task first, so the event loop unwinds cleanly). The first signal is remembered (`received`):
the run's end reason names it and the command exits 128 + its number, as a shell reports a
process killed by it.

While a run is being finalized (`holding`) every one of the three is only noted: a second
Ctrl-C, or the SIGTERM that `timeout` sends to the whole process group, must not cut the
finalization short and leave a run half closed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


def received() -> int | None:
    """The first SIGTERM or SIGHUP this process got (or any of the three while `holding`),
    or None. SIGINT's own handler is left as Python's, so that asyncio can put its own in
    place inside `anyio.run`: a `KeyboardInterrupt` with nothing received was a Ctrl-C."""
    return _received[0] if _received else None


def cause() -> int:
    """The signal behind a `KeyboardInterrupt` being handled: SIGINT unless another came."""
    return received() or signal.SIGINT


def name(signum: int) -> str:
    return signal.Signals(signum).name


def exit_code(signum: int) -> int:
    """What a shell reports for a process ended by `signum`: 130, 143, 129."""
    return 128 + signum


def reason(signum: int | None) -> str:
    """A run's end reason when its command was interrupted: `interrupted (SIGTERM)`."""
    return f"interrupted ({name(signum)})" if signum else "interrupted"


def _as_sigint(signum: int, frame: FrameType | None) -> None:
    first = not _received
    _received.append(signum)
    if not first:
        return  # already unwinding toward the finalization: once is enough
    if not threading.main_thread().is_alive():
        # The interpreter is already exiting (its main thread is done and it waits for other
        # threads to end): an exception raised here is only printed as "Exception ignored in
        # threading._shutdown" with a traceback. The process is ending as asked; a further
        # one of these signals ends it the default way, should that wait hang.
        signal.signal(signum, signal.SIG_DFL)
        return
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)  # raises KeyboardInterrupt, or cancels asyncio's task
    else:  # SIGINT ignored (started in the background by a shell) or default: raise it here
        raise KeyboardInterrupt


def install() -> None:
    """Make SIGTERM and SIGHUP interrupt like Ctrl-C, and remember which came first. Only in
    the main thread (signal handlers can be set nowhere else); a no-op elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _as_sigint)


@contextlib.contextmanager
def holding(say: Callable[[str], None] = lambda _m: None) -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP are noted (and `say`s so), never raised; the
    handlers before are put back after. Outside the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, _frame: FrameType | None) -> None:
        _received.append(signum)
        say(f"{name(signum)}: still finalizing the run, it ends when that is done")

    before: dict[int, Any] = {s: signal.getsignal(s) for s in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, note)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
