"""A signal that comes while the interpreter is already exiting: `a2rl serve` over stdio is
ended by the MCP client with SIGTERM when it has not exited two seconds after its stdin closed,
which under load is while it waits for its threads in `threading._shutdown`. Raising there only
prints "Exception ignored ... KeyboardInterrupt" with a traceback into the run's stderr, so the
handler notes the signal and lets the exit finish; a second one ends the process the default way.

Real parts: a real Python process with the handlers installed, real signals.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# The main thread returns at once; a non-daemon thread says when the interpreter is in its
# shutdown (the main thread no longer alive), then keeps it waiting for `hold` seconds.
_CHILD = textwrap.dedent("""
    import sys, threading, time
    from a2rl import interrupt

    interrupt.install()
    hold = float(sys.argv[1])

    def linger():
        while threading.main_thread().is_alive():
            time.sleep(0.01)
        print("exiting", flush=True)
        time.sleep(hold)

    threading.Thread(target=linger).start()
""")


def _exiting_child(hold: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(hold)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "exiting\n"
    return proc


@pytest.mark.timeout(60)
def test_a_signal_during_exit_lets_it_finish_without_a_traceback() -> None:
    proc = _exiting_child(hold=1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err == ""  # no "Exception ignored in threading._shutdown", no KeyboardInterrupt


@pytest.mark.timeout(60)
def test_a_second_signal_during_exit_ends_it() -> None:
    proc = _exiting_child(hold=60.0)  # an exit that would hang past the test's patience
    proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=1)  # the first one is noted: still exiting
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGTERM, err
    assert "Traceback" not in err
