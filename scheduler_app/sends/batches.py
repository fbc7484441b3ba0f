"""Send batch operations: freeze, schedule, pause, resume, cancel, undo, seed.

Each status change is one guarded UPDATE (``filter(status__in=...).update``)
that reports whether it won, so an operator's click and a worker never
overwrite each other. Every change is audited in ControlEvent.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import logging
import uuid
from typing import Any

from django.db.models import CharField, F, Q, QuerySet, Value
from django.db.models.functions import Cast, Concat

from scheduler_app import clock, database
from scheduler_app.conf import app_settings
from scheduler_app.controls import as_user, paused_scopes, record
from scheduler_app.database_clock import DatabaseNow
from scheduler_app.db import database_now
from scheduler_app.exceptions import SchedulerError, ValidationError
from scheduler_app.feedback.unsubscribe import recipient_token, with_unsubscribe
from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.scheduling import JobRequest, check_undo_window, schedule, schedule_many
from scheduler_app.sends import states
from scheduler_app.sends.audience import get_audience, thaw_context
from scheduler_app.sends.checklist import ChecklistFailed, run_checklist
from scheduler_app.sends.content import DRAFT_FIELDS, compile_template, fingerprint
from scheduler_app.sends.delivery import Outcome, deliver
from scheduler_app.sends.providers import SenderRefused, SlowDown, get_provider
from scheduler_app.sends.rendering import MessageTemplate, RenderError
from scheduler_app.sends.stale import resolve_stale_alert
from scheduler_app.sends.states import earliest_start
from scheduler_app.sends.task_names import SEND_BATCH_TASK, SEND_MESSAGE_TASK

logger = logging.getLogger("scheduler_app.sends")
Status = SendBatch.Status


class BatchStateError(SchedulerError):
    """The batch is not in a state that allows this."""

    code = "invalid_state"


#: How many recipients of each audience (frozen, live) a preview offers to pick from.
PREVIEW_CHOICES = 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preview:
    """A batch's message rendered for one recipient of its frozen or live audience, or why
    it cannot be. A choice is ``("frozen:<key>" | "live:<key>", what the picker shows)``."""

    frozen: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    live: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    picked: str = ""
    subject: str = ""
    text: str = ""
    html: str = ""
    error: str = ""


def preview(batch: SendBatch, pick: str | None = None, *, find: str = "") -> Preview:
    """Render ``batch``'s message as the send would, for the recipient ``pick``: a frozen
    recipient (``"frozen:<key>"``, once the audience is frozen) or one of the first
    PREVIEW_CHOICES of the live audience (``"live:<key>"``). ``find`` picks the frozen
    recipient with that address (any case) or key. Default: the first frozen recipient,
    else the first of the live audience. Nothing is stored or sent."""
    try:
        template = compile_template(batch)
    except SchedulerError as exc:
        return Preview(error=str(exc))
    source, _, key = (pick or "").partition(":")
    frozen = list(_frozen_recipients(batch))
    live, live_error = _live_rows(batch)
    chosen: Recipient | dict[str, Any] | None = None
    error = ""
    if find.strip():
        chosen = _frozen_recipient(batch, find.strip(), by_address=True)
        if chosen is None:
            error = "No recipient of the frozen audience has the address or key %s." % (
                find.strip()
            )
    elif source == "frozen":
        chosen = _frozen_recipient(batch, key)
    elif source == "live":
        chosen = next((row for row in live if row["key"] == key), None)
    elif frozen or live:
        chosen = frozen[0] if frozen else live[0]
    if isinstance(chosen, Recipient) and chosen.pk not in {r.pk for r in frozen}:
        frozen.insert(0, chosen)  # found beyond the first choices: offer it too
    choices = {
        "frozen": [("frozen:%s" % r.recipient_key, _frozen_label(r)) for r in frozen],
        "live": [("live:%s" % row["key"], row["address"]) for row in live],
    }
    if chosen is None:
        return Preview(**choices, error=error or live_error or "Pick a recipient from the list.")
    if isinstance(chosen, Recipient):
        picked = "frozen:%s" % chosen.recipient_key
        try:
            context = thaw_context(batch.context_types, chosen.context)
            message = template.render(chosen.address, context)
        except RenderError as exc:
            return Preview(**choices, picked=picked, error=_blanked(batch) or exc.message)
    else:
        picked = "live:%s" % chosen["key"]
        try:
            message = template.render(chosen["address"], chosen["context"])
        except RenderError as exc:
            return Preview(**choices, picked=picked, error=exc.message)
    return Preview(
        **choices,
        picked=picked,
        subject=message.subject,
        text=message.text,
        html=message.html or "",
    )


def _frozen_recipients(batch: SendBatch) -> QuerySet:
    """Return the first PREVIEW_CHOICES recipients of the frozen audience (no seeds)."""
    if batch.frozen_at is None:
        return Recipient.objects.none()
    return Recipient.objects.filter(batch=batch, is_seed=False).order_by("id")[:PREVIEW_CHOICES]


def _frozen_recipient(batch: SendBatch, wanted: str, *, by_address: bool = False) -> Any:
    """Return the frozen recipient keyed ``wanted`` (or, ``by_address``, with that address
    in any case), or None."""
    if batch.frozen_at is None or "\x00" in wanted:  # no stored text holds a NUL
        return None
    matches = Q(recipient_key=wanted)
    if by_address:
        matches |= Q(address__iexact=wanted)
    return Recipient.objects.filter(matches, batch=batch, is_seed=False).order_by("id").first()


def _frozen_label(recipient: Recipient) -> str:
    return "%s (%s)" % (recipient.address, recipient.get_status_display())


def _live_rows(batch: SendBatch) -> tuple[list[dict[str, Any]], str]:
    """Return the first PREVIEW_CHOICES rows of the live audience, or why there are none."""
    try:
        query = get_audience(batch.audience, batch.audience_params)
        return list(itertools.islice(query.rows(), PREVIEW_CHOICES)), ""
    except SchedulerError as exc:
        return [], str(exc)


def _blanked(batch: SendBatch) -> str:
    """Say why a frozen recipient's data is gone, if retention blanked it."""
    if batch.contexts_blanked_at is None:
        return ""
    return (
        "Retention blanked the recipients' data of this batch on %s "
        "(RETENTION_RECIPIENT_CONTEXT_DAYS): the message cannot be rendered again."
        % batch.contexts_blanked_at.strftime("%Y-%m-%d")
    )


