"""Alerts: something an operator should look at, open until its rule stops tripping."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock


class AlertQuerySet(models.QuerySet["Alert"]):
    def open(self) -> AlertQuerySet:
        """Return alerts not resolved yet."""
        return self.filter(resolved_at=None)

    def unacknowledged(self) -> AlertQuerySet:
        """Return open alerts nobody has acknowledged."""
        return self.open().filter(acknowledged_at=None)

    def due_for_notice(self, before: dt.datetime) -> AlertQuerySet:
        """Return open, unacknowledged alerts last notified before ``before``, owing nothing."""
        return self.unacknowledged().filter(last_notified_at__lt=before, notice="")

    def notices_due(self, now: dt.datetime) -> AlertQuerySet:
        """Return alerts owing a notice whose (next) delivery is due at ``now``."""
        return self.exclude(notice="").filter(notice_due_at__lte=now)


class Alert(models.Model):
    """One breach of a target, from when a rule first tripped until it stopped.

    At most one alert is open per (kind, subject): the database refuses a
    second, so evaluators on several hosts never open duplicates.
    """

    class Kind(models.TextChoices):
        LATE = "late", _("late: lateness p95 above its target")
        OVERDUE = "overdue", _("overdue: due and not started for too long")
        ABSENT = "absent", _("absent: no success within the expected cadence")
        SUSPICIOUS_SUCCESS = "suspicious_success", _("suspicious success: zero items, again")
        FAILING = "failing", _("failing: final failures above the rate")
        LONG_RUNNING = "long_running", _("long running: a run exceeds its maximum runtime")
        STALLED_SEND = "stalled_send", _("stalled send: a sending batch makes no progress")
        NO_WORKER = "no_worker", _("no live worker for a queue with due jobs")
        STALE_SEND = "stale_send", _("stale send: paused, too far past its time")
        PRUNE_REFUSED = "prune_refused", _("prune refused: more rows than the breaker allows")
        SEND_FEEDBACK = "send_feedback", _("send feedback: complaints or bounces above the limit")

    kind = models.CharField(max_length=32, choices=Kind.choices)
    #: What the alert is about, e.g. "task:shop.sync", "schedule:nightly", "batch:12",
    #: "queue:default"; with ``kind`` the key that deduplicates open alerts.
    subject = models.CharField(max_length=255)
    summary = models.TextField()
    #: The numbers that tripped the rule (thresholds and observed values).
    numbers = models.JSONField(default=dict, blank=True)
    admin_url = models.CharField(max_length=500, blank=True, default="")
    opened_at = models.DateTimeField(default=clock.now)
    #: The last evaluation that still saw the breach.
    last_seen_at = models.DateTimeField(default=clock.now)
    #: The last delivery that reached every notifier.
    last_notified_at = models.DateTimeField(null=True, blank=True)
    notifications = models.PositiveIntegerField(default=0)
    #: The notice still owed: "opened", "resolved", or "" (none). Database defaults, so a
    #: worker of the previous release can still insert alerts during a rolling deploy.
    notice = models.CharField(max_length=16, blank=True, default="", db_default="")
    #: When the owed notice is (next) tried; pushed back by each failed delivery.
    notice_due_at = models.DateTimeField(null=True, blank=True)
    #: Failed deliveries of the owed notice so far (the backoff's exponent).
    notice_failures = models.PositiveIntegerField(default=0, db_default=0)
    #: The notifiers (their ALERT_NOTIFIERS entries as JSON) the owed notice still has to
    #: reach after a delivery some of them refused; None: all of them.
    notice_unreached = models.JSONField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "subject"],
                condition=Q(resolved_at=None),
                name="scheduler_alert_open_once",
            )
        ]
        indexes = [
            models.Index(fields=["resolved_at"], name="scheduler_alert_resolved"),
            # Each evaluation looks for the notices owed: few rows, whatever the history.
            models.Index(
                fields=["notice_due_at"], condition=~Q(notice=""), name="scheduler_alert_notice"
            ),
        ]

    def __str__(self) -> str:
        return "%s %s" % (self.kind, self.subject)


class AlertMemory(models.Model):
    """What the absent and suspicious-success rules need from the history retention deletes.

    The pruner records it just before it deletes finished jobs and schedule occurrences;
    the rules read it together with the rows that remain. One row per subject
    ("schedule:<name>" or "task:<name>", as the alerts name them).
    """

    subject = models.CharField(max_length=255, unique=True)
    #: The latest pruned success: when it finished and how long it ran.
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_success_took = models.DurationField(null=True, blank=True)
    #: The earliest pruned success or failure: the subject's history began then.
    first_finished_at = models.DateTimeField(null=True, blank=True)
    #: A task's latest pruned successes, newest first, as many as its ``zero_runs_alert``:
    #: ``{"job": id, "finished_at": iso, "result": {count_key: value}}``.
    recent_results = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "alert memory"
        verbose_name_plural = "alert memory"

    def __str__(self) -> str:
        return self.subject
