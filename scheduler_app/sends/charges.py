"""Charging recipients their attempt, then starting their provider calls.

An attempt commits before its call (the claim fence moves with it), so a crash re-sends
at most the calls in flight, each with the same idempotency key ``<batch>:<recipient
key>``; a recipient another lane took over meanwhile is not called at all.

The ready group: recipients rendered and waiting are begun in one statement that also
writes the markers of the calls that returned (db.<vendor>.mark_and_begin), one commit
for both, and their calls start in the lane's window. An idempotent provider (one
delivery per key) lets its lane charge groups instead, 1, 2, 4, ... up to
BEGIN_GROUP_MAX recipients per statement (db.<vendor>.begin_recipients); a recipient
charged with a group and not called gets its attempt back.
"""

from __future__ import annotations

import datetime as dt
import logging

from scheduler_app.db import backend
from scheduler_app.sends.claim_keeper import ClaimKeeper
from scheduler_app.sends.delivery import deliver
from scheduler_app.sends.markers import Markers
from scheduler_app.sends.providers import Provider
from scheduler_app.sends.rendering import Message
from scheduler_app.sends.window import Window

logger = logging.getLogger("scheduler_app.sends")

#: The largest group of recipients an idempotent provider's lane charges in one statement.
BEGIN_GROUP_MAX = 100


class Charges:
    """A lane's recipients on their way to a call: rendered and ready, or charged in a
    group and not called yet."""

    def __init__(
        self,
        *,
        batch_id: int,
        claim: str,
        claim_for: dt.timedelta,
        provider: Provider,
        window: Window,
        keeper: ClaimKeeper,
        markers: Markers,
    ) -> None:
        self.batch_id = batch_id
        self.claim = claim
        self.claim_for = claim_for
        self.provider = provider
        self.window = window
        self.keeper = keeper
        self.markers = markers
        #: Recipients rendered and about to begin: (index in the chunk, id, key, message).
        self.ready: list[tuple[int, int, str, Message]] = []
        #: Idempotent provider: the group charged and not yet called, {id: attempt or None}.
        self.begun: dict[int, int | None] = {}
        self.group_size = 1

    def room(self) -> int:
        """Return how many more calls may start now (the window less those in flight and
        those rendered, about to begin)."""
        return self.window.size - self.window.in_flight - len(self.ready)

    def start_ready(self) -> None:
        """Begin the recipients rendered and waiting, in one statement that also writes the
        markers of the calls that returned; then start their provider calls."""
        if not self.ready:
            return
        ready, self.ready = self.ready, []
        attempts, kept = backend().mark_and_begin(
            recipient_ids=[recipient_id for _, recipient_id, _, _ in ready],
            claim=self.claim,
            claim_for=self.claim_for,
            batch_id=self.batch_id,
            marks=self.markers.rows(),
        )
        self.markers.written(kept)
        for _, recipient_id, key, message in ready:
            self.call(message, key, recipient_id, attempts.get(recipient_id))

    def begin_group(self, recipient_ids: list[int]) -> None:
        """Charge the next group of an idempotent provider's recipients in one statement."""
        group = recipient_ids[: self.group_size]
        attempts = backend().begin_recipients(
            recipient_ids=group, batch_id=self.batch_id, claim=self.claim, claim_for=self.claim_for
        )
        self.begun = {recipient_id: attempts.get(recipient_id) for recipient_id in group}
        self.group_size = min(self.group_size * 2, BEGIN_GROUP_MAX)

    def uncalled(self, recipient_id: int) -> int:
        """Return 1 (the attempt to refund) if the recipient was charged with a group and not
        called, else 0."""
        return 1 if self.begun.pop(recipient_id, None) is not None else 0

    def call(self, message: Message, key: str, recipient_id: int, attempt: int | None) -> None:
        """Start the provider call of a recipient charged ``attempt`` (None: another lane owns
        it now, no call) in the window."""
        if attempt is None:
            logger.warning(
                "recipient taken over, not sent batch=%s recipient=%s claim=%s",
                self.batch_id,
                recipient_id,
                self.claim,
            )
            return
        self.keeper.calling(recipient_id)
        idempotency_key = "%s:%s" % (self.batch_id, key)
        self.window.submit(
            recipient_id,
            lambda: deliver(self.provider, message, idempotency_key, recipient_id, attempt),
        )
