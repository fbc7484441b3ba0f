"""Heartbeat: this worker's row among the live workers (the admin's), written when it
starts, touched every HEARTBEAT_INTERVAL, marked stopped at a clean exit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from scheduler_app import workers
from scheduler_app.worker.duties import Duty, WithDatabase


class Heartbeat:
    """This worker's heartbeat row; ``running()`` says how many jobs it runs now."""

    def __init__(
        self,
        worker_id: str,
        *,
        queues: Sequence[str],
        concurrency: int,
        interval: float,
        running: Callable[[], int],
        with_db: WithDatabase,
    ) -> None:
        self.worker_id = worker_id
        self.queues = queues
        self.concurrency = concurrency
        self.interval = interval
        self.running = running
        self.with_db = with_db

    def duty(self) -> Duty:
        """Return the duty that beats every ``interval`` seconds, the first an interval
        after the row was written."""
        return Duty(
            name="heartbeat",
            interval=lambda: self.interval,
            run=self.beat,
            next_at=time.monotonic() + self.interval,
        )

    def started(self) -> None:
        """Write the row as the worker starts."""
        self.with_db(
            lambda: workers.worker_started(
                self.worker_id, queues=self.queues, concurrency=self.concurrency
            )
        )

    def beat(self) -> None:
        """Record that the worker is alive; write the row again if it is gone."""
        running = self.running()
        if self.with_db(lambda: workers.heartbeat(self.worker_id, running=running)) is False:
            # Our row was deleted (pruned) or never written: write it again.
            self.started()

    def stopped(self) -> None:
        """Mark the row stopped (a clean exit)."""
        self.with_db(lambda: workers.worker_stopped(self.worker_id))
