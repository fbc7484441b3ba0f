"""The one clock: everything in scheduler_app reads the time through now().

Tests freeze and move it with ``frozen_clock``; worker subprocesses keep the
real clock, so process tests stage expiry by moving rows' timestamps instead.

now() is this host's clock. What hosts compare with each other (leases,
rescue, due times, undo deadlines) is compared in the database against
``scheduler_app.database_clock.DatabaseNow``, which follows a frozen clock too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import zoneinfo
from collections.abc import Iterator

from django.utils import timezone

_frozen_at: dt.datetime | None = None

#: Files among the zones that ZoneInfo opens but that name no place: the host's own zone
#: (what it means depends on the machine reading it) and tzdata's placeholder.
NOT_PLACES = frozenset({"localtime", "Factory"})


def now() -> dt.datetime:
    """Return the current time, aware and in UTC."""
    return _frozen_at if _frozen_at is not None else timezone.now()


def frozen_at() -> dt.datetime | None:
    """Return the frozen time inside ``frozen_clock``, else None."""
    return _frozen_at


class FrozenClock:
    """Handle returned by frozen_clock(); ``advance()`` moves the frozen time."""

    def advance(self, delta: dt.timedelta) -> dt.datetime:
        global _frozen_at
        assert _frozen_at is not None
        _frozen_at = _frozen_at + delta
        return _frozen_at

    def set(self, at: dt.datetime) -> None:
        global _frozen_at
        _frozen_at = _require_aware(at)


@contextlib.contextmanager
def frozen_clock(at: dt.datetime) -> Iterator[FrozenClock]:
    """Freeze now() at ``at`` (aware) for the duration of the block."""
    global _frozen_at
    previous = _frozen_at
    _frozen_at = _require_aware(at)
    try:
        yield FrozenClock()
    finally:
        _frozen_at = previous


def _require_aware(at: dt.datetime) -> dt.datetime:
    if timezone.is_naive(at):
        raise ValueError("frozen_clock() needs an aware datetime")
    return at.astimezone(dt.UTC)


def time_zone(name: str) -> zoneinfo.ZoneInfo:
    """Return the IANA time zone ``name``.

    Raise ZoneInfoNotFoundError for any other name ZoneInfo would open too: the host's
    ``localtime``, and tzdata's ``posix/`` and ``right/`` copies (the latter count leap
    seconds, so their times are off by half a minute).
    """
    if name not in _iana_names():
        raise zoneinfo.ZoneInfoNotFoundError("No time zone found with key %s" % name)
    return zoneinfo.ZoneInfo(name)


@functools.cache
def _iana_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - NOT_PLACES
