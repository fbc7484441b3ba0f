"""The suppression list, and the feedback (unsubscribes, bounces, complaints) it grows from."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock


class Suppression(models.Model):
    """An address no batch or message may be sent to: in every scope, or one audience's."""

    class Reason(models.TextChoices):
        UNSUBSCRIBED = "unsubscribed", _("unsubscribed")
        HARD_BOUNCE = "hard_bounce", _("hard bounce")
        SOFT_BOUNCES = "soft_bounces", _("repeated soft bounces")
        COMPLAINT = "complaint", _("complaint")
        MANUAL = "manual", _("manual")

    class Source(models.TextChoices):
        LINK = "link", _("unsubscribe link")
        WEBHOOK = "webhook", _("webhook")
        ANYMAIL = "anymail", _("anymail tracking")
        ADMIN = "admin", _("admin")
        IMPORT = "import", _("import")
        API = "api", _("API")

    address = models.CharField(
        max_length=320, help_text=_("Normalised: no surrounding spaces, lower case.")
    )
    scope = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text=_("An audience name, or empty for all mail."),
    )
    reason = models.CharField(max_length=16, choices=Reason.choices)
    source = models.CharField(max_length=16, choices=Source.choices)
    detail = models.TextField(blank=True, default="")
    batch = models.ForeignKey(
        "scheduler_app.SendBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("The batch whose message led to it, if known."),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["address", "scope"], name="scheduler_suppressed_once")
        ]

    def __str__(self) -> str:
        return "%s (%s, %s)" % (self.address, self.scope or "all mail", self.get_reason_display())


class SuppressionRemoval(models.Model):
    """Audit: who lifted a suppression, why, and what it was."""

    address = models.CharField(max_length=320)
    scope = models.CharField(max_length=100, blank=True, default="")
    was_reason = models.CharField(max_length=16)
    was_source = models.CharField(max_length=16)
    why = models.TextField()
    removed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    removed_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-removed_at", "-id"]

    def __str__(self) -> str:
        return "%s lifted at %s" % (self.address, self.removed_at)


class FeedbackEvent(models.Model):
    """One unsubscribe, bounce or complaint, recorded once per source event id."""

    class Kind(models.TextChoices):
        UNSUBSCRIBE = "unsubscribe", _("unsubscribe")
        HARD_BOUNCE = "hard_bounce", _("hard bounce")
        SOFT_BOUNCE = "soft_bounce", _("soft bounce")
        COMPLAINT = "complaint", _("complaint")

    event_id = models.CharField(
        max_length=255, unique=True, help_text=_("The source's id: the same event twice is one.")
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    source = models.CharField(max_length=16, choices=Suppression.Source.choices)
    address = models.CharField(max_length=320)
    batch = models.ForeignKey(
        "scheduler_app.SendBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="feedback_events",
    )
    # No database constraint: a partitioned recipient table (scheduler_app.recipient_partitions)
    # has no unique id alone for it to point at; the ORM's on_delete still applies.
    recipient = models.ForeignKey(
        "scheduler_app.Recipient",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    # db_default: workers of the previous release insert rows without this column.
    message = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text=_("The provider's message id (or the send's key) the event is about."),
    )
    detail = models.TextField(blank=True, default="")
    occurred_at = models.DateTimeField(default=clock.now)
    recorded_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-recorded_at", "-id"]
        indexes = [
            models.Index(fields=["address", "kind", "occurred_at"], name="scheduler_feedback_addr"),
            models.Index(fields=["recorded_at"], name="scheduler_feedback_recorded"),
        ]

    def __str__(self) -> str:
        return "%s %s" % (self.get_kind_display(), self.address)
