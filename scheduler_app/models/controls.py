"""Kill switches: pause a task, a queue or everything, with who, why and when."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock


class Control(models.Model):
    """The current state of one kill switch (one row per scope and target)."""

    class Scope(models.TextChoices):
        GLOBAL = "global", _("everything")
        QUEUE = "queue", _("a queue")
        TASK = "task", _("a task")

    scope = models.CharField(max_length=8, choices=Scope.choices)
    target = models.CharField(
        max_length=200, blank=True, default="", help_text=_("Queue or task name.")
    )
    paused = models.BooleanField(default=False)
    reason = models.TextField(blank=True, default="")
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["scope", "target"]
        verbose_name = "kill switch"
        verbose_name_plural = "switchboard"
        permissions = [("pause_everything", "Can pause and resume everything")]
        constraints = [
            models.UniqueConstraint(fields=["scope", "target"], name="scheduler_control_once"),
            models.CheckConstraint(
                condition=Q(scope="global", target="") | (~Q(scope="global") & ~Q(target="")),
                name="scheduler_control_target_matches_scope",
            ),
        ]

    def __str__(self) -> str:
        what = self.get_scope_display() if self.scope == self.Scope.GLOBAL else self.target
        return "%s: %s" % (what, "paused" if self.paused else "running")


class ControlEvent(models.Model):
    """Audit trail: every pause, resume and cancel, of switches and send batches."""

    scope = models.CharField(max_length=8)
    target = models.CharField(max_length=200, blank=True, default="")
    action = models.CharField(max_length=16)
    reason = models.TextField(blank=True, default="")
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return "%s %s %s" % (self.action, self.scope, self.target)
