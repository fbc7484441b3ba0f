"""A lane: one worker's run over a sending batch, chunk after chunk, one recipient at a time.

The loop (``Lane.run``): before each chunk the lane looks at the worker (stopping?), its
turn (LANE_TURN, then it hands its job back and goes on in a fresh attempt), the batch
and the kill switches (sends.halts) and the stale-send guard (sends.stale); then it
claims a chunk of due recipients (SKIP LOCKED, a claim that expires and that
sends.claim_keeper extends while it works) sized to the rate limit (sends.limiter) and
to how fast chunks go (sends.chunking). None left: sends.finish.

A chunk (``_send_chunk``): for each recipient, those not tried yet first, wait for room
in the window (up to SEND_WINDOW calls in flight, fewer while the provider throttles;
sends.window), then fail one that used RECIPIENT_MAX_ATTEMPTS without an outcome (its
lanes died in the call), skip one suppressed or without an address, render (a render
error fails that recipient: fail closed), wait for a rate-limit token, charge its attempt
and start its call (sends.charges). A recipient charged before is sent alone, after the
others (``_send_alone``). Each
call's outcome (sends.delivery) feeds the breaker (sends.breaker) and becomes its marker
(sends.markers). A provider's request to slow down is sat out in the lane up to
SLOW_DOWN_IN_LANE, else the chunk goes back and the lane waits; a refusal of our sender
pauses the batch. Whatever must not be sent now goes back unclaimed, its attempt
refunded if it was charged and not called. If the lane raises, the calls in flight are
awaited and every marker it holds is written first.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.db import backend
from scheduler_app.exceptions import RetryLater, describe
from scheduler_app.feedback import suppressions
from scheduler_app.feedback.unsubscribe import UnsubscribeLinks
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.registry import get_task
from scheduler_app.sends import halts, limiter, stale, states
from scheduler_app.sends.audience import thaw_context
from scheduler_app.sends.breaker import Breaker
from scheduler_app.sends.charges import Charges
from scheduler_app.sends.chunking import ChunkSizer
from scheduler_app.sends.claim_keeper import ClaimKeeper
from scheduler_app.sends.delivery import Outcome, Status
from scheduler_app.sends.finish import finish_lane
from scheduler_app.sends.markers import Markers
from scheduler_app.sends.providers import RefusedAtRcpt, SenderRefused, SlowDown, get_provider
from scheduler_app.sends.rendering import Message, MessageTemplate, RenderError
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from scheduler_app.sends.window import Window

logger = logging.getLogger("scheduler_app.sends")

#: A provider's request to slow down for at most this long is sat out inside the lane;
#: after a longer one the lane hands its chunk and its job back and waits.
SLOW_DOWN_IN_LANE = dt.timedelta(seconds=10)
#: A lane hands its job back after this long and goes on in a fresh attempt.
LANE_TURN = dt.timedelta(minutes=5)
#: Why a recipient frozen without an address is skipped.
NO_ADDRESS = "The recipient has no address."


class Lane:
    """One lane's run over a sending batch: chunk after chunk, one recipient at a time."""

    def __init__(
        self,
        batch: SendBatch,
        template: MessageTemplate,
        *,
        claim: str,
        should_stop: Callable[[], bool],
    ) -> None:
        self.batch = batch
        self.template = template
        self.claim = claim
        self.should_stop = should_stop
        self.provider = get_provider(batch.provider)
        # Same key, one delivery: a crash cannot duplicate, so markers may wait for the chunk.
        self.idempotent = bool(getattr(self.provider, "idempotent", False))
        #: Markers wait for the end of the chunk being sent (see _send_rows).
        self.marks_per_chunk = self.idempotent
        self.claim_for = dt.timedelta(seconds=app_settings.SEND_CLAIM_SECONDS)
        self.keeper = ClaimKeeper(self.batch.pk, claim, self.claim_for)
        self.halted = halts.halt_check(batch.pk)
        self.breaker = Breaker(batch)
        self.unsubscribe = UnsubscribeLinks()
        self.sizer = ChunkSizer(app_settings.SEND_CHUNK_SIZE)
        self.turn_ends = time.monotonic() + _lane_turn().total_seconds()
        #: Set when the lane must end after this chunk (breaker, provider refused the sender).
        self.stop_reason = ""
        #: Set when the provider asked us to slow down: the lane waits this long.
        self.slow_down: SlowDown | None = None
        self.slowed_at = 0.0
        #: The provider calls in flight, on the lane's sender threads.
        self.window = Window(self.provider, app_settings.SEND_WINDOW)
        #: Whether the provider accepted a message in this run (see RefusedAtRcpt).
        self.provider_accepted = False
        #: The outcomes held until they are written.
        self.markers = Markers(batch.pk, claim)
        #: The recipients on their way to a call: rendered and ready, or charged in a group.
        self.charges = Charges(
            batch_id=batch.pk,
            claim=claim,
            claim_for=self.claim_for,
            provider=self.provider,
            window=self.window,
            keeper=self.keeper,
            markers=self.markers,
        )

    def run(self) -> dict[str, int]:
        """Send chunks until none is due, the batch stops sending, or the worker stops."""
        batch_id = self.batch.pk
        session = backend().lane_session(
            synchronous_commit=app_settings.SEND_MARKER_SYNCHRONOUS_COMMIT
        )
        interrupted = stale.interrupted_for(self.batch)
        if interrupted is not None:
            stale.pause_stale(
                self.batch, interrupted, what="the rest of the send", since="it stopped"
            )
            return {}
        with self.keeper, session, self.window:
            while True:
                if self.should_stop():
                    raise RetryLater(delay=0, reason="worker stopping; another worker goes on")
                if time.monotonic() >= self.turn_ends:
                    raise RetryLater(delay=0, reason="the lane's turn is over; it goes on")
                halt = halts.why_not_send(batch_id)
                if halt == halts.KILL_SWITCHED:
                    raise RetryLater(delay=halts.PAUSED_RECHECK, reason=halt)
                if halt:
                    logger.info("lane stops batch=%s reason=%s", batch_id, halt)
                    return dict(self.markers.counts)
                late = stale.late_recipient(self.batch)
                if late is not None:
                    stale.pause_stale(self.batch, late, what="a local-time delivery")
                    return dict(self.markers.counts)
                size = limiter.chunk_size_for(self.batch.rate_limit_key, self.sizer.next_size())
                started = time.monotonic()
                rows = backend().claim_recipients(
                    batch_id=batch_id, claim=self.claim, limit=size, claim_for=self.claim_for
                )
                if not rows:
                    return finish_lane(self.batch, self.markers.counts)
                done = self._send_chunk(rows)
                self.breaker.keep(self.claim)
                self.sizer.observe(recipients=done, seconds=time.monotonic() - started)
                if self.stop_reason:
                    states.pause(batch_id, reason=self.stop_reason)
                    return dict(self.markers.counts)
                if self.slow_down is not None and self.slow_down.delay > SLOW_DOWN_IN_LANE:
                    raise RetryLater(delay=self.slow_down.delay, reason=str(self.slow_down))

    def _send_chunk(self, rows: list[tuple]) -> int:
        """Send a claimed chunk through the window; hand back what must not be sent now.

        Return how many of the rows it got through. If the lane raises, the calls in
        flight are awaited and the markers it holds are written first: a recipient the
        provider accepted is never left unmarked by anything but a crash.
        """
        try:
            return self._send_rows(rows)
        except Exception:
            while self.window.in_flight:  # their outcomes are markers to write too
                self._settle(wait=None)
            # Rendered and not begun: back as they were.
            self.markers.hold(Outcome(r[1], Status.PENDING, error=None) for r in self.charges.ready)
            self.charges.ready = []
            # The group's recipients not called yet go back with their attempt refunded.
            self.markers.hold(
                Outcome(recipient_id, Status.PENDING, refund=1)
                for recipient_id, attempt in self.charges.begun.items()
                if attempt is not None
            )
            self.charges.begun = {}
            self.markers.write_before_raising(self.claim_for.total_seconds() / 2)
            raise
        finally:
            self.keeper.hold(())

    def _send_rows(self, rows: list[tuple]) -> int:
        # The recipients not tried yet first (in due order), then those charged before by
        # how often: a worker killed again and again soon after it starts dies in a lane's
        # first calls, and those deaths must spread over recipients, not use up the
        # attempts of the one that came first each time.
        rows = sorted(rows, key=lambda row: row[5])
        limited = limiter.is_limited(self.batch.rate_limit_key)
        suppressed = suppressions.skip_reasons([row[2] for row in rows], self.batch)
        # A chunk holding a recipient charged before (a lane died with it, or it is being
        # retried) is marked one recipient at a time even for an idempotent provider:
        # otherwise each crash in it loses the chunk's markers again and charges every
        # recipient sent before the crash once more, until they fail as deaths.
        self.marks_per_chunk = self.idempotent and not any(row[5] for row in rows)
        self.charges.group_size = 1
        halt = ""
        reached = 0
        chunk_ids = tuple(row[0] for row in rows)
        for reached, (recipient_id, key, address, _tz, context, attempts) in enumerate(rows):
            # The rows not marked yet stay claimed, or another lane may take them: the rest
            # of the chunk (from the first one rendered and not begun yet), and the calls in
            # flight (the keeper knows those).
            start = self.charges.ready[0][0] if self.charges.ready else reached
            self.keeper.hold(chunk_ids, 0 if self.marks_per_chunk else start)
            halt = self._wait_for_room()
            if halt:
                break
            if attempts >= app_settings.RECIPIENT_MAX_ATTEMPTS:
                # Every attempt so far ended without an outcome: its lane died in the call.
                self._add(
                    Outcome(
                        recipient_id,
                        Status.FAILED,
                        error="Worker died while sending: %s attempts without an outcome "
                        "(RECIPIENT_MAX_ATTEMPTS is %s); it may have been delivered."
                        % (attempts, app_settings.RECIPIENT_MAX_ATTEMPTS),
                    )
                )
                continue
            if address in suppressed:
                self._add(Outcome(recipient_id, Status.SKIPPED, error=suppressed[address]))
                continue
            if not address:  # frozen without one: nobody to send to, nobody's failure
                self._add(Outcome(recipient_id, Status.SKIPPED, error=NO_ADDRESS))
                continue
            try:
                message = self.template.render(
                    address, thaw_context(self.batch.context_types, context)
                )
            except RenderError as exc:
                self._add(
                    Outcome(
                        recipient_id,
                        Status.FAILED,
                        error=str(exc),
                        refund=self.charges.uncalled(recipient_id),
                    )
                )
                continue
            message = self.unsubscribe.add(message, self.unsubscribe.recipient_token(recipient_id))
            if limited:
                self.charges.start_ready()
                self.markers.write()  # a marker never waits for the limiter
                if not limiter.wait_for_token(
                    self.batch.rate_limit_key, should_stop=self._halt_while_waiting
                ):
                    halt = self._why_halt() or "worker stopping"
                    break
            if not self.marks_per_chunk and attempts:
                self._send_alone((reached, recipient_id, key, message))
                continue
            if not self.marks_per_chunk:
                # Begun in groups: the markers of the calls that returned and the attempts
                # of the next calls, one statement (see _start_ready).
                self.charges.ready.append((reached, recipient_id, key, message))
                if limited or self.charges.room() <= 0:
                    self.charges.start_ready()
                continue
            if recipient_id not in self.charges.begun:
                self.charges.begin_group(
                    [
                        row[0]
                        for row in rows[reached:]
                        if row[5] < app_settings.RECIPIENT_MAX_ATTEMPTS and row[2] not in suppressed
                    ]
                )
            self.charges.call(
                message, key, recipient_id, self.charges.begun.pop(recipient_id, None)
            )
        else:
            reached = len(rows)
            self.charges.start_ready()
        # Every call in flight returns and is marked before the chunk ends.
        self._drain()
        # The rest of the chunk goes back as it was (no attempt used), with those rendered
        # and not begun; after a SlowDown it waits as long as the provider asked.
        wait = self.slow_down.delay if self.slow_down else None
        back = [ready[1] for ready in self.charges.ready] + [row[0] for row in rows[reached:]]
        self.charges.ready = []
        self.markers.hold(
            Outcome(
                recipient_id,
                Status.PENDING,
                next_attempt_at=clock.now() + wait if wait else None,
                error=str(self.slow_down) if wait else None,  # None: keep its last error
                refund=self.charges.uncalled(recipient_id),
            )
            for recipient_id in back
        )
        self.charges.begun = {}
        self.markers.write()
        if halt:
            logger.info("chunk handed back batch=%s reason=%s", self.batch.pk, halt)
        return reached

    def _send_alone(self, ready: tuple[int, int, str, Message]) -> None:
        """Send a recipient charged before (a lane may have died in its call) alone, nothing
        else in flight, so a crash storm charges it only for its own call and a window of
        others cannot use up its attempts."""
        self.charges.start_ready()
        self._drain()
        self.charges.ready.append(ready)
        self.charges.start_ready()
        self._drain()

    def _wait_for_room(self) -> str:
        """Wait until the window lets one more call start, marking the calls that return
        meanwhile, and sit out a provider's short request to slow down; return why the rest
        of the chunk must not be sent now, or ''."""
        while True:
            self._settle()
            halt = self.stop_reason or self._why_halt()
            if halt:
                return halt
            if self.slow_down is not None:
                if self.slow_down.delay > SLOW_DOWN_IN_LANE:
                    return str(self.slow_down)  # the chunk goes back; the lane waits
                resume = self.slowed_at + self.slow_down.delay.total_seconds()
                if time.monotonic() < resume:
                    self._settle(wait=min(resume - time.monotonic(), halts.HALT_RECHECK), mark=True)
                    continue
                self.slow_down = None
            if self.charges.room() > 0:
                return ""
            if self.charges.ready:
                self.charges.start_ready()
                continue
            # The window is full: wait for a call to return. Its marker goes with the next
            # attempts (one commit), unless nothing follows it: the chunk's end marks it.
            self._settle(wait=halts.HALT_RECHECK)

    def _halt_while_waiting(self) -> bool:
        """While waiting for a rate-limit token: mark the calls that returned; True to stop."""
        self._settle(mark=True)
        return bool(self._why_halt())

    def _drain(self) -> None:
        """Wait for every call in flight to return, marking each as it does."""
        while self.window.in_flight:
            self._settle(wait=halts.HALT_RECHECK, mark=True)

    def _settle(self, *, wait: float | None = 0.0, mark: bool = False) -> None:
        """Take the outcomes of the calls that returned (waiting up to ``wait`` seconds for
        one, None: for ever); mark them now if ``mark``, or if the lane stops (otherwise the
        next begin writes them, in the same commit)."""
        finished = self.window.done(wait=wait)
        for recipient_id, outcome, exc in finished:
            self.keeper.returned(recipient_id)
            self._add(self._outcome_of(recipient_id, outcome, exc))
        if finished and (mark or self.stop_reason):
            self.markers.write()

    def _outcome_of(
        self, recipient_id: int, outcome: Outcome | None, exc: BaseException | None
    ) -> Outcome:
        """Return the outcome of a call that returned; adjust the window to the answer."""
        if outcome is not None:
            if outcome.status == Status.SENT:
                self.window.accepted()
                self.provider_accepted = True
            return outcome
        if isinstance(exc, SlowDown):  # not sent: no attempt used, the lane slows down
            if self.window.throttled(exc.delay.total_seconds()):
                logger.info(
                    "provider throttles batch=%s window=%s delay=%ss",
                    self.batch.pk,
                    self.window.size,
                    exc.delay.total_seconds(),
                )
            if self.slow_down is None or exc.delay > self.slow_down.delay:
                self.slow_down = exc
                self.slowed_at = time.monotonic()
            return Outcome(
                recipient_id,
                Status.PENDING,
                refund=1,
                next_attempt_at=clock.now() + exc.delay,
                error=str(exc),
            )
        if isinstance(exc, RefusedAtRcpt) and (
            self.provider_accepted or self._refused_again(recipient_id, exc)
        ):
            # The server takes others: a block of this address, not of us.
            return Outcome(recipient_id, Status.FAILED, error=str(exc))
        if isinstance(exc, SenderRefused):  # not the recipient's fault: no attempt used, pause
            self.stop_reason = self.stop_reason or str(exc)
            if isinstance(exc, RefusedAtRcpt):
                # Due again behind the rest: after a resume the others show whose fault it
                # is. Its type leads the error, so that a refusal again is known (see
                # _refused_again).
                return Outcome(
                    recipient_id,
                    Status.PENDING,
                    refund=1,
                    error=describe(exc),
                    next_attempt_at=clock.now(),
                )
            return Outcome(recipient_id, Status.PENDING, refund=1, error=str(exc))
        raise exc  # not an Exception (deliver() turns those into outcomes)

    def _refused_again(self, recipient_id: int, exc: RefusedAtRcpt) -> bool:
        """Return True if the recipient's last attempt ended in such a refusal too (it paused
        the batch, which was resumed) and the server has accepted others of the batch.

        With calls in flight, or when the recipient is the only one left, nothing in this
        run may show that the server takes others before its refusal comes back: it would
        pause the batch again at every resume.
        """
        refused_before = Recipient.objects.filter(
            pk=recipient_id, last_error__startswith="%s: " % type(exc).__name__
        )
        accepted = Recipient.objects.filter(batch_id=self.batch.pk, status=Status.SENT)
        return refused_before.exists() and accepted.exists()

    def _why_halt(self) -> str:
        """Return why the rest of a chunk must not be sent now, or ''."""
        if self.should_stop():
            return "worker stopping"
        if time.monotonic() >= self.turn_ends:
            return "the lane's turn is over"
        return self.halted()

    def _add(self, outcome: Outcome) -> None:
        """Queue an outcome for marking; feed the breaker."""
        self.markers.hold([outcome])
        if not self.stop_reason:
            self.stop_reason = self.breaker.add(outcome)


def _lane_turn() -> dt.timedelta:
    """Return how long a lane runs before it hands its job back to go on (a fresh attempt).

    Shorter than half the lane task's timeout (e.g. DEFAULT_TIMEOUT), so a long
    send is never mistaken for a hung handler.
    """
    timeout = get_task(SEND_BATCH_TASK).timeout
    return min(LANE_TURN, timeout / 2) if timeout else LANE_TURN