def schedule_batch(batch: SendBatch, *, by: Any = None, relax: tuple[str, ...] = ()) -> SendBatch:
    """Schedule a draft batch after its pre-flight checklist passes.

    ``relax`` names checklist items to let through (the caller checks the
    permission; SCHEDULER_APP['CHECKLIST_RELAX'] relaxes items for everyone).
    Raises ChecklistFailed listing the failing items, BatchStateError if the
    batch is not a draft. The lanes start at scheduled_at, or after the undo
    window and safety margin if that is later.
    """
    failing = [
        item
        for item in run_checklist(batch)
        if not item.ok and item.name not in relax and item.name not in app_settings.CHECKLIST_RELAX
    ]
    if failing:
        raise ChecklistFailed(failing)
    now = database_now()  # the clock the lanes' claim and the undo compare against
    start = planned_start(batch, now)
    window_ends = now + batch.undo_window
    with database.atomic():
        if not SendBatch.objects.filter(pk=batch.pk, status=Status.DRAFT).update(
            status=Status.SCHEDULED,
            undo_deadline=window_ends if batch.undo_window else None,
            status_changed_by=as_user(by),
            status_changed_at=now,
            status_reason="",
        ):
            raise BatchStateError(
                "Only a draft can be scheduled; this batch is %s." % _status(batch)
            )
        enqueue_lanes(batch, start)
        record("batch", str(batch.pk), "schedule", by=by, reason=", ".join(relax))
    logger.info(
        "batch scheduled batch=%s start=%s timezone=%s undo_deadline=%s",
        batch.pk,
        start.isoformat(),
        batch.timezone,
        window_ends.isoformat(),
    )
    batch.refresh_from_db()
    return batch


def check_pause_reason(reason: str) -> str:
    """Return ``reason`` if an operator may pause a batch with it; else raise ValidationError.

    It must say something, and not pass for the stale-send guard's own reason: resuming
    the guard's pause allows the late send (see resume_batch).
    """
    if not reason or not reason.strip():
        raise ValidationError("A reason is required to pause.")
    if reason.lstrip().startswith(states.STALE_PREFIX):
        raise ValidationError(
            'A pause reason cannot start with "%s": that marks the stale-send guard\'s own '
            "pauses." % states.STALE_PREFIX
        )
    return reason


