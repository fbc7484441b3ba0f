"""Tables the test suite's handlers write to. No migrations: pytest-django creates them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Run(models.Model):
    """One run of a handler, recorded by the handler itself (in a worker process)."""

    job_id = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField()
    pid = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return "job %s attempt %s in pid %s" % (self.job_id, self.attempt, self.pid)
