"""A send's start: the first lane to run moves its batch from scheduled to sending.

Before it does, the stale-send guard looks at how late the batch is (sends.stale), and
the audience is frozen: snapshotted into Recipient rows, counted against
expected_max_audience (the breaker of a larger audience than planned), and given each
recipient's local delivery time. A batch whose freeze fails ends failed, nothing sent.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import DatabaseError, InterfaceError, OperationalError

from scheduler_app import database
from scheduler_app.db import database_now
from scheduler_app.exceptions import SchedulerError, ValidationError
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.schedules.per_item import local_run_time
from scheduler_app.sends import stale, states
from scheduler_app.sends.audience import freeze, get_audience

logger = logging.getLogger("scheduler_app.sends")


def start_sending(batch_id: int) -> SendBatch | None:
    """Move a scheduled batch to sending, freezing its audience first; return it if sending."""
    with database.atomic():
        batch = SendBatch.objects.select_for_update().get(pk=batch_id)
        if batch.status == SendBatch.Status.SCHEDULED:
            now = database_now()  # recipients' due times are compared with it
            late = stale.batch_late_by(batch, now)
            if late is not None:
                stale.pause_stale(batch, late, what="the send")
                return None
            if batch.frozen_at is None:
                try:
                    with database.atomic():
                        count = freeze_audience(batch, now=now)
                except (OperationalError, InterfaceError):
                    raise  # the database is away: try again
                except (SchedulerError, DatabaseError) as exc:
                    states.fail(batch_id, "The audience could not be frozen: %s" % exc)
                    return None
                if count > batch.expected_max_audience:
                    states.fail(
                        batch_id,
                        "Audience of %s recipients exceeds the expected maximum of %s; "
                        "nothing was sent." % (count, batch.expected_max_audience),
                    )
                    return None
            SendBatch.objects.filter(pk=batch_id, status=SendBatch.Status.SCHEDULED).update(
                status=SendBatch.Status.SENDING, started_at=now
            )
            batch.status = SendBatch.Status.SENDING
            logger.info(
                "batch sending batch=%s recipients=%s scheduled_at=%s timezone=%s",
                batch_id,
                batch.total,
                batch.scheduled_at,
                batch.timezone,
            )
    return batch if batch.status == SendBatch.Status.SENDING else None


def freeze_audience(batch: SendBatch, *, now: dt.datetime) -> int:
    """Snapshot the batch's audience into Recipient rows; record and return the count."""
    query = get_audience(batch.audience, batch.audience_params)
    count = freeze(batch.pk, query, next_attempt_at=now)
    if batch.local_delivery_time is not None:
        _set_local_delivery_times(batch, now)
    types = query.context_types
    SendBatch.objects.filter(pk=batch.pk).update(total=count, frozen_at=now, context_types=types)
    batch.total, batch.frozen_at, batch.context_types = count, now, types
    return count


def _set_local_delivery_times(batch: SendBatch, now: dt.datetime) -> None:
    """Deliver at local_delivery_time in each recipient's zone (the batch's if unknown)."""
    start = batch.scheduled_at or now
    recipients = Recipient.objects.filter(batch=batch, is_seed=False)
    for zone in recipients.values_list("timezone", flat=True).distinct():
        try:
            at = local_run_time(
                event_at=start,
                now=start,
                timezone=zone or batch.timezone,
                days_after=0,
                at=batch.local_delivery_time,
            )
        except ValidationError:
            at = local_run_time(
                event_at=start,
                now=start,
                timezone=batch.timezone,
                days_after=0,
                at=batch.local_delivery_time,
            )
        recipients.filter(timezone=zone).update(next_attempt_at=at)