def pause_batch(batch_id: int, *, by: Any = None, reason: str) -> bool:
    """Pause a scheduled or sending batch; lanes stop before their next chunk."""
    return states.pause(batch_id, by=by, reason=check_pause_reason(reason))


def resume_batch(batch_id: int, *, by: Any = None) -> bool:
    """Resume a paused batch exactly where it stopped (sent markers are kept)."""
    with database.atomic():
        batch = SendBatch.objects.select_for_update().get(pk=batch_id)
        target = Status.SENDING if batch.started_at else Status.SCHEDULED
        # Resuming a batch the stale-send guard paused means "send it anyway".
        stale = batch.status_reason.startswith(states.STALE_PREFIX)
        extra = {"stale_send_allowed": True} if stale else {}
        if not states.transition(batch_id, (Status.PAUSED,), target, by=by, **extra):
            raise BatchStateError(
                "Only a paused batch can be resumed; this batch is %s." % _status(batch)
            )
        now = start = database_now()
        if not batch.started_at:
            # Not started yet: keep its send time and undo window.
            start = max(now, earliest_start(batch) or now)
        # Lanes still waiting (behind a kill switch, for retries) go on: only the missing.
        top_up_lanes(batch, start)
        record("batch", str(batch_id), "resume", by=by)
        if stale:
            resolve_stale_alert(batch_id)
    return True


def cancel_batch(batch_id: int, *, by: Any = None, reason: str = "") -> bool:
    """Cancel a batch that has not finished; the markers stay as the record of what went out."""
    changed = states.transition(
        batch_id,
        states.CANCELLABLE,
        Status.CANCELLED,
        by=by,
        reason=reason,
    )
    if changed:
        _cancel_pending_lanes(batch_id, by=by, now=clock.now())
        record("batch", str(batch_id), "cancel", by=by, reason=reason)
    return changed


def duplicate_batch(batch: SendBatch, *, by: Any = None) -> SendBatch:
    """Return a new draft with ``batch``'s draft fields, named "<name> (copy)", owned by ``by``.

    Any batch can be duplicated (an undone one is cancelled and read-only); the copy
    starts with no dry-run, seed send or send state, so its checklist starts afresh.
    """
    values = {name: getattr(batch, name) for name in DRAFT_FIELDS}
    suffix = " (copy)"
    limit = SendBatch._meta.get_field("name").max_length - len(suffix)
    values["name"] = batch.name[:limit] + suffix
    copy = SendBatch.objects.create(**values, owner=as_user(by))
    record("batch", str(copy.pk), "duplicate", by=by, reason="Copy of batch %s." % batch.pk)
    return copy


@dataclasses.dataclass(frozen=True, kw_only=True)
class UndoOutcome:
    """What undo_batch() did; ``cancelled`` False means it was too late."""

    cancelled: bool
    status: str
    sent: int = 0
    total: int | None = None


def undo_batch(batch_id: int, *, by: Any = None) -> UndoOutcome:
    """Cancel a batch that has not started sending ("undo send").

    Wins exactly when no lane has started: the guarded UPDATE only matches a
    scheduled batch, and a lane's start moves it to sending in a guarded
    UPDATE too. Too late reports how far the send got.
    """
    now = clock.now()
    if SendBatch.objects.filter(pk=batch_id, status=Status.SCHEDULED).update(
        status=Status.CANCELLED,
        status_changed_by=as_user(by),
        status_changed_at=now,
        status_reason="Undone.",
    ):
        _cancel_pending_lanes(batch_id, by=by, now=now)
        record("batch", str(batch_id), "undo", by=by)
        return UndoOutcome(cancelled=True, status=Status.CANCELLED)
    batch = SendBatch.objects.get(pk=batch_id)
    return UndoOutcome(cancelled=False, status=batch.status, sent=batch.sent, total=batch.total)


