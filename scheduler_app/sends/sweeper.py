"""The lane sweeper: no batch is left sending (or due to start) short of lanes.

Lanes end for good in ways a batch cannot see: a lane job that crashed on
every one of its attempts fails, a deploy drops one. Every worker runs
``revive_stranded_batches`` now and then (like the lease rescue); it brings
such a batch back to SEND_LANES pending or running lanes, once, however many
workers sweep at the same moment.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import InterfaceError, OperationalError
from django.db.models import Count, F, OuterRef, Subquery
from django.db.models.functions import Coalesce

from scheduler_app import database
from scheduler_app.conf import app_settings
from scheduler_app.controls import record
from scheduler_app.database import connection
from scheduler_app.db import database_now
from scheduler_app.models import Job, SendBatch
from scheduler_app.sends import states
from scheduler_app.sends.batches import lane_jobs, top_up_lanes
from scheduler_app.sends.states import earliest_start

logger = logging.getLogger("scheduler_app.sends")
Status = SendBatch.Status


def revive_stranded_batches() -> list[int]:
    """Give lanes to batches that should be sending but have fewer than SEND_LANES; return ids."""
    now = database_now()  # start times are compared with the database's clock
    live_lanes = (
        lane_jobs(OuterRef("pk"))
        .filter(status__in=Job.UNFINISHED)
        .order_by()
        .values("task_name")
        .annotate(n=Count("pk"))
        .values("n")
    )
    stranded = (
        SendBatch.objects.filter(status__in=states.ACTIVE)
        .annotate(lanes=Coalesce(Subquery(live_lanes), 0))
        .filter(lanes__lt=app_settings.SEND_LANES)
    )
    revived = []
    for batch in stranded.only("pk", "status", "scheduled_at", "undo_deadline", "owner"):
        start = earliest_start(batch) if batch.status == Status.SCHEDULED else None
        if start is not None and start > now:
            continue  # before its send time, or inside its undo window
        try:
            if _revive(batch, now):
                revived.append(batch.pk)
        except (OperationalError, InterfaceError):
            raise  # the database is away: the worker's loop deals with it
        except Exception:
            # One batch that cannot be revived must not stop every worker's loop.
            logger.exception("batch could not be revived batch=%s", batch.pk)
    return revived


def _revive(batch: SendBatch, now: dt.datetime) -> bool:
    """Top ``batch`` up to SEND_LANES lanes unless another sweeper did; True if this one did."""
    with database.atomic():
        # Lock the batch row so that sweepers never both add lanes. PostgreSQL: skip a
        # row another transaction holds (a lane freezing the audience, another sweeper)
        # rather than wait on it in the worker's loop; SQLite: a no-op UPDATE takes the
        # write lock, after which this sweeper sees what the one before it committed.
        batches = SendBatch.objects.filter(pk=batch.pk, status__in=states.ACTIVE)
        if connection.vendor == "postgresql":
            locked = bool(batches.select_for_update(skip_locked=True).values_list("pk"))
        else:
            locked = bool(batches.update(status=F("status")))
        if not locked:
            return False
        missing = top_up_lanes(batch, now)
        if not missing:
            return False
        reason = "The batch was %s lane(s) short." % missing
        record("batch", str(batch.pk), "revive", reason=reason)
    logger.warning(
        "batch short of lanes, lanes enqueued batch=%s status=%s added=%s",
        batch.pk,
        batch.status,
        missing,
    )
    return True
