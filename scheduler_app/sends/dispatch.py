"""Delivery: lanes of a batch claim chunks of recipients and send them through a window.

A scheduled batch runs as SEND_LANES jobs of the ``scheduler_app.send_batch``
task, so several workers share one send (a worker may run several lanes of a
batch, one per handler thread). A lane claims a chunk of recipients (SKIP
LOCKED, with a claim that expires and that the lane extends while it works),
then for each recipient: checks the batch status and the kill switches,
suppression, renders, takes a token from the shared limiter, checks that its
claim still owns the recipient and charges it the attempt, and starts the
provider call with the idempotency key ``<batch>:<recipient key>`` in the
lane's window (sends.window: up to SEND_WINDOW calls in flight, fewer while
the provider throttles); each call's marker is written as soon as it returns.

Durability contract: a recipient's attempt commits before its call, and its
sent marker with the lane's next statement after the call returns (the next
recipient's attempt, or on its own while the lane waits), so a crash re-sends
at most the calls in flight, never more than the window, each with the same
key and Message-ID. A crash is charged to the recipients in flight: after
RECIPIENT_MAX_ATTEMPTS of them one fails. Counters go to the lane's own
LaneProgress row, never to the batch row, so no lane waits for another. A
provider that declares ``idempotent = True`` (one delivery per key) lets
markers wait for the end of the chunk, and its lane charges attempts to groups
of recipients (1, 2, 4, ... up to BEGIN_GROUP_MAX per statement), so a crash
re-sends the chunk's unmarked recipients (the provider drops the copies) and
charges the group in flight. A batch is never re-run as a whole, and the
sweeper (sends.sweeper) gives lanes back to a batch left without any.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping

from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.db.models import F, Max, Min
from django.db.models.functions import Coalesce, Greatest

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.controls import paused_scopes
from scheduler_app.db import backend, write_across_reconnects
from scheduler_app.exceptions import RetryLater, describe
from scheduler_app.feedback import suppressions
from scheduler_app.feedback.unsubscribe import (
    UnsubscribeLinks,
    message_token,
)
from scheduler_app.feedback.unsubscribe import (
    headers as unsubscribe_headers,
)
from scheduler_app.models import LaneProgress, Recipient, SendBatch
from scheduler_app.registry import JobContext, get_task, task
from scheduler_app.retry import RetryPolicy
from scheduler_app.sends import limiter, stale, states
from scheduler_app.sends.audience import thaw_context
from scheduler_app.sends.chunking import ChunkSizer
from scheduler_app.sends.claim_keeper import ClaimKeeper
from scheduler_app.sends.providers import (
    PermanentSendError,
    Provider,
    RefusedAtRcpt,
    SenderRefused,
    SlowDown,
    TransientSendError,
    get_provider,
    in_use,
)
from scheduler_app.sends.rendering import Message, MessageTemplate, RenderError
from scheduler_app.sends.start import start_sending
from scheduler_app.sends.window import Window

logger = logging.getLogger("scheduler_app.sends")

SEND_BATCH_TASK = "scheduler_app.send_batch"
SEND_MESSAGE_TASK = "scheduler_app.send_message"
#: Recipient retries: full-jitter backoff between attempts of one recipient.
RECIPIENT_RETRY = RetryPolicy(base=dt.timedelta(seconds=30), cap=dt.timedelta(hours=1))
#: A lane waits (without using attempts) behind a kill switch, a 429, or recipients due later.
LANE_RETRY = RetryPolicy(retry_later_budget=dt.timedelta(days=30))
PAUSED_RECHECK = dt.timedelta(seconds=2)
KILL_SWITCHED = "sends are paused by a kill switch"
#: A provider's request to slow down for at most this long is sat out inside the lane;
#: after a longer one the lane hands its chunk and its job back and waits.
SLOW_DOWN_IN_LANE = dt.timedelta(seconds=10)
#: Seconds between a lane's looks at pause/cancel and the kill switches inside a chunk.
HALT_RECHECK = 1.0
#: Lane errors (exceptions, not crashes) in a row, with nothing marked, that pause the batch.
LANE_ERRORS_BEFORE_PAUSE = 3
#: A lane that finds the rest of the batch claimed by other lanes looks again this soon.
OTHER_LANES_RECHECK = dt.timedelta(seconds=2)
#: A lane hands its job back after this long and goes on in a fresh attempt.
LANE_TURN = dt.timedelta(minutes=5)
#: Why a recipient frozen without an address is skipped.
NO_ADDRESS = "The recipient has no address."
#: The largest group of recipients an idempotent provider's lane charges in one statement.
BEGIN_GROUP_MAX = 100

Status = Recipient.Status


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one claimed recipient."""

    recipient_id: int
    status: str
    sent_at: dt.datetime | None = None
    message_id: str = ""
    #: The recipient's last error; None keeps the one it has (a hand-back, not an attempt).
    error: str | None = ""
    next_attempt_at: dt.datetime | None = None
    refund: int = 0

    def as_row(self) -> tuple:
        """Return the row db.<vendor>.mark_recipients() takes."""
        return (
            self.recipient_id,
            self.status,
            self.sent_at,
            self.message_id,
            self.error,
            self.next_attempt_at,
            self.refund,
        )


