"""A lane's window: up to SEND_WINDOW provider calls in flight at once, paced by the provider.

Providers answer in 50-200 ms (an ESP's HTTP API, an SMTP server's DATA), so a lane
that made one call at a time sent a few dozen messages a second whatever the
provider allowed. A window keeps several calls in flight, each on a sender
thread of the lane's own (threads, not asyncio: providers are blocking code,
Django's email backends and django-anymail's requests sessions alike, and each
sender thread keeps its own connection open from one message to the next).
Sender threads never touch the database: the lane's thread charges each
attempt before its call and commits each marker after it (sends.charges, sends.markers),
so a crash re-sends at most the calls in flight, never more than the window.

The window's size follows the provider's answers, as TCP's congestion window
does (additive increase, multiplicative decrease): it starts full, halves at
a throttling answer (HTTP 429, SMTP 421 or 4xx X.7.x), at most once per round
of calls, and grows by one call each time a window's worth of calls was
accepted, up to SEND_WINDOW.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from scheduler_app.sends.providers import Provider, close_connection, in_use

#: What a sender thread hands back: (the call's tag, its result, the exception it raised).
Done = tuple[Any, Any, BaseException | None]
#: A call answered faster than this (seconds) gains nothing from a thread of its own.
FAST_CALL = 0.001
#: After this many fast calls in a row, calls run on the lane's thread (one in flight)
#: until one is slow: handing an instant call to a thread costs more than the call.
FAST_CALLS_IN_A_ROW = 50


class Window:
    """Provider calls in flight for one lane, on sender threads, at most ``size`` at once."""

    def __init__(self, provider: Provider, limit: int) -> None:
        self.provider = provider
        self.limit = max(1, limit)
        #: The calls allowed in flight now: the limit, less after throttling answers.
        self.size = self.limit
        self.in_flight = 0
        self._accepted = 0
        self._shrunk_at = 0.0
        self._calls: queue.SimpleQueue[tuple[Any, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[Any, Any, BaseException | None, float]] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._inline = False
        #: Calls answered within FAST_CALL in a row (see FAST_CALLS_IN_A_ROW).
        self._fast = 0

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def has_room(self) -> bool:
        """Return True if one more call may start now."""
        return self.in_flight < self.size

    def submit(self, tag: Any, call: Callable[[], Any]) -> None:
        """Run ``call()`` on a sender thread; done() hands back (tag, result, exception).

        A window of one, or a provider that answers at once (FAST_CALLS_IN_A_ROW calls
        within FAST_CALL), has the call run here, on the lane's thread.
        """
        if self.limit == 1 or (self._fast >= FAST_CALLS_IN_A_ROW and not self.in_flight):
            self._inline = True
            self.in_flight += 1
            self._done.put(_run(tag, call))
            return
        if len(self._threads) < min(self.limit, self.in_flight + 1):
            thread = threading.Thread(target=self._send, name="scheduler-sender", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.in_flight += 1
        self._calls.put((tag, call))

    def done(self, *, wait: float | None = 0.0) -> list[Done]:
        """Return the calls that returned; wait up to ``wait`` seconds (None: for ever) for
        the first one if none has and some are in flight."""
        finished: list[Done] = []
        if self.in_flight and wait != 0.0:
            try:
                finished.append(self._done.get(timeout=wait))
            except queue.Empty:
                return []
        while True:
            try:
                finished.append(self._done.get_nowait())
            except queue.Empty:
                break
        self.in_flight -= len(finished)
        for _tag, _result, _exc, seconds in finished:
            self._fast = self._fast + 1 if seconds < FAST_CALL else 0
        return [(tag, result, exc) for tag, result, exc, _seconds in finished]

    def accepted(self) -> None:
        """Count a call the provider accepted: a window's worth of them grows it by one."""
        self._accepted += 1
        if self._accepted >= self.size:
            self._accepted = 0
            self.size = min(self.limit, self.size + 1)

    def throttled(self, seconds: float) -> bool:
        """Halve the window after a throttling answer (once per ``seconds``, the round of
        calls it answered); return True if it shrank."""
        now = time.monotonic()
        if now - self._shrunk_at < seconds:
            return False
        self._shrunk_at = now
        self._accepted = 0
        self.size = max(1, self.size // 2)
        return True

    def close(self) -> None:
        """End the sender threads once their calls return; each closes its connection."""
        if self._inline:
            close_connection(self.provider)
        for _ in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _send(self) -> None:
        """A sender thread: make the calls handed to it, with its own provider connection."""
        try:
            with in_use(self.provider):
                while (item := self._calls.get()) is not None:
                    self._done.put(_run(*item))
        finally:
            connections.close_all()  # a provider that used the database in this thread


def _run(tag: Any, call: Callable[[], Any]) -> tuple[Any, Any, BaseException | None, float]:
    """Make one call; return (tag, result, None, seconds), or (tag, None, what it raised,
    seconds)."""
    started = time.monotonic()
    try:
        return tag, call(), None, time.monotonic() - started
    except BaseException as exc:  # handed to the lane's thread, which decides
        return tag, None, exc, time.monotonic() - started