def batch_progress(batch: SendBatch) -> dict[str, Any]:
    """Return the batch's counters, share done and send rate, for the page and its JSON.

    The rate is the sent count over the sending time, up to now or to the finish, so a
    finished batch keeps the rate it sent at.
    """
    done = batch.sent + batch.failed + batch.skipped
    end = batch.finished_at or clock.now()
    elapsed = (end - batch.started_at).total_seconds() if batch.started_at else 0
    return {
        "status": batch.status,
        "total": batch.total,
        "sent": batch.sent,
        "failed": batch.failed,
        "skipped": batch.skipped,
        "remaining": batch.remaining,
        "percent": round(100 * done / batch.total, 1) if batch.total else 0,
        "rate": round(batch.sent / elapsed, 1) if elapsed > 0 else 0,
        "undo_deadline": batch.undo_deadline.isoformat() if batch.undo_deadline else None,
    }


def seed_send(batch: SendBatch, *, by: Any = None) -> list[Recipient]:
    """Send the batch's message to its seed list through the real provider, recorded as markers.

    Renders with ``seed_context``. Each seed is a Recipient row (is_seed) of
    the batch with key ``seed:<fingerprint>:<address>``, so a repeated seed
    send of the same content is not sent twice, and of two seed sends at once
    only the one that claims a seed sends it. Returns the markers as stored
    afterwards (a seed the other send still holds is pending).
    """
    if not batch.seed_list:
        raise ValidationError("The batch has no seed list.")
    if paused_scopes().covers(queue=app_settings.SEND_QUEUE, task_name=SEND_BATCH_TASK):
        raise BatchStateError("Sends are paused by a kill switch; resume them to seed send.")
    template = compile_template(batch)
    provider = get_provider(batch.provider)
    digest = fingerprint(batch)
    now = clock.now()
    ids = []
    for address in batch.seed_list:
        # With the batch locked, so that retention marking its contexts blanked sees this
        # seed or is seen by it (retention._mark_blanked_batches).
        with database.atomic():
            if not SendBatch.objects.select_for_update().filter(pk=batch.pk).exists():
                raise BatchStateError("This batch was deleted (retention, or an operator).")
            marker, created = Recipient.objects.get_or_create(
                batch=batch,
                recipient_key="seed:%s:%s" % (digest[:12], address),
                defaults={
                    "address": address,
                    "is_seed": True,
                    "context": batch.seed_context,
                    "next_attempt_at": now,
                },
            )
            if created:  # a context retention may have to blank again (a finished batch's)
                SendBatch.objects.filter(pk=batch.pk).exclude(contexts_blanked_at=None).update(
                    contexts_blanked_at=None
                )
        if marker.status != Recipient.Status.SENT:  # new, or failed last time: (re)send
            _send_seed(marker, template, provider)
        ids.append(marker.pk)
    stored = Recipient.objects.in_bulk(ids)
    # A finished batch's marker may have gone with retention meanwhile.
    markers = [stored[pk] for pk in ids if pk in stored]
    if all(m.status == Recipient.Status.SENT for m in markers):
        SendBatch.objects.filter(pk=batch.pk).update(seed_sent_at=now, seed_fingerprint=digest)
    record("batch", str(batch.pk), "seed", by=by)
    return markers


def _send_seed(marker: Recipient, template: MessageTemplate, provider: Any) -> None:
    """Claim the seed marker, send it and record the outcome; do nothing if another send holds it.

    The claim is one guarded UPDATE (not sent, no live claim), so exactly one
    of concurrent seed sends calls the provider; the outcome is written only
    while the claim is still ours.
    """
    claim = "seed:%s" % uuid.uuid4().hex
    claimed = (
        Recipient.objects.filter(pk=marker.pk)
        .exclude(status=Recipient.Status.SENT)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=DatabaseNow()))
        .update(
            claimed_by=claim,
            claimed_until=DatabaseNow(dt.timedelta(seconds=app_settings.SEND_CLAIM_SECONDS)),
        )
    )
    if not claimed:
        logger.info("seed held by another seed send batch=%s seed=%s", marker.batch_id, marker.pk)
        return
    try:
        message = with_unsubscribe(
            template.render(marker.address, marker.context), recipient_token(marker.pk)
        )
        outcome = deliver(provider, message, marker.idempotency_key, marker.pk, marker.attempts + 1)
    except (RenderError, SlowDown, SenderRefused) as exc:
        outcome = Outcome(marker.pk, Recipient.Status.FAILED, error=str(exc))
    Recipient.objects.filter(pk=marker.pk, claimed_by=claim).update(
        status=(
            outcome.status
            if outcome.status != Recipient.Status.PENDING
            else Recipient.Status.FAILED
        ),
        attempts=F("attempts") + 1,
        sent_at=outcome.sent_at,
        provider_message_id=outcome.message_id,
        last_error=outcome.error,
        claimed_by="",
        claimed_until=None,
    )


