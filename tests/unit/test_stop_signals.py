"""graceful_signals: a stop signal stops the worker whatever the main thread holds when it lands."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

# Event.wait() and Event.clear() hold the event's internal lock on the calling
# thread; the worker's main thread calls both on its wake event every turn. A
# Python signal handler runs on the main thread between two bytecodes, so a
# SIGTERM can land while that lock is held. Holding it around os.kill() puts
# the signal in that moment every time.
STOP_WHILE_HOLDING_THE_WAKE_LOCK = """
import os, signal, threading
from scheduler_app.worker.shutdown import graceful_signals

wake = threading.Event()
with graceful_signals(wake.set):
    with wake._cond:
        os.kill(os.getpid(), signal.SIGTERM)
    print("stopped" if wake.wait(10) else "not stopped", flush=True)
"""


def test_stop_signal_landing_while_the_wake_event_is_locked_still_stops():
    """Calling stop() inside the handler waited forever for the lock its own thread held."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", STOP_WHILE_HOLDING_THE_WAKE_LOCK],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail("the process hung after SIGTERM; output: %r %r" % (exc.stdout, exc.stderr))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "stopped"
