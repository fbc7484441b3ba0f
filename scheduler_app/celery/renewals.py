"""Lease renewal for the jobs a Celery worker process runs: one thread, one statement per lease.

A Celery task holds its job's lease however long the handler runs, so a
retry never runs beside it. The tasks of one process share a renewer: every
third of the shortest lease held, it renews all of them at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
from collections.abc import Iterator

from django.db import DatabaseError

from scheduler_app.database import connection
from scheduler_app.worker import leases
from scheduler_app.worker.execution import ClaimedJob

logger = logging.getLogger("scheduler_app.celery")


class Renewer:
    """Renew the leases of the jobs held with ``holding()``, on a thread started on first use."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held: dict[int, tuple[str, dt.timedelta]] = {}  # job id -> (worker id, lease)
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def holding(self, job: ClaimedJob, *, worker_id: str, lease: dt.timedelta) -> Iterator[None]:
        """Keep ``job``'s lease renewed while the block runs."""
        with self._changed:
            # Wake the renewer only when its wait must change: it holds nothing, or this
            # lease is shorter than every one it holds.
            if all(lease < held for _, held in self._held.values()):
                self._changed.notify()
            self._held[job.id] = (worker_id, lease)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew_forever, name="scheduler-lease-renewer", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._changed:
                del self._held[job.id]

    def _renew_forever(self) -> None:
        while True:
            for (worker_id, lease), ids in self._next_renewals().items():
                try:
                    leases.renew(worker_id, ids, lease)
                except DatabaseError as exc:
                    # Not only a lost connection: a failover's old primary, now read-only,
                    # refuses the write on a live one. A new connection may reach the new
                    # primary; the thread lives on, or the leases lapse mid-run.
                    logger.warning(
                        "lease renewal failed, will retry jobs=%s worker=%s error=%s",
                        ids,
                        worker_id,
                        exc,
                    )
                    connection.close()

    def _next_renewals(self) -> dict[tuple[str, dt.timedelta], list[int]]:
        """Wait a third of the shortest lease held; return the held jobs by (worker, lease)."""
        with self._changed:
            if not self._held:
                connection.close()  # nothing to renew: hold no connection while idle
                while not self._held:
                    self._changed.wait()
            interval = min(lease for _, lease in self._held.values()) / 3
            self._changed.wait(interval.total_seconds())
            renewals: dict[tuple[str, dt.timedelta], list[int]] = {}
            for job_id, key in self._held.items():
                renewals.setdefault(key, []).append(job_id)
            return renewals


_renewers: dict[int, Renewer] = {}  # pid -> its renewer (a forked pool child makes its own)


def renewer() -> Renewer:
    """Return this process's Renewer."""
    pid = os.getpid()
    if pid not in _renewers:
        _renewers[pid] = Renewer()
    return _renewers[pid]
