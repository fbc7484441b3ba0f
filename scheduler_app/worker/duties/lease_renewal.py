"""Lease renewal: keep the leases of the jobs running here, and the holds of the jobs whose
abandoned handler still runs here, a lease ahead, so no other worker starts them."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections.abc import Callable

from scheduler_app.side_connection import side_connection
from scheduler_app.worker import holds, leases
from scheduler_app.worker.duties import DutyThread

#: (ids of the jobs running here, (id, lease token) of the jobs held here).
Leased = tuple[list[int], list[tuple[int, int]]]


def lease_renewal(
    *, worker_id: str, lease_seconds: float, leased: Callable[[], Leased], stop: threading.Event
) -> DutyThread:
    """Return the thread that renews what ``leased()`` names every third of the lease,
    until ``stop`` is set.

    Its own thread, so that a slow side duty (a scheduler tick waiting on a
    lock) cannot cost a running job its lease.
    """
    lease = dt.timedelta(seconds=lease_seconds)

    def renew() -> None:
        running, held = leased()
        with side_connection().use():
            leases.renew(worker_id, running, lease)
            holds.extend(held, lease)

    return DutyThread(
        name="scheduler-leases",
        duty="lease renewal",
        worker_id=worker_id,
        delays=itertools.repeat(lease_seconds / 3),
        step=renew,
        stop=stop,
    )
