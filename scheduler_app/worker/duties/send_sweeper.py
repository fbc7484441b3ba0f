"""Send sweeper: revive the send batches whose lanes all died, so no number of crashes
strands a batch."""

from __future__ import annotations

import random

from scheduler_app.sends.sweeper import revive_stranded_batches
from scheduler_app.worker.duties import Duty, WithDatabase


def send_sweeper(*, lease_seconds: float, with_db: WithDatabase) -> Duty:
    """Return the duty that revives stranded batches about every lease (see
    sends.sweeper.revive_stranded_batches)."""
    return Duty(
        name="send sweeper",
        interval=lambda: lease_seconds * random.uniform(0.5, 1.5),
        run=lambda: with_db(revive_stranded_batches),
    )
