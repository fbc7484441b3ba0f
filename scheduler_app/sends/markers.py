"""A lane's markers: the outcomes it holds until they are written, fenced by its claim.

A recipient's marker (its Outcome: sent, failed, skipped, or pending again) is written
as soon as its call returns: with the lane's next statement (the next recipients'
attempts, see sends.charges), or on its own while the lane waits, or when the chunk
ends. So a crash loses at most the markers of the calls in flight, and every recipient
already marked sent keeps its marker. Each write is fenced by the lane's claim: a
marker of a recipient another lane took over is discarded, never written over its own.
The counters go to the lane's own LaneProgress row (in the same statement), never to
the batch row, so no lane waits for another.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable

from django.db import DatabaseError

from scheduler_app.conf import app_settings
from scheduler_app.db import backend, write_across_reconnects
from scheduler_app.models import SendBatch
from scheduler_app.sends.delivery import Outcome, Status

logger = logging.getLogger("scheduler_app.sends")


class Markers:
    """The outcomes a lane holds until they are written, and the counts of those written."""

    def __init__(self, batch_id: int, claim: str) -> None:
        self.batch_id = batch_id
        self.claim = claim
        #: Outcomes not written yet.
        self.held: list[Outcome] = []
        #: The lane run's written markers by status (a recipient pending again is not counted).
        self.counts: collections.Counter[str] = collections.Counter()
        self.unlogged = 0
        #: Whether this run already cleared the batch's lane errors (see _count).
        self.errors_cleared = False

    def hold(self, outcomes: Iterable[Outcome]) -> None:
        """Hold ``outcomes`` until the next write."""
        self.held.extend(outcomes)

    def rows(self) -> list[tuple]:
        """Return the held outcomes as the rows db.<vendor>.mark_recipients() takes."""
        return [o.as_row() for o in self.held]

    def written(self, statuses: list[str]) -> None:
        """Count the held markers another statement wrote (its ``statuses``: those the claim
        kept), and hold them no longer."""
        if self.held:
            self._count(statuses, len(self.held))
            self.held = []

    def write(self) -> None:
        """Write the held markers and the batch counters, fenced by our claim."""
        if not self.held:
            return
        kept = backend().mark_recipients(self.rows(), claim=self.claim, batch_id=self.batch_id)
        written, self.held = len(self.held), []
        self._count(kept, written)

    def write_before_raising(self, seconds: float) -> None:
        """Write the markers held in memory despite the error, trying for ``seconds``.

        A marker written twice changes nothing the second time (the claim fence),
        so a retry after a reply that was lost is safe.
        """
        try:
            write_across_reconnects(self.write, seconds=seconds)
        except DatabaseError as exc:
            logger.error(
                "markers not written batch=%s claim=%s markers=%s error=%s",
                self.batch_id,
                self.claim,
                len(self.held),
                exc,
            )

    def _count(self, statuses: list[str], written: int) -> None:
        """Count the markers that were written; log progress now and then."""
        if len(statuses) < written:
            logger.warning(
                "claim lost, some markers discarded batch=%s claim=%s discarded=%s",
                self.batch_id,
                self.claim,
                written - len(statuses),
            )
        for status in statuses:
            if status != Status.PENDING:
                self.counts[status] += 1
                self.unlogged += 1
        if not self.errors_cleared and any(status != Status.PENDING for status in statuses):
            # The lane marked someone: the batch's lane errors in a row end (one statement
            # per lane run, which locks the batch row only if there were errors).
            self.errors_cleared = True
            SendBatch.objects.filter(pk=self.batch_id, lane_errors__gt=0).update(lane_errors=0)
        if self.unlogged >= app_settings.PROGRESS_LOG_EVERY:
            self.unlogged = 0
            _log_progress(self.batch_id)


def _log_progress(batch_id: int) -> None:
    batch = SendBatch.objects.get(pk=batch_id)
    logger.info(
        "batch progress batch=%s total=%s sent=%s failed=%s skipped=%s remaining=%s",
        batch_id,
        batch.total,
        batch.sent,
        batch.failed,
        batch.skipped,
        batch.remaining,
    )
