"""Rescue: put back the jobs whose worker stopped renewing their lease (a crash causes a
rerun, never a loss)."""

from __future__ import annotations

import random

from scheduler_app.worker import leases
from scheduler_app.worker.duties import Duty, WithDatabase


def rescue(*, worker_id: str, lease_seconds: float, with_db: WithDatabase) -> Duty:
    """Return the duty that rescues expired leases about every half lease (see
    leases.rescue_expired)."""
    return Duty(
        name="rescue",
        # Jitter so that many workers don't all rescue in the same instant.
        interval=lambda: lease_seconds / 2 * random.uniform(0.5, 1.5),
        run=lambda: with_db(lambda: leases.rescue_expired(worker_id)),
    )
