"""Make this process's clock run ahead of (or behind) the real one, as on a host whose
clock is off. tests/settings.py applies it when SCHEDULER_TEST_CLOCK_SKEW is set, so a
runworker subprocess can be started on a "skewed host"."""

from __future__ import annotations

import datetime as dt

from scheduler_app import clock


def skew_clock(seconds: float) -> None:
    """Replace clock.now with one that runs ``seconds`` off the real clock."""
    real_now = clock.now
    offset = dt.timedelta(seconds=seconds)

    def skewed_now() -> dt.datetime:
        return real_now() + offset

    clock.now = skewed_now
