"""Kill switches: what this worker may claim, read again every CONTROL_REFRESH seconds, so
a pause takes effect within seconds."""

from __future__ import annotations

import logging

from scheduler_app.controls import CONTROL_REFRESH, PausedScopes, paused_scopes
from scheduler_app.worker.duties import Duty, WithDatabase

logger = logging.getLogger("scheduler_app.worker")


class KillSwitches:
    """The kill switches as this worker last read them (``paused``)."""

    def __init__(self, worker_id: str, with_db: WithDatabase) -> None:
        self.worker_id = worker_id
        self.with_db = with_db
        self.paused = PausedScopes()

    def duty(self) -> Duty:
        """Return the duty that reads them every CONTROL_REFRESH seconds."""
        return Duty(name="kill switches", interval=lambda: CONTROL_REFRESH, run=self.read)

    def read(self) -> None:
        """Read the kill switches; keep the last ones read while the database is away."""
        paused = self.with_db(paused_scopes)
        if paused is not None and paused != self.paused:
            logger.info(
                "kill switches changed worker=%s everything=%s queues=%s tasks=%s",
                self.worker_id,
                paused.everything,
                ",".join(sorted(paused.queues)),
                ",".join(sorted(paused.tasks)),
            )
            self.paused = paused