@task(name=SEND_BATCH_TASK, max_attempts=25, retry=LANE_RETRY)
def send_batch(job: JobContext) -> dict[str, int]:
    """Run one lane of a batch until it is done, paused, cancelled or the worker stops."""
    batch_id = job.payload["batch"]
    try:
        return run_lane(
            batch_id,
            claim="%s:%s" % (job.job_id, uuid.uuid4().hex[:8]),
            should_stop=job.should_stop,
        )
    except RetryLater:
        raise
    except (OperationalError, InterfaceError) as exc:
        # The database is away (not the batch's fault), unless the connection still
        # works: then it is a statement that keeps failing (a missing table, a timeout).
        if connection.is_usable():
            _count_lane_error(batch_id, exc)
        raise
    except Exception as exc:
        _count_lane_error(batch_id, exc)
        raise


def run_lane(batch_id: int, *, claim: str, should_stop: Callable[[], bool]) -> dict[str, int]:
    """Send chunks of ``batch_id`` until nothing is left for this lane; return its counts."""
    batch = SendBatch.objects.get(pk=batch_id)
    try:
        template = MessageTemplate.compile(
            batch.subject_template, batch.text_template, batch.html_template
        )
    except RenderError as exc:
        if batch.started_at is not None:
            # Other workers compiled it (a worker of an older deploy lacks a tag
            # library?): a lane error, which pauses the batch if it persists.
            raise
        states.fail(batch_id, "The template does not compile: %s" % exc)
        return {}
    batch = start_sending(batch_id)
    if batch is None:
        return {}
    return Lane(batch, template, claim=claim, should_stop=should_stop).run()


def _count_lane_error(batch_id: int, exc: Exception) -> None:
    """Count a lane error; pause the batch at LANE_ERRORS_BEFORE_PAUSE in a row."""
    SendBatch.objects.filter(pk=batch_id).update(lane_errors=F("lane_errors") + 1)
    errors = SendBatch.objects.filter(pk=batch_id).values_list("lane_errors", flat=True).first()
    logger.warning(
        "lane error batch=%s errors_in_a_row=%s error=%s", batch_id, errors, describe(exc)
    )
    if errors is not None and errors >= LANE_ERRORS_BEFORE_PAUSE:
        states.pause(
            batch_id,
            reason="The send stopped after %s lane errors in a row with nothing sent; "
            "last error: %s" % (errors, describe(exc)),
        )


def _batch_breaker_window(batch: SendBatch) -> str:
    """Return the breaker windows the batch's lanes left, oldest lane run first."""
    rows = LaneProgress.objects.filter(batch_id=batch.pk).exclude(breaker_window="")
    return "".join(rows.order_by("id").values_list("breaker_window", flat=True))


