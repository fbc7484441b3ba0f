"""Wake-up: PostgreSQL LISTEN in a side thread sets the worker's wake event.

The LISTEN goes out on the process's side connection (scheduler_app.side_connection),
between the turns of the other side threads, or, with LISTEN_DATABASE set to an alias,
on a connection of its own to that database (a direct one, where the scheduler's
database is reached through a transaction pooler, which cannot keep a LISTEN).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Sequence

import psycopg
from django.db import DatabaseError, connections

from scheduler_app.db.postgresql import CHANNEL
from scheduler_app.side_connection import SideConnection, side_connection

logger = logging.getLogger("scheduler_app.worker")

#: How long one turn of listening lasts: how often the listener looks at the stop event,
#: and at most how long another side thread waits for the side connection.
STOP_CHECK_INTERVAL = 0.25


class Listener(threading.Thread):
    """LISTEN; on a NOTIFY for one of our queues, wake the worker.

    ``alias``: the database to LISTEN on with a connection of the thread's own; None, on
    the side connection. Records the earliest future run_at it hears of, so the worker
    also wakes for a job scheduled for later. Reconnects after a lost connection; the
    worker polls meanwhile, so nothing waits longer than the poll interval.
    """

    def __init__(
        self,
        queues: Sequence[str],
        wake: threading.Event,
        stop: threading.Event,
        alias: str | None = None,
    ):
        super().__init__(name="scheduler-listener", daemon=True)
        self.queues = set(queues)
        self.wake = wake
        self.stop_event = stop
        self.alias = alias
        self.listening = threading.Event()
        self._lock = threading.Lock()
        self._next_run_at: float | None = None
        self._listened_on: psycopg.Connection | None = None

    def pop_next_run_at(self) -> float | None:
        """Return (and forget) the earliest run_at epoch heard of since the last call."""
        with self._lock:
            value, self._next_run_at = self._next_run_at, None
            return value

    def run(self) -> None:
        if self.alias is None:
            side = side_connection()
            with side.kept():
                self._retrying(self._listen_on_side)
                self._unlisten(side)
        else:
            self._retrying(self._listen_on_own)

    def _retrying(self, listen) -> None:
        while not self.stop_event.is_set():
            try:
                listen()
            except (psycopg.Error, DatabaseError) as exc:
                self.listening.clear()
                logger.warning("listener lost its connection, reconnecting error=%s", exc)
                if self.alias is None:
                    side_connection().close()
                self.wake.set()  # poll once now, in case a notification was lost
                self.stop_event.wait(1.0)

    def _listen_on_side(self) -> None:
        side = side_connection()
        while not self.stop_event.is_set():
            with side.use() as wrapper:
                wrapper.ensure_connection()
                self._hear(self._listening(wrapper.connection))
            side.let_others_in(timeout=STOP_CHECK_INTERVAL)

    def _unlisten(self, side: SideConnection) -> None:
        """Stop listening on the side connection, which other side threads may keep open:
        notifications nobody reads would pile up in its backlog."""
        try:
            with side.use() as wrapper:
                if wrapper.connection is not None and wrapper.connection is self._listened_on:
                    wrapper.connection.execute("UNLISTEN *")
        except (psycopg.Error, DatabaseError):
            pass  # a connection that is gone listens to nothing
        self._listened_on = None

    def _listen_on_own(self) -> None:
        params = connections[self.alias].get_connection_params()
        with psycopg.connect(**params, autocommit=True) as conn:
            self._listening(conn)
            while not self.stop_event.is_set():
                self._hear(conn)

    def _listening(self, conn: psycopg.Connection) -> psycopg.Connection:
        """LISTEN on ``conn`` unless it already does; return it."""
        if conn is not self._listened_on:
            conn.execute("LISTEN %s" % CHANNEL)
            self._listened_on = conn
            self.listening.set()
            self.wake.set()  # a notification may have come while nothing listened
        return conn

    def _hear(self, conn: psycopg.Connection) -> None:
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
