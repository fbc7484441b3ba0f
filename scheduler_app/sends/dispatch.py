"""The send tasks: ``send_batch`` runs one lane of a batch, ``send_message`` one message.

A scheduled batch runs as SEND_LANES jobs of the ``scheduler_app.send_batch`` task, so
several workers share one send (a worker may run several lanes of a batch, one per
handler thread). Each lane goes through these modules, each holding one promise:

    sends.start      the first lane moves the batch to sending; the audience freeze
    sends.lane       the lane's loop, a chunk's path, the window's flow, sent alone
    sends.halts      kill switches and the batch's status: stop within a second
    sends.charges    an attempt commits before its call; the ready group; groups
    sends.delivery   one provider call and its outcome; per-recipient retries
    sends.markers    a marker written as soon as its call returns, fenced by the claim
    sends.breaker    the automatic breaker, across lane runs
    sends.finish     wait for recipients due later, or complete the batch

Durability contract: a recipient's attempt commits before its call, and its sent
marker with the lane's next statement after the call returns (the next recipient's
attempt, or on its own while the lane waits), so a crash re-sends at most the calls in
flight, never more than the window (SEND_WINDOW), each with the same key
``<batch>:<recipient key>`` and Message-ID. A crash is charged to the recipients in
flight: after RECIPIENT_MAX_ATTEMPTS of them one fails. Counters go to the lane's own
LaneProgress row, never to the batch row, so no lane waits for another. A provider that
declares ``idempotent = True`` (one delivery per key) lets markers wait for the end of
the chunk, and its lane charges attempts to groups of recipients (1, 2, 4, ... up to
BEGIN_GROUP_MAX per statement), so a crash re-sends the chunk's unmarked recipients (the
provider drops the copies) and charges the group in flight. A lane that keeps raising
pauses its batch (LANE_ERRORS_BEFORE_PAUSE). A batch is never re-run as a whole, and the
sweeper (sends.sweeper) gives lanes back to a batch left without any.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.db.models import F

from scheduler_app.database import connection
from scheduler_app.exceptions import RetryLater, describe
from scheduler_app.feedback import suppressions
from scheduler_app.feedback.unsubscribe import headers as unsubscribe_headers
from scheduler_app.feedback.unsubscribe import message_token
from scheduler_app.models import SendBatch
from scheduler_app.registry import JobContext, task
from scheduler_app.retry import RetryPolicy
from scheduler_app.sends import stale, states
from scheduler_app.sends.lane import Lane
from scheduler_app.sends.providers import SlowDown, TransientSendError, get_provider, in_use
from scheduler_app.sends.rendering import Message, MessageTemplate, RenderError
from scheduler_app.sends.start import start_sending
from scheduler_app.sends.task_names import SEND_BATCH_TASK, SEND_MESSAGE_TASK

logger = logging.getLogger("scheduler_app.sends")

#: A lane waits (without using attempts) behind a kill switch, a 429, or recipients due later.
LANE_RETRY = RetryPolicy(retry_later_budget=dt.timedelta(days=30))
#: Lane errors (exceptions, not crashes) in a row, with nothing marked, that pause the batch.
LANE_ERRORS_BEFORE_PAUSE = 3


@task(name=SEND_BATCH_TASK, max_attempts=25, retry=LANE_RETRY)
def send_batch(job: JobContext) -> dict[str, int]:
    """Run one lane of a batch until it is done, paused, cancelled or the worker stops."""
    batch_id = job.payload["batch"]
    try:
        return run_lane(
            batch_id,
            claim="%s:%s" % (job.job_id, uuid.uuid4().hex[:8]),
            should_stop=job.should_stop,
        )
    except RetryLater:
        raise
    except (OperationalError, InterfaceError) as exc:
        # The database is away (not the batch's fault), unless the connection still
        # works: then it is a statement that keeps failing (a missing table, a timeout).
        if connection.is_usable():
            _count_lane_error(batch_id, exc)
        raise
    except Exception as exc:
        _count_lane_error(batch_id, exc)
        raise


def run_lane(batch_id: int, *, claim: str, should_stop: Callable[[], bool]) -> dict[str, int]:
    """Send chunks of ``batch_id`` until nothing is left for this lane; return its counts."""
    batch = SendBatch.objects.get(pk=batch_id)
    try:
        template = MessageTemplate.compile(
            batch.subject_template, batch.text_template, batch.html_template
        )
    except RenderError as exc:
        if batch.started_at is not None:
            # Other workers compiled it (a worker of an older deploy lacks a tag
            # library?): a lane error, which pauses the batch if it persists.
            raise
        states.fail(batch_id, "The template does not compile: %s" % exc)
        return {}
    batch = start_sending(batch_id)
    if batch is None:
        return {}
    return Lane(batch, template, claim=claim, should_stop=should_stop).run()


def _count_lane_error(batch_id: int, exc: Exception) -> None:
    """Count a lane error; pause the batch at LANE_ERRORS_BEFORE_PAUSE in a row."""
    SendBatch.objects.filter(pk=batch_id).update(lane_errors=F("lane_errors") + 1)
    errors = SendBatch.objects.filter(pk=batch_id).values_list("lane_errors", flat=True).first()
    logger.warning(
        "lane error batch=%s errors_in_a_row=%s error=%s", batch_id, errors, describe(exc)
    )
    if errors is not None and errors >= LANE_ERRORS_BEFORE_PAUSE:
        states.pause(
            batch_id,
            reason="The send stopped after %s lane errors in a row with nothing sent; "
            "last error: %s" % (errors, describe(exc)),
        )


#: A single message retries only what may pass; a refusal fails at once.
MESSAGE_RETRY = RetryPolicy(
    base=dt.timedelta(seconds=30), cap=dt.timedelta(hours=1), retry_on=(TransientSendError,)
)


@task(name=SEND_MESSAGE_TASK, max_attempts=5, retry=MESSAGE_RETRY)
def send_message(job: JobContext) -> dict[str, str]:
    """Send one message scheduled by sends.batches.send_message; key = the job's key."""
    late = stale.message_late_by(job)
    if late is not None:
        raise stale.refuse_stale_message(job, late)
    data = job.payload
    scope = data.get("unsubscribe_scope")
    suppressed = suppressions.reasons_for([data["to"]], scope or "")
    if suppressed:
        logger.info("message skipped job=%s reason=%s", job.job_id, suppressed[data["to"]])
        return {"skipped": suppressed[data["to"]]}
    message = Message(
        to=data["to"],
        subject=data["subject"],
        text=data["text"],
        html=data.get("html", ""),
        headers={} if scope is None else unsubscribe_headers(message_token(job.job_id)),
    )
    try:
        with in_use(get_provider(data.get("provider", "email"))) as provider:
            message_id = provider.send(message, "message:%s" % job.idempotency_key)
    except SlowDown as exc:
        raise RetryLater(delay=exc.delay, reason=str(exc)) from exc
    return {"message_id": str(message_id)}
