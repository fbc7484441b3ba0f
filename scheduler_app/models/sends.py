"""Bulk sends: the batch, its frozen recipients (the sent markers), and rate limits."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Max, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce, Upper
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock
from scheduler_app.models.schedules import validate_timezone


def validate_breaker_threshold(value: float) -> None:
    """Raise ValidationError unless ``value`` is above 0 and at most 1, as BREAKER_THRESHOLD
    must be (check E086)."""
    if not 0 < value <= 1:
        raise ValidationError(
            _("The breaker threshold must be above 0 and at most 1 (a share of failed attempts)."),
            code="invalid_breaker_threshold",
        )


class SendBatchQuerySet(models.QuerySet):
    """Queries on batches."""

    def with_lane_counts(self) -> SendBatchQuerySet:
        """Return the batches with their lanes' counts summed in (one query for a list)."""
        lanes = LaneProgress.objects.filter(batch=OuterRef("pk")).order_by().values("batch")
        return self.annotate(
            **{
                "lanes_%s" % name: Coalesce(Subquery(lanes.annotate(n=Sum(name)).values("n")), 0)
                for name in LANE_COUNTS
            },
            lanes_progressed_at=Subquery(lanes.annotate(at=Max("progressed_at")).values("at")),
        )


#: The counters a lane keeps in its LaneProgress row.
LANE_COUNTS = ("sent", "failed", "skipped")


def _counter(name: str) -> property:
    """Return the property reading counter ``name``: the batch row's plus its lanes'."""

    def get(batch: SendBatch) -> int:
        return getattr(batch, "counted_%s" % name) + batch.lane_counts()[name]

    def set_(batch: SendBatch, value: int) -> None:
        setattr(batch, "counted_%s" % name, value)

    return property(
        get, set_, doc="Recipients %s: counted on the batch row plus by its lanes." % name
    )


