"""Notifiers for the tests: one that always raises."""

from __future__ import annotations


class Exploding:
    """A notifier whose delivery always fails."""

    calls = 0

    def notify(self, event, alert):
        Exploding.calls += 1
        raise ConnectionError("the pager service is down")

    def would_deliver(self):
        return True
