"""Schedules: a worker started with a scheduler interval syncs the declared schedules as it
starts and enqueues due occurrences every interval (each exactly once, see
schedules.enqueuer)."""

from __future__ import annotations

from collections.abc import Callable

from scheduler_app.schedules.declared import sync_declared_schedules
from scheduler_app.schedules.enqueuer import enqueue_due_occurrences
from scheduler_app.worker.duties import Duty, WithDatabase


class Schedules:
    """This worker's share of the recurring schedules; nothing is enqueued once
    ``stopping()``."""

    def __init__(
        self, *, interval: float, stopping: Callable[[], bool], with_db: WithDatabase
    ) -> None:
        self.interval = interval
        self.stopping = stopping
        self.with_db = with_db

    def duty(self) -> Duty:
        """Return the duty that enqueues due occurrences every ``interval`` seconds."""
        return Duty(name="scheduler", interval=lambda: self.interval, run=self.tick)

    def started(self) -> None:
        """Sync the schedules the code declares, as the worker starts."""
        self.with_db(sync_declared_schedules)

    def tick(self) -> None:
        """Enqueue the due occurrences, unless the worker is stopping."""
        if not self.stopping():
            self.with_db(enqueue_due_occurrences)