class SendBatch(models.Model):
    """One message to one frozen audience, sent at most once per recipient."""

    class Status(models.TextChoices):
        DRAFT = "draft", _("draft")
        SCHEDULED = "scheduled", _("scheduled")
        SENDING = "sending", _("sending")
        PAUSED = "paused", _("paused")
        COMPLETED = "completed", _("completed")
        CANCELLED = "cancelled", _("cancelled")
        FAILED = "failed", _("failed")

    name = models.CharField(max_length=200)
    subject_template = models.CharField(max_length=998)
    text_template = models.TextField()
    html_template = models.TextField(blank=True, default="")

    audience = models.CharField(max_length=100, help_text=_("A registered audience source."))
    audience_params = models.JSONField(default=dict, blank=True)
    expected_max_audience = models.PositiveIntegerField(
        help_text=_("Circuit breaker: the send refuses to start with more recipients.")
    )
    seed_list = models.JSONField(default=list, blank=True, help_text=_("Addresses for seed sends."))
    seed_context = models.JSONField(default=dict, blank=True)

    scheduled_at = models.DateTimeField(null=True, blank=True, help_text=_("Stored in UTC."))
    timezone = models.CharField(
        max_length=64,
        default="UTC",
        validators=[validate_timezone],
        help_text=_("The time zone the sender meant."),
    )
    local_delivery_time = models.TimeField(
        null=True, blank=True, help_text=_("Deliver at this local time in each recipient's zone.")
    )
    undo_window = models.DurationField(default=dt.timedelta(0))
    undo_deadline = models.DateTimeField(null=True, blank=True, editable=False)

    provider = models.CharField(max_length=100, default="email")
    rate_limit_key = models.CharField(max_length=100, default="email")
    # None: SCHEDULER_APP's BREAKER_WINDOW and BREAKER_THRESHOLD.
    breaker_window = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    breaker_threshold = models.FloatField(
        null=True, blank=True, validators=[validate_breaker_threshold]
    )

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    status_reason = models.TextField(blank=True, default="")
    status_changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status_changed_at = models.DateTimeField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="scheduler_send_batches",
    )

    total = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # Counted on the batch row by workers of releases before LaneProgress (still, during
    # a rolling deploy); lanes now count in LaneProgress rows, so that no lane waits on
    # another's lock on this row. Read sent, failed and skipped: both added up.
    counted_sent = models.PositiveIntegerField(default=0, editable=False, db_column="sent")
    counted_failed = models.PositiveIntegerField(default=0, editable=False, db_column="failed")
    counted_skipped = models.PositiveIntegerField(default=0, editable=False, db_column="skipped")
    # Lane errors (not crashes) in a row with nothing marked; the batch pauses at a limit.
    lane_errors = models.PositiveIntegerField(default=0, db_default=0, editable=False)

    frozen_at = models.DateTimeField(null=True, blank=True, editable=False)
    # {context name: "date" | "datetime" | "time" | "decimal:<places>" | "uuid" | "bool"},
    # recorded at the freeze: the frozen JSON has no dates (sends.audience.thaw_context).
    # Nullable, so workers that predate it can still create batches during a deploy.
    context_types = models.JSONField(null=True, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When retention had blanked every recipient's context (RETENTION_RECIPIENT_CONTEXT_DAYS):
    # later runs skip the batch instead of reading its recipients again.
    contexts_blanked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The last time a lane of an older release marked a recipient (database clock); lanes
    # now record theirs in LaneProgress. Read last_progress().
    progressed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # An operator resumed it after the stale-send guard paused it: it may send late.
    stale_send_allowed = models.BooleanField(default=False, db_default=False, editable=False)

    dry_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    dry_run_fingerprint = models.CharField(max_length=64, blank=True, default="", editable=False)
    dry_run_audience = models.PositiveIntegerField(null=True, blank=True, editable=False)
    dry_run_problems = models.PositiveIntegerField(null=True, blank=True, editable=False)
    dry_run_report = models.CharField(max_length=300, blank=True, default="", editable=False)
    dry_run_summary = models.JSONField(default=dict, blank=True, editable=False)
    seed_sent_at = models.DateTimeField(null=True, blank=True, editable=False)
    seed_fingerprint = models.CharField(max_length=64, blank=True, default="", editable=False)

    created_at = models.DateTimeField(default=clock.now, editable=False)

    objects = SendBatchQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "send batches"
        permissions = [
            ("resume_sendbatch", "Can resume a paused send"),
            ("relax_checklist", "Can schedule a send with failing checklist items"),
        ]
        indexes = [models.Index(fields=["status", "scheduled_at"], name="scheduler_batch_status")]

    def __str__(self) -> str:
        return self.name

    sent = _counter("sent")
    failed = _counter("failed")
    skipped = _counter("skipped")

    def lane_counts(self) -> dict[str, int]:
        """Return what the batch's lanes counted (summed once per instance, or taken from
        SendBatchQuerySet.with_lane_counts()); refresh_from_db() reads them again."""
        try:
            return self._lane_counts
        except AttributeError:
            pass
        if hasattr(self, "lanes_sent"):
            counts = {name: getattr(self, "lanes_%s" % name) for name in LANE_COUNTS}
        elif self.pk is None:
            counts = dict.fromkeys(LANE_COUNTS, 0)
        else:
            sums = self.lane_progress.aggregate(**{name: Sum(name) for name in LANE_COUNTS})
            counts = {name: sums[name] or 0 for name in LANE_COUNTS}
        self._lane_counts: dict[str, int] = counts
        return counts

    def last_progress(self) -> dt.datetime | None:
        """Return when a lane last marked a recipient (database clock), None if none did."""
        if hasattr(self, "lanes_progressed_at"):
            lanes = self.lanes_progressed_at
        else:
            lanes = self.lane_progress.aggregate(at=Max("progressed_at"))["at"]
        return max((at for at in (self.progressed_at, lanes) if at is not None), default=None)

    def refresh_from_db(self, *args, **kwargs) -> None:
        """Reload the batch, its lanes' counts included."""
        for name in ("_lane_counts", "lanes_progressed_at", *("lanes_%s" % n for n in LANE_COUNTS)):
            self.__dict__.pop(name, None)
        super().refresh_from_db(*args, **kwargs)

    @property
    def remaining(self) -> int | None:
        """Return recipients neither sent, failed nor skipped (None before the freeze)."""
        if self.total is None:
            return None
        return self.total - self.sent - self.failed - self.skipped


class LaneProgress(models.Model):
    """What one run of a lane marked: its own counter row, so lanes never queue on a shared
    lock (the batch row) and the batch's counters stay exact (SendBatch sums them)."""

    batch = models.ForeignKey(SendBatch, on_delete=models.CASCADE, related_name="lane_progress")
    claim = models.CharField(max_length=200, unique=True)
    sent = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    # When the lane last marked a recipient (database clock); None before it marked any.
    progressed_at = models.DateTimeField(null=True, blank=True)
    # The automatic breaker's window as this lane left it ("1": an attempt that failed or
    # is to be retried, "0": one that did not), oldest first; the batch's next lanes
    # start from it, so the breaker's window lasts across lane runs.
    breaker_window = models.CharField(max_length=1000, blank=True, default="", db_default="")

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "lane progress"

    def __str__(self) -> str:
        return "%s: %s sent" % (self.claim, self.sent)


class Recipient(models.Model):
    """The sent marker: one recipient of one batch, and what happened to them."""

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        SENT = "sent", _("sent")
        FAILED = "failed", _("failed")
        SKIPPED = "skipped", _("skipped")

    # No index of its own: the unique (batch, recipient_key) constraint leads with batch.
    batch = models.ForeignKey(
        SendBatch, on_delete=models.CASCADE, related_name="recipients", db_index=False
    )
    recipient_key = models.CharField(max_length=255)
    address = models.CharField(max_length=320)
    timezone = models.CharField(max_length=64, blank=True, default="")
    context = models.JSONField(default=dict, blank=True)
    is_seed = models.BooleanField(default=False)

    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # A worker's claim on this recipient while it sends (crash: the claim expires).
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    provider_message_id = models.CharField(max_length=255, blank=True, default="")
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["batch", "recipient_key"], name="scheduler_recipient_once_per_batch"
            )
        ]
        indexes = [
            # Matches the chunk claim: a batch's pending recipients, earliest due first.
            models.Index(
                fields=["batch", "next_attempt_at", "id"],
                condition=Q(status="pending"),
                name="scheduler_recipient_due",
            ),
            # The admin's exact-address search, in any case (address__iexact compares
            # UPPER(address)).
            models.Index(Upper("address"), name="scheduler_recipient_address_ci"),
            # Ties a provider's bounce or complaint back by its message id. Partial: a
            # recipient gets one when it is sent, so the freeze writes no entry here.
            models.Index(
                fields=["provider_message_id"],
                condition=~Q(provider_message_id=""),
                name="scheduler_recipient_message",
            ),
        ]

    def __str__(self) -> str:
        return "%s -> %s (%s)" % (self.batch_id, self.address, self.status)

    @property
    def idempotency_key(self) -> str:
        """Return ``<batch>:<recipient key>``, the key every provider call carries."""
        return "%s:%s" % (self.batch_id, self.recipient_key)


class RateLimit(models.Model):
    """A token bucket shared by every worker, per provider account; edit the rate live."""

    key = models.CharField(max_length=100, unique=True)
    rate = models.FloatField(help_text=_("Sends per second; 0 means unlimited."))
    burst = models.FloatField(default=1.0, help_text=_("Most tokens saved up."))
    tokens = models.FloatField(default=0.0, editable=False)
    updated_at = models.DateTimeField(default=clock.now, editable=False)

    class Meta:
        ordering = ["key"]
        constraints = [
            models.CheckConstraint(
                condition=Q(rate__gte=0) & Q(burst__gte=1), name="scheduler_ratelimit_positive"
            )
        ]

    def __str__(self) -> str:
        return "%s: %s/s" % (self.key, self.rate)
