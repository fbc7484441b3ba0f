"""Keep running lanes' recipient claims alive: one thread and one connection per process.

A lane claims a chunk of recipients for SEND_CLAIM_SECONDS and may spend
longer than that on the chunk (slow provider calls, rate limits). Every third
of a claim period its claims are extended: the rest of its chunk, and the
recipients whose provider calls are running (the lane's window). One keeper thread per
process does this for every lane the process runs, on the process's side connection
(scheduler_app.side_connection, shared with a worker's other side threads), so lanes cost
no connection for their claims however many run. The thread starts with the first lane
and ends with the last.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time

from django.db import DatabaseError, InterfaceError

from scheduler_app.db import backend
from scheduler_app.side_connection import SideConnection, side_connection

logger = logging.getLogger("scheduler_app.sends")

#: Claim periods a provider call may run before its recipient's claim is given up.
IN_FLIGHT_LIMIT = 5


class ClaimKeeper:
    """What one lane holds claimed, kept alive by the process's keeper thread while in use.

    A call that runs past IN_FLIGHT_LIMIT claim periods is given up: its
    recipient's claim lapses and another lane sends it again (same key), so a
    hung call cannot hold a batch for ever.
    """

    def __init__(self, batch_id: int, claim: str, claim_for: dt.timedelta) -> None:
        self.batch_id = batch_id
        self.claim = claim
        self.claim_for = claim_for
        #: Seconds between two extensions of this lane's claims.
        self.period = claim_for.total_seconds() / 3
        #: The chunk's recipient ids and where its not yet sent rest starts, set together.
        self.chunk: tuple[tuple[int, ...], int] = ((), 0)
        #: The recipients whose provider calls are running, and since when (monotonic).
        self.in_flight: dict[int, float] = {}

    def __enter__(self) -> ClaimKeeper:
        _keeper_thread.add(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _keeper_thread.discard(self)

    def hold(self, recipient_ids: tuple[int, ...], start: int = 0) -> None:
        """Keep ``recipient_ids[start:]`` (the chunk's recipients not yet marked) claimed."""
        self.chunk = (recipient_ids, start)

    def calling(self, recipient_id: int) -> None:
        """Keep ``recipient_id`` claimed while its provider call runs (until returned())."""
        self.in_flight[recipient_id] = time.monotonic()

    def returned(self, recipient_id: int) -> None:
        """The provider call of ``recipient_id`` returned: its marker is next."""
        self.in_flight.pop(recipient_id, None)

    def extend(self, side: SideConnection) -> None:
        """Extend the claims the lane holds now, by a claim period from the database's now,
        in a turn on ``side``."""
        chunk, start = self.chunk
        ids = set(chunk[start:])
        now = time.monotonic()
        for recipient_id, since in list(self.in_flight.items()):  # a copy: lanes change it
            running = now - since
            if running < IN_FLIGHT_LIMIT * self.claim_for.total_seconds():
                ids.add(recipient_id)
            else:
                ids.discard(recipient_id)
                logger.error(
                    "provider call hangs, its claim is given up recipient=%s claim=%s "
                    "running=%.0fs",
                    recipient_id,
                    self.claim,
                    running,
                )
        if ids:
            with side.use():
                backend().extend_claims(
                    recipient_ids=sorted(ids),
                    batch_id=self.batch_id,
                    claim=self.claim,
                    claim_for=self.claim_for,
                )


class _KeeperThread:
    """The process's one thread that extends every running lane's claims when they are due."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start with no lanes and no thread (also in a forked child, where the parent's
        thread and lanes do not exist and its lock may have been held)."""
        self._changed = threading.Condition()
        #: Keepers in use and when (monotonic) each one's claims are next extended.
        self._due: dict[ClaimKeeper, float] = {}
        self._thread: threading.Thread | None = None

    def add(self, keeper: ClaimKeeper) -> None:
        with self._changed:
            self._due[keeper] = time.monotonic() + keeper.period
            if self._thread is None:
                self._start()
            self._changed.notify()

    def _start(self) -> None:
        """Start the thread (the caller holds the lock)."""
        thread = threading.Thread(target=self._run, name="scheduler-claims", daemon=True)
        thread.start()
        self._thread = thread

    def discard(self, keeper: ClaimKeeper) -> None:
        with self._changed:
            self._due.pop(keeper, None)
            self._changed.notify()  # the last one out lets the thread end now

    def _run(self) -> None:
        side = side_connection()
        try:
            with side.kept():
                self._extend_while_lanes_run(side)
        finally:
            with self._changed:
                if self._thread is threading.current_thread():
                    # Ended by something nothing above caught: lanes still running get a
                    # new thread.
                    self._thread = None
                    if self._due:
                        self._start()

    def _extend_while_lanes_run(self, side: SideConnection) -> None:
        while due := self._wait_for_due():
            for keeper in due:
                # Outside the lock: lanes start and end while a statement runs.
                try:
                    keeper.extend(side)
                except (DatabaseError, InterfaceError) as exc:
                    logger.warning("claim extension failed claim=%s error=%s", keeper.claim, exc)
                    side.close()
                except Exception:
                    # This thread serves every lane of the process: it goes on.
                    logger.exception("claim extension failed claim=%s", keeper.claim)

    def _wait_for_due(self) -> list[ClaimKeeper]:
        """Wait until some keepers are due and return them, or return [] (and let the
        thread end) once no lane uses a keeper."""
        with self._changed:
            while self._due:
                now = time.monotonic()
                due = [keeper for keeper, at in self._due.items() if at <= now]
                if due:
                    for keeper in due:
                        self._due[keeper] = now + keeper.period
                    return due
                self._changed.wait(min(self._due.values()) - now)
            self._thread = None  # the next add() starts a new thread
            return []


_keeper_thread = _KeeperThread()
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_keeper_thread.reset)
