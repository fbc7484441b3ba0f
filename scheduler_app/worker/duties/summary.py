"""Summary: what this worker did since the last summary, counted and logged every
SUMMARY_INTERVAL and once more as it exits."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from scheduler_app.worker.duties import Duty

logger = logging.getLogger("scheduler_app.worker")


class Summary:
    """The counts since the last summary (``counts``: claimed, succeeded, handed_back...);
    ``running()`` says how many jobs run now."""

    def __init__(self, worker_id: str, *, interval: float, running: Callable[[], int]) -> None:
        self.worker_id = worker_id
        self.interval = interval
        self.running = running
        self.counts: Counter[str] = Counter()

    def duty(self) -> Duty:
        """Return the duty that logs the summary every ``interval`` seconds."""
        return Duty(
            name="summary",
            interval=lambda: self.interval,
            run=self.log,
            next_at=time.monotonic() + self.interval,
        )

    def log(self) -> None:
        """Log the counts since the last summary, and start counting again."""
        counts, self.counts = self.counts, Counter()
        logger.info(
            "worker summary worker=%s claimed=%s succeeded=%s failed=%s retried=%s deferred=%s "
            "handed_back=%s abandoned=%s running=%s",
            self.worker_id,
            counts["claimed"],
            counts["succeeded"],
            counts["failed"],
            counts["retried"],
            counts["deferred"],
            counts["handed_back"],
            counts["abandoned"],
            self.running(),
        )
