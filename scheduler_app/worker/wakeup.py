"""Wake-up: PostgreSQL LISTEN in a side thread sets the worker's wake event."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Sequence

import psycopg
from django.db import connection

from scheduler_app.db.postgresql import CHANNEL

logger = logging.getLogger("scheduler_app.worker")

#: How often the listener looks at the stop event while no NOTIFY arrives.
STOP_CHECK_INTERVAL = 0.25


class Listener(threading.Thread):
    """LISTEN on its own connection; on a NOTIFY for one of our queues, wake the worker.

    Records the earliest future run_at it hears of, so the worker also wakes
    for a job scheduled for later. Reconnects after a lost connection; the
    worker polls meanwhile, so nothing waits longer than the poll interval.
    """

    def __init__(self, queues: Sequence[str], wake: threading.Event, stop: threading.Event):
        super().__init__(name="scheduler-listener", daemon=True)
        self.queues = set(queues)
        self.wake = wake
        self.stop_event = stop
        self.listening = threading.Event()
        self._lock = threading.Lock()
        self._next_run_at: float | None = None

    def pop_next_run_at(self) -> float | None:
        """Return (and forget) the earliest run_at epoch heard of since the last call."""
        with self._lock:
            value, self._next_run_at = self._next_run_at, None
            return value

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._listen()
            except psycopg.Error as exc:
                self.listening.clear()
                logger.warning("listener lost its connection, reconnecting error=%s", exc)
                self.wake.set()  # poll once now, in case a notification was lost
                self.stop_event.wait(1.0)

    def _listen(self) -> None:
        params = connection.get_connection_params()
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute("LISTEN %s" % CHANNEL)
            self.listening.set()
            while not self.stop_event.is_set():
                for notify in conn.notifies(timeout=STOP_CHECK_INTERVAL):
                    self._heard(notify.payload)

    def _heard(self, payload: str) -> None:
        queue, _, epoch = payload.partition(" ")
        if queue not in self.queues:
            return
        try:
            run_at = float(epoch)
        except ValueError:
            run_at = 0.0
        if run_at > dt.datetime.now(dt.UTC).timestamp():
            with self._lock:
                if self._next_run_at is None or run_at < self._next_run_at:
                    self._next_run_at = run_at
        self.wake.set()
