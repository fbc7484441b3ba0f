"""Recurring schedules and the record of each occurrence."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock
from scheduler_app.bounds import LONGEST_DURATION, SHORTEST_INTERVAL
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import UnknownQueue, UnknownTask
from scheduler_app.models.jobs import Job
from scheduler_app.registry import check_queue, get_task
from scheduler_app.schedules.recurrence import CronError, check_cron

# LONGEST_DURATION (scheduler_app.bounds, ten years) is the longest interval, grace,
# jitter or alert target a schedule takes: the scheduler and the alert rules add them to
# times and to each other. SHORTEST_INTERVAL (1 s) is the shortest interval.


def validate_cron(expression: str) -> None:
    """Raise ValidationError unless ``expression`` is a valid 5-field cron expression."""
    try:
        check_cron(expression)
    except CronError as exc:
        raise ValidationError(
            _("Invalid cron expression %(expression)r: %(reason)s."),
            code="invalid_cron",
            params={"expression": expression, "reason": exc},
        ) from exc


def validate_timezone(name: str) -> None:
    """Raise ValidationError unless ``name`` is an IANA time zone."""
    try:
        clock.time_zone(name)
    except zoneinfo.ZoneInfoNotFoundError as exc:
        raise ValidationError(
            _("Unknown time zone %(name)r; use an IANA name such as Europe/London."),
            code="invalid_timezone",
            params={"name": name},
        ) from exc


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def due(self, now: dt.datetime) -> ScheduleQuerySet:
        """Return enabled schedules whose next occurrence has come (or is unknown)."""
        return self.filter(enabled=True).filter(Q(next_run_at__lte=now) | Q(next_run_at=None))


class Schedule(models.Model):
    """A task that runs again and again: on a cron, at a fixed rate, or with a fixed delay."""

    class Kind(models.TextChoices):
        CRON = "cron", _("cron expression in a time zone")
        FIXED_RATE = "fixed_rate", _("fixed rate: every interval from the previous start")
        FIXED_DELAY = "fixed_delay", _("fixed delay: the interval after the previous run ended")

    class Overlap(models.TextChoices):
        SKIP = "skip", _("skip while the previous run is pending or running")
        ALLOW = "allow", _("allow runs in parallel")

    class Misfire(models.TextChoices):
        RUN_ONCE = "run_once", _("run once to catch up")
        RUN_ALL = "run_all", _("run every missed occurrence")
        SKIP = "skip", _("skip missed occurrences")

    name = models.SlugField(max_length=100, unique=True)
    task_name = models.CharField(max_length=200)
    payload = models.JSONField(default=dict, blank=True)
    queue = models.CharField(
        max_length=100, blank=True, default="", help_text=_("Empty: the task's queue.")
    )
    enabled = models.BooleanField(default=True)

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(max_length=200, blank=True, default="", validators=[validate_cron])
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    interval = models.DurationField(
        validators=[MaxValueValidator(LONGEST_DURATION)], null=True, blank=True
    )
    start_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("Fixed rate: the first occurrence; later ones follow it."),
    )

    overlap_policy = models.CharField(max_length=8, choices=Overlap.choices, default=Overlap.SKIP)
    misfire_policy = models.CharField(
        max_length=8, choices=Misfire.choices, default=Misfire.RUN_ONCE
    )
    misfire_grace = models.DurationField(
        validators=[MaxValueValidator(LONGEST_DURATION)],
        default=dt.timedelta(minutes=1),
        help_text=_("An occurrence later than this when the scheduler sees it counts as missed."),
    )
    jitter = models.DurationField(
        validators=[MaxValueValidator(LONGEST_DURATION)],
        default=dt.timedelta(0),
        help_text=_("Spread runs by a random offset up to this, fixed per occurrence."),
    )

    # Targets (see scheduler_app.targets); empty: the task's, else the defaults.
    # Code owns them for a schedule declared in code: a sync overwrites them.
    lateness_target = models.DurationField(
        validators=[MaxValueValidator(LONGEST_DURATION)],
        null=True,
        blank=True,
        help_text=_("Alert when the p95 lateness of first attempts over 24 h exceeds this."),
    )
    max_runtime = models.DurationField(
        validators=[MaxValueValidator(LONGEST_DURATION)],
        null=True,
        blank=True,
        help_text=_("Alert when a run has been running longer than this."),
    )
    expected_every = models.DurationField(
        validators=[MaxValueValidator(LONGEST_DURATION)],
        null=True,
        blank=True,
        help_text=_(
            "Alert when no run succeeded for this long. Empty: 1.1 x the longest gap "
            "between occurrences, plus the misfire grace and jitter."
        ),
    )
    # db_default: workers of the previous release insert rows without this column.
    count_key = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        help_text=_("The result key that counts the items a run processed, e.g. processed."),
    )
    zero_runs_alert = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("Alert after this many consecutive successful runs that processed 0 items."),
    )

    # The scheduler's cursor: the next occurrence not yet handled (None: work it out).
    next_run_at = models.DateTimeField(null=True, blank=True)
    declared_in_code = models.BooleanField(default=False, editable=False)
    # The SCHEDULES_VERSION that last wrote it from code; a lower version leaves it alone.
    # db_default: workers of the previous release insert rows without this column.
    declared_version = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    created_at = models.DateTimeField(default=clock.now, editable=False)
    updated_at = models.DateTimeField(default=clock.now, editable=False)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(kind="cron") & ~Q(cron=""))
                | (Q(kind__in=["fixed_rate", "fixed_delay"]) & Q(interval__gt=dt.timedelta(0))),
                name="scheduler_schedule_kind_has_its_definition",
            ),
            models.CheckConstraint(
                condition=Q(jitter__gte=dt.timedelta(0)) & Q(misfire_grace__gte=dt.timedelta(0)),
                name="scheduler_schedule_durations_not_negative",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_run_at"], condition=Q(enabled=True), name="scheduler_schedule_due"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.kind == self.Kind.CRON and not self.cron:
            errors["cron"] = _("A cron schedule needs a cron expression.")
        if self.kind != self.Kind.CRON and not (
            self.interval and self.interval >= SHORTEST_INTERVAL
        ):
            errors["interval"] = _(
                "A fixed rate or fixed delay schedule needs an interval of at least 1 second."
            )
        if self.queue and isinstance(app_settings.QUEUES, list | tuple):  # else E002 says
            try:
                check_queue(self.queue)
            except UnknownQueue as exc:
                errors["queue"] = exc.message
        task_count_key = ""
        try:
            task_count_key = get_task(self.task_name).targets.count_key
        except UnknownTask as exc:
            errors["task_name"] = exc.message
        # The rules @task and SCHEDULES apply (scheduler_app.targets): a target that could
        # never alert, or always would, is refused rather than silently ignored.
        for name in ("lateness_target", "max_runtime", "expected_every"):
            value = getattr(self, name)
            if value is not None and value <= dt.timedelta(0):
                errors[name] = _("Must be positive; leave it empty for no target.")
        if self.zero_runs_alert is not None:
            if self.zero_runs_alert < 1:
                errors["zero_runs_alert"] = _("Must be at least 1; leave it empty for no alert.")
            elif not (self.count_key or task_count_key):
                errors["zero_runs_alert"] = _(
                    "Needs a count key (the result key that counts items), here or on the task."
                )
        if errors:
            raise ValidationError(errors)

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.timezone)


class ScheduleOccurrence(models.Model):
    """What the scheduler did with one occurrence: enqueued a job, or skipped it and why.

    Unique per (schedule, occurrence time): the database refuses a second
    record of the same occurrence, whatever the number of schedulers.
    """

    class Outcome(models.TextChoices):
        ENQUEUED = "enqueued", _("enqueued")
        SKIPPED_OVERLAP = "skipped_overlap", _("skipped: previous run still pending or running")
        SKIPPED_MISFIRE = "skipped_misfire", _("skipped: missed while nothing was running")
        ERROR = "error", _("could not be enqueued")

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="occurrences")
    occurrence_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    # No database constraint, as JobAttempt.job.
    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="schedule_occurrences",
        db_constraint=False,
    )
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-occurrence_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "occurrence_at"], name="scheduler_occurrence_once"
            )
        ]
        # The pruner's query: occurrences older than a cutoff, across schedules.
        indexes = [models.Index(fields=["occurrence_at"], name="scheduler_occurrence_at")]

    def __str__(self) -> str:
        return "%s @ %s: %s" % (self.schedule_id, self.occurrence_at.isoformat(), self.outcome)
