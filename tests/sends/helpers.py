"""Helpers for send tests: run a lane in this process, read and move markers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

from scheduler_app import clock
from scheduler_app.exceptions import RetryLater
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.registry import JobContext, get_task
from scheduler_app.sends.dispatch import run_lane
from scheduler_app.sends.task_names import SEND_BATCH_TASK


@dataclasses.dataclass
class LaneRun:
    """What one run_lane() call ended with: its counts, or the RetryLater it raised."""

    counts: dict[str, int] | None
    retry: RetryLater | None


def run_lane_now(batch: SendBatch | int) -> LaneRun:
    """Run one lane of ``batch`` in this process until it returns or asks to run later."""
    batch_id = batch if isinstance(batch, int) else batch.pk
    try:
        counts = run_lane(
            batch_id, claim="test:%s" % uuid.uuid4().hex[:8], should_stop=lambda: False
        )
    except RetryLater as exc:
        return LaneRun(counts=None, retry=exc)
    return LaneRun(counts=counts, retry=None)


def run_lane_job(batch: SendBatch | int) -> object:
    """Run the send_batch task (as a worker runs a lane job) for ``batch``; return its result."""
    batch_id = batch if isinstance(batch, int) else batch.pk
    return get_task(SEND_BATCH_TASK)(
        JobContext(
            job_id=1,
            task_name=SEND_BATCH_TASK,
            payload={"batch": batch_id},
            payload_version=1,
            attempt=1,
            scheduled_for=clock.now(),
            idempotency_key="1",
        )
    )


def recipient(batch: SendBatch, address: str) -> Recipient:
    """Return the (non-seed) marker of ``address`` in ``batch``."""
    return Recipient.objects.get(batch=batch, address=address, is_seed=False)


def make_due(batch: SendBatch, at: dt.datetime | None = None) -> int:
    """Move every pending marker of ``batch`` to due now (a retry's wait has passed)."""
    return Recipient.objects.filter(batch=batch, status=Recipient.Status.PENDING).update(
        next_attempt_at=at or clock.now() - dt.timedelta(seconds=1)
    )