class Breaker:
    """The automatic breaker: trips when too many of the latest attempts failed."""

    def __init__(self, batch: SendBatch) -> None:
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
        if outcome.refund:
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
        self.keeper = ClaimKeeper(claim, self.claim_for)
        self.halted = _halt_check(batch.pk)
        self.breaker = Breaker(batch)
        self.unsubscribe = UnsubscribeLinks()
        self.sizer = ChunkSizer(app_settings.SEND_CHUNK_SIZE)
        self.counts: collections.Counter[str] = collections.Counter()
        self.unlogged = 0
        self.unmarked: list[Outcome] = []
        #: Idempotent provider: the group charged and not yet called, {id: attempt or None}.
        self.begun: dict[int, int | None] = {}
        self.group_size = 1
        self.turn_ends = time.monotonic() + _lane_turn().total_seconds()
        #: Set when the lane must end after this chunk (breaker, provider refused the sender).
        self.stop_reason = ""
        #: Set when the provider asked us to slow down: the lane waits this long.
        self.slow_down: SlowDown | None = None
        self.slowed_at = 0.0
        #: The provider calls in flight, on the lane's sender threads.
        self.window = Window(self.provider, app_settings.SEND_WINDOW)
        #: Whether this run already cleared the batch's lane errors (see _count).
        self.errors_cleared = False
        #: Whether the provider accepted a message in this run (see RefusedAtRcpt).
        self.provider_accepted = False
        #: Recipients rendered and about to begin: (index in the chunk, id, key, message).
        self.ready: list[tuple[int, int, str, Message]] = []

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
                halt = _why_not_send(batch_id)
                if halt == KILL_SWITCHED:
                    raise RetryLater(delay=PAUSED_RECHECK, reason=halt)
                if halt:
                    logger.info("lane stops batch=%s reason=%s", batch_id, halt)
                    return dict(self.counts)
                late = stale.late_recipient(self.batch)
                if late is not None:
                    stale.pause_stale(self.batch, late, what="a local-time delivery")
                    return dict(self.counts)
                size = limiter.chunk_size_for(self.batch.rate_limit_key, self.sizer.next_size())
                started = time.monotonic()
                rows = backend().claim_recipients(
                    batch_id=batch_id, claim=self.claim, limit=size, claim_for=self.claim_for
                )
                if not rows:
                    return _finish_lane(self.batch, self.counts)
                done = self._send_chunk(rows)
                self._keep_breaker_window()
                self.sizer.observe(recipients=done, seconds=time.monotonic() - started)
                if self.stop_reason:
                    states.pause(batch_id, reason=self.stop_reason)
                    return dict(self.counts)
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
            self.unmarked.extend(Outcome(r[1], Status.PENDING, error=None) for r in self.ready)
            self.ready = []
            # The group's recipients not called yet go back with their attempt refunded.
            self.unmarked.extend(
                Outcome(recipient_id, Status.PENDING, refund=1)
                for recipient_id, attempt in self.begun.items()
                if attempt is not None
            )
            self.begun = {}
            self._mark_before_raising()
            raise
        finally:
            self.keeper.hold(())

    def _send_rows(self, rows: list[tuple]) -> int:
        limited = limiter.is_limited(self.batch.rate_limit_key)
        suppressed = suppressions.skip_reasons([row[2] for row in rows], self.batch)
        # A chunk holding a recipient charged before (a lane died with it, or it is being
        # retried) is marked one recipient at a time even for an idempotent provider:
        # otherwise each crash in it loses the chunk's markers again and charges every
        # recipient sent before the crash once more, until they fail as deaths.
        self.marks_per_chunk = self.idempotent and not any(row[5] for row in rows)
        self.group_size = 1
        halt = ""
        reached = 0
        chunk_ids = tuple(row[0] for row in rows)
        for reached, (recipient_id, key, address, _tz, context, attempts) in enumerate(rows):
            # The rows not marked yet stay claimed, or another lane may take them: the rest
            # of the chunk (from the first one rendered and not begun yet), and the calls in
            # flight (the keeper knows those).
            start = self.ready[0][0] if self.ready else reached
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
                        refund=self._uncalled(recipient_id),
                    )
                )
                continue
            message = self.unsubscribe.add(message, self.unsubscribe.recipient_token(recipient_id))
            if limited:
                self._start_ready()
                self._mark()  # a marker never waits for the limiter
                if not limiter.wait_for_token(
                    self.batch.rate_limit_key, should_stop=self._halt_while_waiting
                ):
                    halt = self._why_halt() or "worker stopping"
                    break
            if not self.marks_per_chunk and attempts:
                # Charged before (a lane may have died in its call): sent alone, nothing
                # else in flight, so a crash storm charges it only for its own call and a
                # window of others cannot use up its attempts.
                self._start_ready()
                self._drain()
                self.ready.append((reached, recipient_id, key, message))
                self._start_ready()
                self._drain()
                continue
            if not self.marks_per_chunk:
                # Begun in groups: the markers of the calls that returned and the attempts
                # of the next calls, one statement (see _start_ready).
                self.ready.append((reached, recipient_id, key, message))
                if limited or self._room() <= 0:
                    self._start_ready()
                continue
            if recipient_id not in self.begun:
                self._begin_group(
                    [
                        row[0]
                        for row in rows[reached:]
                        if row[5] < app_settings.RECIPIENT_MAX_ATTEMPTS and row[2] not in suppressed
                    ]
                )
            self._call(message, key, recipient_id, self.begun.pop(recipient_id, None))
        else:
            reached = len(rows)
            self._start_ready()
        # Every call in flight returns and is marked before the chunk ends.
        self._drain()
        # The rest of the chunk goes back as it was (no attempt used), with those rendered
        # and not begun; after a SlowDown it waits as long as the provider asked.
        wait = self.slow_down.delay if self.slow_down else None
        back = [ready[1] for ready in self.ready] + [row[0] for row in rows[reached:]]
        self.ready = []
        self.unmarked.extend(
            Outcome(
                recipient_id,
                Status.PENDING,
                next_attempt_at=clock.now() + wait if wait else None,
                error=str(self.slow_down) if wait else None,  # None: keep its last error
                refund=self._uncalled(recipient_id),
            )
            for recipient_id in back
        )
        self.begun = {}
        self._mark()
        if halt:
            logger.info("chunk handed back batch=%s reason=%s", self.batch.pk, halt)
        return reached

    def _keep_breaker_window(self) -> None:
        """Store the breaker's window in the lane's own row (one statement per chunk)."""
        LaneProgress.objects.update_or_create(
            claim=self.claim,
            defaults={"breaker_window": self.breaker.window()},
            create_defaults={"batch": self.batch, "breaker_window": self.breaker.window()},
        )

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
                    self._settle(wait=min(resume - time.monotonic(), HALT_RECHECK), mark=True)
                    continue
                self.slow_down = None
            if self._room() > 0:
                return ""
            if self.ready:
                self._start_ready()
                continue
            # The window is full: wait for a call to return. Its marker goes with the next
            # attempts (one commit), unless nothing follows it: the chunk's end marks it.
            self._settle(wait=HALT_RECHECK)

    def _halt_while_waiting(self) -> bool:
        """While waiting for a rate-limit token: mark the calls that returned; True to stop."""
        self._settle(mark=True)
        return bool(self._why_halt())

    def _drain(self) -> None:
        """Wait for every call in flight to return, marking each as it does."""
        while self.window.in_flight:
            self._settle(wait=HALT_RECHECK, mark=True)

    def _room(self) -> int:
        """Return how many more calls may start now (the window less those in flight and
        those rendered, about to begin)."""
        return self.window.size - self.window.in_flight - len(self.ready)

    def _settle(self, *, wait: float | None = 0.0, mark: bool = False) -> None:
        """Take the outcomes of the calls that returned (waiting up to ``wait`` seconds for
        one, None: for ever); mark them now if ``mark``, or if the lane stops (otherwise the
        next begin writes them, in the same commit)."""
        finished = self.window.done(wait=wait)
        for recipient_id, outcome, exc in finished:
            self.keeper.returned(recipient_id)
            self._add(self._outcome_of(recipient_id, outcome, exc))
        if finished and (mark or self.stop_reason):
            self._mark()

    def _start_ready(self) -> None:
        """Begin the recipients rendered and waiting, in one statement that also writes the
        markers of the calls that returned; then start their provider calls."""
        if not self.ready:
            return
        ready, self.ready = self.ready, []
        attempts, kept = backend().mark_and_begin(
            recipient_ids=[recipient_id for _, recipient_id, _, _ in ready],
            claim=self.claim,
            claim_for=self.claim_for,
            batch_id=self.batch.pk,
            marks=[o.as_row() for o in self.unmarked],
        )
        if self.unmarked:
            self._count(kept, len(self.unmarked))
            self.unmarked = []
        for _, recipient_id, key, message in ready:
            self._call(message, key, recipient_id, attempts.get(recipient_id))

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
        if isinstance(exc, RefusedAtRcpt) and self.provider_accepted:
            # The server takes others: a block of this address, not of us.
            return Outcome(recipient_id, Status.FAILED, error=str(exc))
        if isinstance(exc, SenderRefused):  # not the recipient's fault: no attempt used, pause
            self.stop_reason = self.stop_reason or str(exc)
            # Due again behind the rest: after a resume the others show whose fault it is.
            return Outcome(
                recipient_id,
                Status.PENDING,
                refund=1,
                error=str(exc),
                next_attempt_at=clock.now() if isinstance(exc, RefusedAtRcpt) else None,
            )
        raise exc  # not an Exception (deliver() turns those into outcomes)

    def _why_halt(self) -> str:
        """Return why the rest of a chunk must not be sent now, or ''."""
        if self.should_stop():
            return "worker stopping"
        if time.monotonic() >= self.turn_ends:
            return "the lane's turn is over"
        return self.halted()

    def _begin_group(self, recipient_ids: list[int]) -> None:
        """Charge the next group of an idempotent provider's recipients in one statement."""
        group = recipient_ids[: self.group_size]
        attempts = backend().begin_recipients(
            recipient_ids=group, claim=self.claim, claim_for=self.claim_for
        )
        self.begun = {recipient_id: attempts.get(recipient_id) for recipient_id in group}
        self.group_size = min(self.group_size * 2, BEGIN_GROUP_MAX)

    def _uncalled(self, recipient_id: int) -> int:
        """Return 1 (the attempt to refund) if the recipient was charged with a group and not
        called, else 0."""
        return 1 if self.begun.pop(recipient_id, None) is not None else 0

    def _call(self, message: Message, key: str, recipient_id: int, attempt: int | None) -> None:
        """Start the provider call of a recipient charged ``attempt`` (None: another lane owns
        it now, no call) in the window."""
        if attempt is None:
            logger.warning(
                "recipient taken over, not sent batch=%s recipient=%s claim=%s",
                self.batch.pk,
                recipient_id,
                self.claim,
            )
            return
        self.keeper.calling(recipient_id)
        idempotency_key = "%s:%s" % (self.batch.pk, key)
        self.window.submit(
            recipient_id,
            lambda: deliver(self.provider, message, idempotency_key, recipient_id, attempt),
        )

    def _add(self, outcome: Outcome) -> None:
        """Queue an outcome for marking; feed the breaker."""
        self.unmarked.append(outcome)
        if not self.stop_reason:
            self.stop_reason = self.breaker.add(outcome)

    def _mark(self) -> None:
        """Write the queued markers and the batch counters, fenced by our claim."""
        if not self.unmarked:
            return
        kept = backend().mark_recipients(
            [o.as_row() for o in self.unmarked], claim=self.claim, batch_id=self.batch.pk
        )
        written, self.unmarked = len(self.unmarked), []
        self._count(kept, written)

    def _mark_before_raising(self) -> None:
        """Write the markers held in memory despite the error, trying for a while.

        A marker written twice changes nothing the second time (the claim fence),
        so a retry after a reply that was lost is safe.
        """
        try:
            write_across_reconnects(self._mark, seconds=self.claim_for.total_seconds() / 2)
        except DatabaseError as exc:
            logger.error(
                "markers not written batch=%s claim=%s markers=%s error=%s",
                self.batch.pk,
                self.claim,
                len(self.unmarked),
                exc,
            )

    def _count(self, statuses: list[str], written: int) -> None:
        """Count the markers that were written; log progress now and then."""
        if len(statuses) < written:
            logger.warning(
                "claim lost, some markers discarded batch=%s claim=%s discarded=%s",
                self.batch.pk,
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
            SendBatch.objects.filter(pk=self.batch.pk, lane_errors__gt=0).update(lane_errors=0)
        if self.unlogged >= app_settings.PROGRESS_LOG_EVERY:
            self.unlogged = 0
            _log_progress(self.batch.pk)


def _lane_turn() -> dt.timedelta:
    """Return how long a lane runs before it hands its job back to go on (a fresh attempt).

    Shorter than half the lane task's timeout (e.g. DEFAULT_TIMEOUT), so a long
    send is never mistaken for a hung handler.
    """
    timeout = get_task(SEND_BATCH_TASK).timeout
    return min(LANE_TURN, timeout / 2) if timeout else LANE_TURN


def _halt_check(batch_id: int) -> Callable[[], str]:
    """Return a function saying why the lane must stop ('' to go on), looking once a second."""
    next_look = time.monotonic() + HALT_RECHECK

    def check() -> str:
        nonlocal next_look
        if time.monotonic() < next_look:
            return ""
        next_look = time.monotonic() + HALT_RECHECK
        return _why_not_send(batch_id)

    return check


def _why_not_send(batch_id: int) -> str:
    """Return why a lane of the batch must not send now ('' to go on): its status, or
    KILL_SWITCHED."""
    status = SendBatch.objects.filter(pk=batch_id).values_list("status", flat=True).first()
    if status != SendBatch.Status.SENDING:
        return "batch is %s" % status
    if paused_scopes().covers(queue=app_settings.SEND_QUEUE, task_name=SEND_BATCH_TASK):
        return KILL_SWITCHED
    return ""


def deliver(
    provider: Provider, message: Message, key: str, recipient_id: int, attempts: int
) -> Outcome:
    """Call the provider once; raise SlowDown or SenderRefused, else return the outcome."""
    try:
        message_id = provider.send(message, key)
    except (SlowDown, SenderRefused):
        raise
    except PermanentSendError as exc:
        return Outcome(recipient_id, Status.FAILED, error=describe(exc))
    except Exception as exc:  # TransientSendError, or a provider bug: retry this recipient
        error = describe(exc)
        if not isinstance(exc, TransientSendError):
            logger.exception("provider raised an unexpected error key=%s", key)
        if attempts >= app_settings.RECIPIENT_MAX_ATTEMPTS:
            return Outcome(recipient_id, Status.FAILED, error=error)
        return Outcome(
            recipient_id,
            Status.PENDING,
            error=error,
            next_attempt_at=clock.now() + RECIPIENT_RETRY.backoff(attempts),
        )
    return Outcome(recipient_id, Status.SENT, sent_at=clock.now(), message_id=str(message_id))


def _finish_lane(batch: SendBatch, counts: Mapping[str, int]) -> dict[str, int]:
    """No due recipient for this lane: wait for retries, or complete the batch."""
    pending = Recipient.objects.filter(batch=batch, status=Status.PENDING, is_seed=False)
    # Due again when its retry time has come and no other lane's claim holds it.
    due = Greatest("next_attempt_at", Coalesce("claimed_until", "next_attempt_at"))
    found = pending.aggregate(at=Min(due), claimed=Max("claimed_until"))
    if found["at"] is not None:
        # Retries and local delivery times still to come, or other lanes' claims.
        delay = max(found["at"] - clock.now(), dt.timedelta(seconds=1))
        if found["claimed"] is not None and found["claimed"] > clock.now():
            # Another lane is sending its chunk: the next chunk is claimable within about a
            # second of work, long before that claim would expire.
            delay = min(delay, OTHER_LANES_RECHECK)
        raise RetryLater(delay=delay, reason="waiting for recipients due later")
    now = clock.now()
    if SendBatch.objects.filter(pk=batch.pk, status=SendBatch.Status.SENDING).update(
        status=SendBatch.Status.COMPLETED, finished_at=now
    ):
        done = SendBatch.objects.get(pk=batch.pk)
        logger.info(
            "batch completed batch=%s sent=%s failed=%s skipped=%s",
            batch.pk,
            done.sent,
            done.failed,
            done.skipped,
        )
    return dict(counts)


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


#: A single message retries only what may pass; a refusal fails at once.
MESSAGE_RETRY = RetryPolicy(
    base=dt.timedelta(seconds=30), cap=dt.timedelta(hours=1), retry_on=(TransientSendError,)
)


@task(name=SEND_MESSAGE_TASK, max_attempts=5, retry=MESSAGE_RETRY)
def send_message(job: JobContext) -> dict[str, str]:
    """Send one message scheduled by sends.batches.send_message; key = the job's key."""
    late = stale.message_late_by(job)
    if late is not None:
        raise stale.refuse_stale_message(job, late)
    data = job.payload
    scope = data.get("unsubscribe_scope")
    suppressed = suppressions.reasons_for([data["to"]], scope or "")
    if suppressed:
        logger.info("message skipped job=%s reason=%s", job.job_id, suppressed[data["to"]])
        return {"skipped": suppressed[data["to"]]}
    message = Message(
        to=data["to"],
        subject=data["subject"],
        text=data["text"],
        html=data.get("html", ""),
        headers={} if scope is None else unsubscribe_headers(message_token(job.job_id)),
    )
    try:
        with in_use(get_provider(data.get("provider", "email"))) as provider:
            message_id = provider.send(message, "message:%s" % job.idempotency_key)
    except SlowDown as exc:
        raise RetryLater(delay=exc.delay, reason=str(exc)) from exc
    return {"message_id": str(message_id)}
