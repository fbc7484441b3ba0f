"""The side connection: one database connection that a process's side threads share.

A worker's side threads (lease renewal, alert evaluation, the send lanes' claim keeper
and the LISTEN wake-up) each held a connection of their own; they now take turns on one.
``with side_connection().use():`` makes it the calling thread's connection for the
block (the ORM and ``scheduler_app.database.connection`` use it), one thread at a time,
so a block is one unit of work: a transaction, or a statement. Nothing slow that is not
the database (a notifier's HTTP call, a mail server) belongs inside a block.

The connection is made from the settings of the scheduler's database
(SCHEDULER_APP['DATABASE'], scheduler_app.database) without Django's pool option:
the LISTEN wake-up keeps session state on it, which a pooled connection would hand on.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Iterator

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from scheduler_app.database import alias


class SideConnection:
    """A connection that threads take turns on, each for a ``use()`` block."""

    def __init__(self, alias: str) -> None:
        own = connections[alias]
        settings_dict = copy.deepcopy(own.settings_dict)
        settings_dict.get("OPTIONS", {}).pop("pool", None)
        self.alias = alias
        self.wrapper: BaseDatabaseWrapper = type(own)(settings_dict, alias)
        self.wrapper.inc_thread_sharing()
        self._turn = threading.Lock()
        self._waiting = 0
        self._keepers = 0
        self._waiting_changed = threading.Condition()

    @contextlib.contextmanager
    def use(self) -> Iterator[BaseDatabaseWrapper]:
        """Make the shared connection this thread's for the block, once no other thread
        uses it; yield it."""
        own = connections[self.alias]
        with self._waiting_changed:
            self._waiting += 1
        self._turn.acquire()
        try:
            with self._waiting_changed:
                self._waiting -= 1
                self._waiting_changed.notify_all()
            connections[self.alias] = self.wrapper
            try:
                yield self.wrapper
            finally:
                connections[self.alias] = own
        finally:
            self._turn.release()

    def let_others_in(self, timeout: float) -> None:
        """Wait (up to ``timeout``) until the threads waiting for a turn had it; for a
        thread that takes turns back to back (the LISTEN wake-up), so it cannot keep the
        others out (a lock does not queue its waiters)."""
        with self._waiting_changed:
            self._waiting_changed.wait_for(lambda: self._waiting == 0, timeout)

    def close(self) -> None:
        """Close the connection at the next turn; the next ``use()`` connects again."""
        with self.use() as wrapper:
            wrapper.close()

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """Around a side thread's life: the connection is closed once the last thread
        that keeps it ends, so a process whose side threads all ended holds none."""
        with self._waiting_changed:
            self._keepers += 1
        try:
            yield
        finally:
            with self._waiting_changed:
                self._keepers -= 1
                last = self._keepers == 0
            if last:
                self.close()


_lock = threading.Lock()
_side: dict[str, SideConnection] = {}  # alias -> this process's (a forked child starts empty)


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it
    _side.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_after_fork)


def side_connection() -> SideConnection:
    """Return this process's side connection."""
    scheduler_database = alias()
    with _lock:
        if scheduler_database not in _side:
            _side[scheduler_database] = SideConnection(scheduler_database)
        return _side[scheduler_database]
