"""Live workers: one heartbeat row per runworker process."""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_app.database_clock import DatabaseNow


class WorkerHeartbeatQuerySet(models.QuerySet["WorkerHeartbeat"]):
    def alive(self) -> WorkerHeartbeatQuerySet:
        """Return workers that have not stopped nor been marked lost."""
        return self.filter(status=WorkerHeartbeat.Status.ALIVE)

    def silent_for(self, period: dt.timedelta) -> WorkerHeartbeatQuerySet:
        """Return alive workers not seen for longer than ``period`` (database clock)."""
        return self.alive().filter(last_seen_at__lt=DatabaseNow(-period))

    def live(self, lost_after: dt.timedelta) -> WorkerHeartbeatQuerySet:
        """Return alive workers seen within ``lost_after`` (database clock)."""
        return self.alive().filter(last_seen_at__gte=DatabaseNow(-lost_after))


class WorkerHeartbeat(models.Model):
    """A runworker process: where it runs, what it serves, and when it was last seen.

    ``last_seen_at`` is the database's clock, so hosts whose clocks differ
    agree on who went silent.
    """

    class Status(models.TextChoices):
        ALIVE = "alive", _("alive")
        STOPPED = "stopped", _("stopped")
        LOST = "lost", _("lost: silent for too long")

    worker_id = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    version = models.CharField(max_length=50, blank=True, default="")
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    running = models.PositiveIntegerField(default=0, help_text=_("Jobs running when last seen."))
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ALIVE)
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = WorkerHeartbeatQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen_at"]
        indexes = [models.Index(fields=["status", "last_seen_at"], name="scheduler_worker_seen")]

    def __str__(self) -> str:
        return self.worker_id