def send_message(
    to: str,
    subject: str,
    text: str,
    *,
    html: str = "",
    undo_window: dt.timedelta | float | None = None,
    owner: Any = None,
    provider: str = "email",
    unsubscribe_scope: str | None = None,
    outbox: bool = True,
) -> Job:
    """Send one email through the worker, after an undo window if given ("undo send").

    Returns the job; ``cancel(job.pk)`` inside the window stops it. The job
    id is the provider idempotency key, so a rerun never sends it twice.
    An address on the suppression list (all mail, or ``unsubscribe_scope``) is
    skipped. With ``unsubscribe_scope`` ('' for all mail, or a list name), the
    message carries one-click List-Unsubscribe headers for that scope;
    transactional messages leave it None and carry none. ``outbox`` as for schedule().
    """
    get_provider(provider)  # fail now on an unknown provider, not in the worker
    payload = {"to": to, "subject": subject, "text": text, "html": html, "provider": provider}
    if unsubscribe_scope is not None:
        if not isinstance(unsubscribe_scope, str) or len(unsubscribe_scope) > 100:
            raise ValidationError(
                "unsubscribe_scope must be a list name of at most 100 characters."
            )
        payload["unsubscribe_scope"] = unsubscribe_scope
    return schedule(
        SEND_MESSAGE_TASK,
        payload,
        undo_window=undo_window,
        owner=owner,
        queue=app_settings.SEND_QUEUE,
        outbox=outbox,
    )


def enqueue_lanes(batch: SendBatch, start: dt.datetime, count: int | None = None) -> None:
    """Schedule ``count`` (default SEND_LANES) lane jobs of the batch to start at ``start``."""
    token = uuid.uuid4().hex[:12]
    schedule_many(
        SEND_BATCH_TASK,
        [
            JobRequest(
                payload={"batch": batch.pk},
                at=start,
                unique_key="%s%s:%s" % (lane_key_prefix(batch.pk), lane, token),
            )
            for lane in range(app_settings.SEND_LANES if count is None else count)
        ],
        queue=app_settings.SEND_QUEUE,
        owner=batch.owner,
    )


def top_up_lanes(batch: SendBatch, start: dt.datetime) -> int:
    """Schedule the lanes the batch lacks (SEND_LANES less its pending and running ones) to
    start at ``start``; return how many. The caller holds the batch row."""
    live = lane_jobs(batch.pk).filter(status__in=Job.UNFINISHED).count()
    missing = app_settings.SEND_LANES - live
    if missing > 0:
        enqueue_lanes(batch, start, missing)
    return max(missing, 0)


def _cancel_pending_lanes(batch_id: int, *, by: Any, now: dt.datetime) -> None:
    """Cancel the batch's lane jobs that have not started; running lanes stop on their own."""
    lane_jobs(batch_id).filter(status=Job.Status.PENDING).update(
        status=Job.Status.CANCELLED, cancelled_at=now, finished_at=now, cancelled_by=as_user(by)
    )


def lane_jobs(batch_id: int | Any) -> QuerySet[Job]:
    """Return the batch's lane jobs; ``batch_id`` may be an OuterRef."""
    if isinstance(batch_id, int):
        prefix: Any = lane_key_prefix(batch_id)
    else:
        prefix = Concat(Value("batch:"), Cast(batch_id, CharField()), Value(":lane:"))
    return Job.objects.filter(task_name=SEND_BATCH_TASK, unique_key__startswith=prefix)


def lane_key_prefix(batch_id: int) -> str:
    """Return the unique_key prefix of the batch's lane jobs."""
    return "batch:%s:lane:" % batch_id


def planned_start(batch: SendBatch, now: dt.datetime) -> dt.datetime:
    """Return when a draft scheduled at ``now`` starts: its send time, or after its undo window
    and safety margin if that is later. Raise InvalidSchedule for an undo window that
    schedule() would refuse."""
    window_ends = now + check_undo_window(batch.undo_window, now=now)
    if batch.undo_window:
        window_ends += dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN)
    return max(batch.scheduled_at or now, window_ends)


def _status(batch: SendBatch) -> str:
    return SendBatch.objects.filter(pk=batch.pk).values_list("status", flat=True).first() or "gone"
