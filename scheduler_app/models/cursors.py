"""Named cursors of sync jobs: where the next run starts."""

from __future__ import annotations

from django.db import models

from scheduler_app import clock


class SyncCursor(models.Model):
    """A sync's position (any JSON value), advanced only by a run that succeeded."""

    name = models.CharField(max_length=200, unique=True)
    value = models.JSONField(null=True, blank=True)
    #: Items the run that last advanced it processed.
    processed = models.PositiveIntegerField(null=True, blank=True)
    job = models.ForeignKey(
        "scheduler_app.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
