"""The automatic breaker: a batch pauses when too many of its latest attempts failed.

Each lane keeps its share of BREAKER_WINDOW (the batch's breaker_window) in its own
LaneProgress row, and a lane starts from what the batch's lanes left, so the window lasts
across lane runs. An attempt that does not count (a refund: a throttling answer, a
refusal of our sender) never feeds it, nor does a refusal of one recipient's own address
(unknown, invalid, suppressed: RecipientRefused), which says nothing of the provider; a
refusal the lane only judged to be the address's (RefusedAtRcpt failed alone) still counts,
so a server that starts refusing everyone still trips it. BREAKER_THRESHOLD (the batch's
breaker_threshold) is the share of failures that trips it.
"""

from __future__ import annotations

import collections
import math

from scheduler_app.conf import app_settings
from scheduler_app.models import LaneProgress, SendBatch
from scheduler_app.sends.delivery import Outcome, Status


def _batch_breaker_window(batch: SendBatch) -> str:
    """Return the breaker windows the batch's lanes left, oldest lane run first."""
    rows = LaneProgress.objects.filter(batch_id=batch.pk).exclude(breaker_window="")
    return "".join(rows.order_by("id").values_list("breaker_window", flat=True))


class Breaker:
    """The automatic breaker: trips when too many of the latest attempts failed."""

    def __init__(self, batch: SendBatch) -> None:
        self.batch = batch
        # Each lane keeps its share of the window, so the batch trips after about N attempts;
        # it starts from what the batch's lanes left (a slow batch restarts its lanes often).
        window = batch.breaker_window or app_settings.BREAKER_WINDOW
        self.attempts: collections.deque[bool] = collections.deque(
            (flag == "1" for flag in _batch_breaker_window(batch)),
            maxlen=max(1, math.ceil(window / app_settings.SEND_LANES)),
        )
        self.threshold = (
            app_settings.BREAKER_THRESHOLD
            if batch.breaker_threshold is None
            else batch.breaker_threshold
        )

    def window(self) -> str:
        """Return the attempts in the window as LaneProgress.breaker_window stores them."""
        return "".join("1" if failed else "0" for failed in self.attempts)

    def add(self, outcome: Outcome) -> str:
        """Count ``outcome``; return why the breaker tripped, or ''."""
        if outcome.refund or not outcome.feeds_breaker:
            return ""
        # An attempt that counts and did not end sent or skipped: failed, or to be retried.
        self.attempts.append(outcome.status in (Status.FAILED, Status.PENDING))
        failed = sum(self.attempts)
        if len(self.attempts) < (self.attempts.maxlen or 0):
            return ""
        if failed / len(self.attempts) <= self.threshold:
            return ""
        return "Automatic breaker: %s of the last %s attempts failed (threshold %.0f%%)." % (
            failed,
            len(self.attempts),
            self.threshold * 100,
        )

    def keep(self, claim: str) -> None:
        """Store the window in the lane's own row (one statement per chunk): the batch's
        next lane runs start from it."""
        LaneProgress.objects.update_or_create(
            claim=claim,
            defaults={"breaker_window": self.window()},
            create_defaults={"batch": self.batch, "breaker_window": self.window()},
        )
