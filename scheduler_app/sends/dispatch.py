"""Delivery: lanes of a batch claim chunks of recipients and send them.

A scheduled batch runs as SEND_LANES jobs of the ``scheduler_app.send_batch``
task, so several workers share one send. Each lane, per chunk of recipients:
checks the batch status and the kill switches, claims the chunk (SKIP
LOCKED, with a claim that expires), takes tokens from the shared limiter,
checks suppression, renders, calls the provider with the idempotency key
``<batch>:<recipient key>``, and records the markers and counters.

Durability contract: a recipient is marked in the same transaction as the
counters, right after its chunk was sent. If a worker dies mid-chunk, the
chunk's claims expire after SEND_CLAIM_SECONDS and those recipients are
sent again, always with the same idempotency key; nothing outside the
in-flight chunk is ever sent twice. A batch is never re-run as a whole.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import F, Min
from django.utils.module_loading import import_string

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.controls import paused_scopes
from scheduler_app.db import backend
from scheduler_app.exceptions import RetryLater
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.registry import JobContext, task
from scheduler_app.retry import RetryPolicy
from scheduler_app.sends import limiter
from scheduler_app.sends.providers import (
    PermanentSendError,
    Provider,
    SlowDown,
    TransientSendError,
    get_provider,
)
from scheduler_app.sends.rendering import Message, MessageTemplate, RenderError

logger = logging.getLogger("scheduler_app.sends")

SEND_BATCH_TASK = "scheduler_app.send_batch"
SEND_MESSAGE_TASK = "scheduler_app.send_message"
#: Recipient retries: full-jitter backoff between attempts of one recipient.
RECIPIENT_RETRY = RetryPolicy(base=dt.timedelta(seconds=30), cap=dt.timedelta(hours=1))
#: A lane waits (without using attempts) while paused or until local delivery times.
LANE_RETRY = RetryPolicy(retry_later_budget=dt.timedelta(days=30))
PAUSED_RECHECK = dt.timedelta(seconds=2)
#: Seconds between a lane's looks at pause/cancel and the kill switches inside a chunk.
HALT_RECHECK = 1.0
#: A lane hands back the rest of its chunk this long before the chunk's claim expires,
#: so it never calls the provider for a recipient another worker may have claimed.
CLAIM_MARGIN = dt.timedelta(seconds=1)

Status = Recipient.Status


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one claimed recipient."""

    recipient_id: int
    status: str
    sent_at: dt.datetime | None = None
    message_id: str = ""
    error: str = ""
    next_attempt_at: dt.datetime | None = None
    refund: int = 0

    @property
    def failed_attempt(self) -> bool:
        """Return True for attempts that count against the automatic breaker."""
        return self.status == Status.FAILED or (self.status == Status.PENDING and not self.refund)


@task(name=SEND_BATCH_TASK, max_attempts=25, retry=LANE_RETRY)
def send_batch(job: JobContext) -> dict[str, int]:
    """Run one lane of a batch until it is done, paused, cancelled or the worker stops."""
    return run_lane(
        job.payload["batch"],
        claim="%s:%s" % (job.job_id, uuid.uuid4().hex[:8]),
        should_stop=job.should_stop,
    )


def run_lane(batch_id: int, *, claim: str, should_stop: Callable[[], bool]) -> dict[str, int]:
    """Send chunks of ``batch_id`` until nothing is left for this lane; return its counts."""
    batch = start_sending(batch_id)
    if batch is None:
        return {}
    try:
        template = MessageTemplate.compile(
            batch.subject_template, batch.text_template, batch.html_template
        )
    except RenderError as exc:
        _fail_batch(batch, "The template does not compile: %s" % exc)
        return {}
    provider = get_provider(batch.provider)
    # The batch's window is shared by its lanes, so the batch trips after about N attempts.
    window = batch.breaker_window or app_settings.BREAKER_WINDOW
    breaker: collections.deque[bool] = collections.deque(
        maxlen=max(1, math.ceil(window / app_settings.SEND_LANES))
    )
    threshold = batch.breaker_threshold or app_settings.BREAKER_THRESHOLD
    counts: collections.Counter[str] = collections.Counter()
    unlogged = 0
    while True:
        if should_stop():
            raise RetryLater(delay=0, reason="worker stopping; another worker continues the send")
        status = SendBatch.objects.filter(pk=batch_id).values_list("status", flat=True).first()
        if status != SendBatch.Status.SENDING:
            logger.info("lane stops batch=%s status=%s", batch_id, status)
            return dict(counts)
        paused = paused_scopes()
        if paused.covers(queue=app_settings.SEND_QUEUE, task_name=SEND_BATCH_TASK):
            raise RetryLater(delay=PAUSED_RECHECK, reason="sends are paused by a kill switch")
        size = limiter.chunk_size_for(batch.rate_limit_key, app_settings.SEND_CHUNK_SIZE)
        now = clock.now()
        until = now + dt.timedelta(seconds=app_settings.SEND_CLAIM_SECONDS)
        rows = backend().claim_recipients(
            batch_id=batch_id, claim=claim, limit=size, now=now, until=until
        )
        if not rows:
            return _finish_lane(batch, counts)
        outcomes = _send_chunk(
            batch,
            template,
            provider,
            rows,
            should_stop,
            send_by=until - CLAIM_MARGIN,
            halted=_halt_check(batch_id),
        )
        kept = _record(batch_id, claim, outcomes)
        counts.update(kept)
        unlogged += sum(kept[s] for s in (Status.SENT, Status.FAILED, Status.SKIPPED))
        if unlogged >= app_settings.PROGRESS_LOG_EVERY:
            unlogged = 0
            _log_progress(batch_id)
        breaker.extend(o.failed_attempt for o in outcomes if not o.refund)
        if len(breaker) == breaker.maxlen and sum(breaker) / len(breaker) > threshold:
            reason = "Automatic breaker: %s of the last %s attempts failed (threshold %.0f%%)." % (
                sum(breaker),
                len(breaker),
                threshold * 100,
            )
            from scheduler_app.sends.batches import pause_batch

            pause_batch(batch_id, reason=reason)
            logger.warning("breaker tripped batch=%s %s", batch_id, reason)
            return dict(counts)


