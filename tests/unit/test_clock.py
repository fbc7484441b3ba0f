"""The one clock: now() is aware UTC; frozen_clock freezes and moves it."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.utils import timezone

from scheduler_app import clock

AT = dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)


def test_now_is_aware_utc_and_real_when_not_frozen():
    before = timezone.now()
    value = clock.now()
    after = timezone.now()

    assert value.utcoffset() == dt.timedelta(0)
    assert before <= value <= after


def test_frozen_clock_freezes_now():
    with clock.frozen_clock(AT):
        first = clock.now()
        second = clock.now()

    assert first == second == AT


def test_advance_moves_the_frozen_time_and_returns_it():
    with clock.frozen_clock(AT) as frozen:
        moved = frozen.advance(dt.timedelta(minutes=5))
        assert moved == AT + dt.timedelta(minutes=5)
        assert clock.now() == AT + dt.timedelta(minutes=5)
        frozen.advance(dt.timedelta(seconds=-30))
        assert clock.now() == AT + dt.timedelta(minutes=4, seconds=30)


def test_set_jumps_the_frozen_time():
    with clock.frozen_clock(AT) as frozen:
        frozen.set(AT + dt.timedelta(days=1))
        assert clock.now() == AT + dt.timedelta(days=1)


def test_frozen_time_in_another_zone_reads_back_in_utc():
    paris = dt.datetime(2026, 7, 1, 14, 0, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))

    with clock.frozen_clock(paris):
        value = clock.now()

    assert value == dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)
    assert value.tzinfo == dt.UTC


def test_leaving_frozen_clock_restores_the_real_clock():
    with clock.frozen_clock(AT):
        pass

    assert abs(clock.now() - timezone.now()) < dt.timedelta(seconds=5)


def test_leaving_frozen_clock_after_an_exception_restores_the_real_clock():
    with pytest.raises(RuntimeError), clock.frozen_clock(AT):
        raise RuntimeError("boom")

    assert clock.now() != AT
    assert abs(clock.now() - timezone.now()) < dt.timedelta(seconds=5)


def test_nested_frozen_clocks_restore_the_outer_time():
    with clock.frozen_clock(AT):
        with clock.frozen_clock(AT + dt.timedelta(hours=1)):
            assert clock.now() == AT + dt.timedelta(hours=1)
        assert clock.now() == AT


def test_frozen_clock_refuses_a_naive_datetime():
    naive = dt.datetime(2026, 3, 1, 12, 0)

    with (
        pytest.raises(ValueError, match=r"^frozen_clock\(\) needs an aware datetime$"),
        clock.frozen_clock(naive),
    ):
        pass

    assert clock.now() != dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def test_set_refuses_a_naive_datetime_and_keeps_the_frozen_time():
    with clock.frozen_clock(AT) as frozen:
        with pytest.raises(ValueError, match=r"^frozen_clock\(\) needs an aware datetime$"):
            frozen.set(dt.datetime(2026, 3, 2))
        assert clock.now() == AT
