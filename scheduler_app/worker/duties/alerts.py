"""Alert evaluation: every worker started with an alert interval offers to evaluate the
alert rules (one at a time evaluates them), so nothing fails silently."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

from scheduler_app.alerts.evaluator import evaluate_quietly
from scheduler_app.side_connection import side_connection
from scheduler_app.worker.duties import DutyThread


def alert_evaluation(
    *, worker_id: str, every: float, lease_seconds: float, stop: threading.Event
) -> DutyThread:
    """Return the thread that evaluates the alert rules about every ``every`` seconds,
    until ``stop`` is set.

    Its own thread, so that a slow evaluation or a notifier that hangs (a
    mail server that never answers) cannot stop the loop from recording
    outcomes and claiming. Its turns on the side connection are the lease renewal's
    too: an evaluation that would hold one past a third of a lease (a rule waiting on a
    table a migration locked) is cancelled and tried again at the next interval, so the
    renewal, due every third of a lease, is never late by more than a third.
    """
    return DutyThread(
        name="scheduler-alerts",
        duty="alert evaluation",
        worker_id=worker_id,
        delays=_jittered(every),
        step=lambda: evaluate_quietly(turn=side_connection().use, time_limit=lease_seconds / 3),
        stop=stop,
    )


def _jittered(every: float) -> Iterator[float]:
    # Workers started together offer to evaluate at different times.
    yield every * random.uniform(0.1, 1.0)
    while True:
        yield every * random.uniform(0.8, 1.2)
