"""The audit of retention: one row per prune run, what it deleted or why it refused."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from scheduler_app import clock


class PruneRun(models.Model):
    """One run of the pruner (the command or the built-in schedule): cutoffs' time and counts."""

    class Outcome(models.TextChoices):
        PRUNED = "pruned", _("pruned")
        DRY_RUN = "dry_run", _("dry-run: nothing deleted")
        REFUSED = "refused", _("refused: more rows than the breaker allows")
        FAILED = "failed", _("failed")

    #: Cutoffs are this time minus each kind's retention (the job's scheduled_for).
    reference_time = models.DateTimeField()
    #: "command", or "job:<id>" for the built-in schedule.
    source = models.CharField(max_length=50)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    #: kind -> rows deleted (or blanked); for a dry-run or a refusal, rows that qualified.
    counts = models.JSONField(default=dict, blank=True)
    max_rows = models.PositiveBigIntegerField()
    detail = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(default=clock.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = "prune run"

    def __str__(self) -> str:
        return "prune %s at %s: %s" % (self.source, self.reference_time.isoformat(), self.outcome)

    @property
    def total(self) -> int:
        """Return the rows counted across kinds."""
        return sum(self.counts.values())