def start_sending(batch_id: int) -> SendBatch | None:
    """Move a scheduled batch to sending, freezing its audience first; return it if sending."""
    from scheduler_app.sends.batches import freeze_audience

    with transaction.atomic():
        batch = SendBatch.objects.select_for_update().get(pk=batch_id)
        if batch.status == SendBatch.Status.SCHEDULED:
            now = clock.now()
            if batch.frozen_at is None:
                count = freeze_audience(batch, now=now)
                if count > batch.expected_max_audience:
                    _fail_batch(
                        batch,
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


def _send_chunk(
    batch: SendBatch,
    template: MessageTemplate,
    provider: Provider,
    rows: list[tuple],
    should_stop: Callable[[], bool],
    *,
    send_by: dt.datetime,
    halted: Callable[[], str],
) -> list[Outcome]:
    """Send a claimed chunk, one limiter token per call; hand back what must not be sent now.

    Before each call: stop if the claim is about to expire, the batch was
    paused or cancelled, a kill switch covers sends, or the worker stops.
    """
    limited = limiter.is_limited(batch.rate_limit_key)
    suppressed = _suppressed([row[2] for row in rows], batch)
    outcomes: list[Outcome] = []
    slow_down: SlowDown | None = None
    halt = ""
    for recipient_id, key, address, _tz, context, attempts in rows:
        if not halt and slow_down is None:
            halt = _why_halt(send_by, halted, should_stop)
        if halt or slow_down is not None:
            # Not sent: hand it back as it was (no attempt used).
            delay = slow_down.delay if slow_down else dt.timedelta(0)
            outcomes.append(
                Outcome(
                    recipient_id,
                    Status.PENDING,
                    refund=1,
                    next_attempt_at=clock.now() + delay,
                    error=str(slow_down) if slow_down else "",
                )
            )
            continue
        if address in suppressed:
            outcomes.append(Outcome(recipient_id, Status.SKIPPED, error=suppressed[address]))
            continue
        try:
            message = template.render(address, _context(context))
        except RenderError as exc:
            outcomes.append(Outcome(recipient_id, Status.FAILED, error=str(exc)))
            continue
        if limited and not limiter.wait_for_token(batch.rate_limit_key, should_stop=should_stop):
            halt = "worker stopping"
            outcomes.append(
                Outcome(recipient_id, Status.PENDING, refund=1, next_attempt_at=clock.now())
            )
            continue
        try:
            outcomes.append(
                _deliver(provider, message, "%s:%s" % (batch.pk, key), recipient_id, attempts)
            )
        except SlowDown as exc:  # this one and the rest of the chunk wait, no attempt used
            slow_down = exc
            outcomes.append(
                Outcome(
                    recipient_id,
                    Status.PENDING,
                    refund=1,
                    next_attempt_at=clock.now() + exc.delay,
                    error=str(exc),
                )
            )
    if halt:
        logger.info("chunk handed back batch=%s reason=%s", batch.pk, halt)
    return outcomes


def _why_halt(
    send_by: dt.datetime, halted: Callable[[], str], should_stop: Callable[[], bool]
) -> str:
    """Return why the rest of a chunk must not be sent now, or ''."""
    if clock.now() >= send_by:
        return "claim about to expire"
    if should_stop():
        return "worker stopping"
    return halted()


def _halt_check(batch_id: int) -> Callable[[], str]:
    """Return a function saying why the lane must stop ('' to go on), looking once a second."""
    next_look = time.monotonic() + HALT_RECHECK

    def check() -> str:
        nonlocal next_look
        if time.monotonic() < next_look:
            return ""
        next_look = time.monotonic() + HALT_RECHECK
        status = SendBatch.objects.filter(pk=batch_id).values_list("status", flat=True).first()
        if status != SendBatch.Status.SENDING:
            return "batch is %s" % status
        if paused_scopes().covers(queue=app_settings.SEND_QUEUE, task_name=SEND_BATCH_TASK):
            return "sends are paused by a kill switch"
        return ""

    return check


def _deliver(
    provider: Provider, message: Message, key: str, recipient_id: int, attempts: int
) -> Outcome:
    """Call the provider once; raise SlowDown, else return the recipient's outcome."""
    try:
        message_id = provider.send(message, key)
    except SlowDown:
        raise
    except PermanentSendError as exc:
        return Outcome(recipient_id, Status.FAILED, error="%s: %s" % (type(exc).__name__, exc))
    except Exception as exc:  # TransientSendError, or a provider bug: retry this recipient
        error = "%s: %s" % (type(exc).__name__, exc)
        if not isinstance(exc, TransientSendError):
            logger.exception("provider raised an unexpected error key=%s", key)
        if attempts >= app_settings.RECIPIENT_MAX_ATTEMPTS:
            return Outcome(recipient_id, Status.FAILED, error=error)
        return Outcome(
            recipient_id,
            Status.PENDING,
            error=error,
            next_attempt_at=clock.now() + RECIPIENT_RETRY.backoff(attempts),
        )
    return Outcome(recipient_id, Status.SENT, sent_at=clock.now(), message_id=str(message_id))


def _record(batch_id: int, claim: str, outcomes: list[Outcome]) -> collections.Counter[str]:
    """Write the chunk's markers and the batch counters in one transaction."""
    rows = [
        (o.recipient_id, o.status, o.sent_at, o.message_id, o.error, o.next_attempt_at, o.refund)
        for o in outcomes
    ]
    with transaction.atomic():
        kept = collections.Counter(backend().mark_recipients(rows, claim=claim))
        if kept[Status.SENT] or kept[Status.FAILED] or kept[Status.SKIPPED]:
            SendBatch.objects.filter(pk=batch_id).update(
                sent=F("sent") + kept[Status.SENT],
                failed=F("failed") + kept[Status.FAILED],
                skipped=F("skipped") + kept[Status.SKIPPED],
            )
    if sum(kept.values()) < len(outcomes):
        logger.warning(
            "chunk claim expired, some markers discarded batch=%s claim=%s", batch_id, claim
        )
    return kept


def _finish_lane(batch: SendBatch, counts: Mapping[str, int]) -> dict[str, int]:
    """No due recipient for this lane: wait for retries, or complete the batch."""
    pending = Recipient.objects.filter(batch=batch, status=Status.PENDING, is_seed=False)
    earliest = pending.aggregate(at=Min("next_attempt_at"))["at"]
    if earliest is not None:
        # Retries and local delivery times still to come, or other lanes' claims.
        raise RetryLater(
            delay=max(earliest - clock.now(), dt.timedelta(seconds=1)),
            reason="waiting for recipients due later",
        )
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


def _fail_batch(batch: SendBatch, reason: str) -> None:
    SendBatch.objects.filter(pk=batch.pk).update(
        status=SendBatch.Status.FAILED, status_reason=reason, status_changed_at=clock.now()
    )
    batch.status = SendBatch.Status.FAILED
    logger.error("batch failed batch=%s reason=%s", batch.pk, reason)


def _suppressed(addresses: list[str], batch: SendBatch) -> dict[str, str]:
    """Return {address: reason} for addresses the project's suppression check refuses now."""
    path = app_settings.SUPPRESSION_CHECK
    if not path or not addresses:
        return {}
    return dict(import_string(path)(addresses, batch))


def _context(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value or {})


def _log_progress(batch_id: int) -> None:
    batch = SendBatch.objects.get(pk=batch_id)
    logger.info(
        "batch progress batch=%s total=%s sent=%s failed=%s skipped=%s remaining=%s",
        batch_id,
        batch.total,
        batch.sent,
        batch.failed,
        batch.skipped,
        batch.remaining,
    )


#: A single message retries only what may pass; a refusal fails at once.
MESSAGE_RETRY = RetryPolicy(
    base=dt.timedelta(seconds=30), cap=dt.timedelta(hours=1), retry_on=(TransientSendError,)
)


@task(name=SEND_MESSAGE_TASK, max_attempts=5, retry=MESSAGE_RETRY)
def send_message(job: JobContext) -> dict[str, str]:
    """Send one message scheduled by sends.batches.send_message; key = the job's key."""
    data = job.payload
    message = Message(
        to=data["to"], subject=data["subject"], text=data["text"], html=data.get("html", "")
    )
    provider = get_provider(data.get("provider", "email"))
    try:
        message_id = provider.send(message, "message:%s" % job.idempotency_key)
    except SlowDown as exc:
        raise RetryLater(delay=exc.delay, reason=str(exc)) from exc
    return {"message_id": str(message_id)}
