"""Group commit: what the concurrent tasks of one Celery worker process write, in one statement.

A Celery worker with a threads (or gevent) pool runs many tasks at once in
one process; each would make its own start and finish round trip and commit.
A ``GroupCommit`` lets whichever task finds no statement under way apply
everything waiting, its own item among them, while the others wait for its
answer: the leader/follower scheme of a database's group commit. It needs
no thread of its own, and a task alone (a prefork child) pays no wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Slot(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None
        # Set once the item's group is applied (done), or to make this caller the next leader.
        self.wake = threading.Event()


class GroupCommit(Generic[T, R]):
    """Apply items submitted from many threads in groups, with ``apply(items) -> results``
    (one result per item, in order).

    An error ``apply`` raises is raised in every thread whose item was in the
    group, so each caller retries (or gives up) as it would alone. Each waiting
    caller is woken only when it has something to do (its group applied, or its turn
    to lead): a condition shared by all woke every waiting thread for every group.
    """

    def __init__(self, apply: Callable[[Sequence[T]], Sequence[R]]) -> None:
        self._apply = apply
        self._lock = threading.Lock()
        self._waiting: list[_Slot[T, R]] = []
        self._applying = False

    def submit(self, item: T) -> R:
        """Return ``item``'s result, once a group holding it has been applied."""
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            self._waiting.append(slot)
            leads = not self._applying
            self._applying = True
        if not leads:
            slot.wake.wait()
        if not slot.done:  # no group under way, or the last leader handed over to this one
            self._lead()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _lead(self) -> None:
        with self._lock:
            group, self._waiting = self._waiting, []
        try:
            results = self._apply([s.item for s in group])
        except BaseException as exc:  # every caller in the group sees it, as it would alone
            for s in group:
                s.error = exc
        else:
            for s, result in zip(group, results, strict=True):
                s.result = result
        finally:
            for s in group:
                s.done = True
                s.wake.set()
            with self._lock:
                if self._waiting:
                    self._waiting[0].wake.set()  # what arrived meanwhile: its first leads
                else:
                    self._applying = False
