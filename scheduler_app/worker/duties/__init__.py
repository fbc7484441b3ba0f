"""The worker's side duties: what it does besides running jobs, a module each.

Two contracts, and the loop only schedules them:

- a ``Duty`` runs on the loop's thread: between turns the loop calls ``run()`` once
  ``interval()`` seconds have passed since the last time (``kill_switches``, ``rescue``,
  ``send_sweeper``, ``heartbeat``, ``summary``, ``schedules``);
- a ``DutyThread`` runs on a thread of its own, so that it can neither delay the loop nor
  be delayed by it (``lease_renewal``, ``alerts``); it reaches the database through the
  process's side connection (scheduler_app.side_connection), which it shares with the
  other side threads; the loop only checks that it is alive.

The LISTEN thread that wakes the loop is scheduler_app.worker.wakeup.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connections

from scheduler_app.side_connection import SideConnection, side_connection
from scheduler_app.worker.outcomes import CONNECTION_ERRORS

logger = logging.getLogger("scheduler_app.worker")

#: How a duty reaches the database from the loop's thread (the worker's ``_with_db``):
#: ``with_db(operation)`` returns what ``operation()`` returns, or None while the database
#: is away.
WithDatabase = Callable[[Callable[[], Any]], Any]


@dataclasses.dataclass(slots=True)
class Duty:
    """A periodic side duty of the worker loop: ``run()`` every ``interval()`` seconds.

    ``interval`` is a callable so a duty can add jitter. Duties run on the
    loop's thread; lease renewal and the alert evaluation have their own
    threads (DutyThread), so no duty can delay the one and the other cannot
    delay the loop.
    """

    name: str
    interval: Callable[[], float]
    run: Callable[[], object]
    next_at: float = 0.0  # time.monotonic(); 0: at the first turn


class DutyThread(threading.Thread):
    """A side duty on a thread of its own: ``step()`` after each of ``delays`` seconds
    until ``stop`` is set; ``step`` takes its turns on the side connection itself.

    A lost connection is logged and the side connection closed, and the next step tries
    again; any other error ends the thread, and the loop, finding it dead, stops the
    worker loudly.
    """

    def __init__(
        self,
        *,
        name: str,
        duty: str,
        worker_id: str,
        delays: Iterator[float],
        step: Callable[[], object],
        stop: threading.Event,
    ) -> None:
        super().__init__(name=name, daemon=True)
        #: What the duty is, for people: "lease renewal", "alert evaluation".
        self.duty = duty
        self.worker_id = worker_id
        self.delays = delays
        self.step = step
        self.stop_event = stop

    def run(self) -> None:
        side = side_connection()
        with side.kept():
            self._steps(side)

    def _steps(self, side: SideConnection) -> None:
        for delay in self.delays:
            if self.stop_event.wait(delay):
                return
            try:
                self.step()
            except CONNECTION_ERRORS as exc:
                logger.warning(
                    "%s failed, will retry worker=%s error=%s", self.duty, self.worker_id, exc
                )
                side.close()
            finally:
                # What a step reached outside its turns (an alert's signal receiver, a
                # notifier) used the thread's own connections: none is kept between steps.
                connections.close_all()
