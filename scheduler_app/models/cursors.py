"""Named cursors of sync jobs: where the next run starts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import models

from scheduler_app import clock

if TYPE_CHECKING:
    from scheduler_app.cursors import CursorProposal


class SyncCursorQuerySet(models.QuerySet["SyncCursor"]):
    def saved_value(self, name: str) -> Any:
        """Return the value saved under ``name`` (None if never saved)."""
        return self.filter(name=name).values_list("value", flat=True).first()

    def save_proposals(self, saved: Iterable[tuple[int, CursorProposal]]) -> None:
        """Store (job id, proposal) pairs, in the caller's transaction (the job's outcome's)."""
        for job_id, proposal in saved:
            self.update_or_create(
                name=proposal.name,
                defaults={
                    "value": proposal.value,
                    "processed": proposal.processed,
                    "job_id": job_id,
                    "updated_at": clock.now(),
                },
            )


class SyncCursor(models.Model):
    """A sync's position (any JSON value), advanced only by a run that succeeded."""

    name = models.CharField(max_length=200, unique=True)
    value = models.JSONField(null=True, blank=True)
    #: Items the run that last advanced it processed.
    processed = models.PositiveIntegerField(null=True, blank=True)
    # No database constraint, as JobAttempt.job.
    job = models.ForeignKey(
        "scheduler_app.Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    updated_at = models.DateTimeField(default=clock.now)

    objects = SyncCursorQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
