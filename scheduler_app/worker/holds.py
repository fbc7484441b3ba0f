"""Holds: keep a job whose abandoned handler still runs from being claimed.

A handler thread cannot be killed. When a worker gives up waiting for one
(its timeout plus a grace), it records the attempt and, if the job will run
again, holds it: its ``run_at`` is kept a lease ahead, renewed with the
leases, until the thread ends (then the hold is released) or the worker
exits (then it lapses within a lease). So the retry never runs beside it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from functools import reduce
from operator import or_

from django.db.models import Q, Value
from django.db.models.functions import Greatest

from scheduler_app.database_clock import DatabaseNow
from scheduler_app.models import Job


def extend(held: Iterable[tuple[int, int]], lease: dt.timedelta) -> int:
    """Keep the pending jobs (id, lease_token) unclaimable for ``lease`` by the database's
    clock (claims compare run_at with it); return how many."""
    matches = [Q(pk=job_id, lease_token=token) for job_id, token in held]
    if not matches:
        return 0
    # Greatest: a backoff longer than the hold is kept, never shortened.
    return (
        Job.objects.pending()
        .filter(reduce(or_, matches))
        .update(run_at=Greatest("run_at", DatabaseNow(lease)))
    )


def release(job_id: int, token: int, run_at: dt.datetime) -> bool:
    """End a hold: the job becomes due at ``run_at``, or now by the database's clock if that
    has passed; False if it was claimed or cancelled."""
    return bool(
        Job.objects.pending()
        .filter(pk=job_id, lease_token=token)
        .update(run_at=Greatest(Value(run_at), DatabaseNow()))
    )
