"""A lane's finishing: when it finds no recipient due for it.

Recipients still pending (their retries, local delivery times, or chunks other lanes
hold) make the lane wait for the earliest of them: it hands its job back with RetryLater
(no attempt used) and goes on then. When none is left the lane completes the batch, in
one guarded UPDATE that only one lane wins. So a batch always ends: completed, or
stopped with a reason (paused, cancelled, failed) by something else.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

from django.db.models import Max, Min
from django.db.models.functions import Coalesce, Greatest

from scheduler_app import clock
from scheduler_app.exceptions import RetryLater
from scheduler_app.models import Recipient, SendBatch

logger = logging.getLogger("scheduler_app.sends")

#: A lane that finds the rest of the batch claimed by other lanes looks again this soon.
OTHER_LANES_RECHECK = dt.timedelta(seconds=2)

Status = Recipient.Status


def finish_lane(batch: SendBatch, counts: Mapping[str, int]) -> dict[str, int]:
    """No due recipient for this lane: wait for retries, or complete the batch."""
    pending = Recipient.objects.filter(batch=batch, status=Status.PENDING, is_seed=False)
    # Due again when its retry time has come and no other lane's claim holds it.
    due = Greatest("next_attempt_at", Coalesce("claimed_until", "next_attempt_at"))
    found = pending.aggregate(at=Min(due), claimed=Max("claimed_until"))
    if found["at"] is not None:
        # Retries and local delivery times still to come, or other lanes' claims.
        delay = max(found["at"] - clock.now(), dt.timedelta(seconds=1))
        if found["claimed"] is not None and found["claimed"] > clock.now():
            # Another lane is sending its chunk: the next chunk is claimable within about a
            # second of work, long before that claim would expire.
            delay = min(delay, OTHER_LANES_RECHECK)
        raise RetryLater(delay=delay, reason="waiting for recipients due later")
    now = clock.now()
    if SendBatch.objects.filter(pk=batch.pk, status=SendBatch.Status.SENDING).update(
        status=SendBatch.Status.COMPLETED, finished_at=now
    ):
        done = SendBatch.objects.get(pk=batch.pk)
        logger.info(
            "batch completed batch=%s sent=%s failed=%s skipped=%s",
            batch.pk,
            done.sent,
            done.failed,
            done.skipped,
        )
    return dict(counts)
