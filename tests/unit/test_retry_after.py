"""parse_retry_after() and RetryLater: "try again later" without using an attempt."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.exceptions import RetryLater, SchedulerError, parse_retry_after

NOW = dt.datetime(2026, 10, 21, 7, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("value", "seconds"), [("0", 0), ("1", 1), ("120", 120), (" 30 ", 30), ("86400", 86400)]
)
def test_retry_after_delay_seconds(value, seconds):
    assert parse_retry_after(value, now=NOW) == dt.timedelta(seconds=seconds)


def test_retry_after_http_date_is_the_time_until_that_date():
    assert parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now=NOW) == dt.timedelta(minutes=28)


def test_retry_after_http_date_with_minus_zero_offset_is_read_as_utc():
    assert parse_retry_after("Wed, 21 Oct 2026 07:00:30 -0000", now=NOW) == dt.timedelta(seconds=30)


def test_retry_after_http_date_with_an_offset_is_converted():
    # 09:05 at +0200 is 07:05 UTC.
    assert parse_retry_after("Wed, 21 Oct 2026 09:05:00 +0200", now=NOW) == dt.timedelta(minutes=5)


def test_retry_after_reads_the_frozen_clock_when_now_is_not_given():
    with frozen_clock(NOW):
        assert parse_retry_after("Wed, 21 Oct 2026 07:01:00 GMT") == dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2026 06:59:59 GMT",
        "Tue, 20 Oct 2026 07:00:00 GMT",
        "Thu, 01 Jan 1970 00:00:00 GMT",
    ],
)
def test_retry_after_date_in_the_past_is_zero(value):
    assert parse_retry_after(value, now=NOW) == dt.timedelta(0)


@pytest.mark.parametrize(
    "value", ["soon", "", "   ", "-5", "1.5", "12s", "Wed, 99 Foo 2026", "\u00b2", "9" * 30]
)
def test_retry_after_garbage_raises_value_error_naming_the_value(value):
    with pytest.raises(ValueError) as excinfo:
        parse_retry_after(value, now=NOW)

    assert str(excinfo.value) == "Retry-After is neither seconds nor an HTTP date: %r" % value


def test_retry_later_with_delay_seconds():
    exc = RetryLater(45, reason="rate limited")

    assert exc.delay == dt.timedelta(seconds=45)
    assert exc.reason == "rate limited"
    assert str(exc) == "retry later in 45.0s: rate limited"
    assert exc.code == "retry_later"
    assert isinstance(exc, SchedulerError)


def test_retry_later_with_timedelta():
    exc = RetryLater(dt.timedelta(minutes=2))

    assert exc.delay == dt.timedelta(minutes=2)
    assert str(exc) == "retry later in 120.0s"


def test_retry_later_with_zero_delay_is_allowed():
    assert RetryLater(0).delay == dt.timedelta(0)


def test_retry_later_with_retry_after_header_value():
    assert RetryLater(retry_after="90").delay == dt.timedelta(seconds=90)
    with frozen_clock(NOW):
        assert RetryLater(retry_after="Wed, 21 Oct 2026 07:10:00 GMT").delay == dt.timedelta(
            minutes=10
        )


def test_retry_later_needs_a_delay_or_retry_after():
    with pytest.raises(ValueError, match=r"^RetryLater needs exactly one of delay or retry_after$"):
        RetryLater()


def test_retry_later_refuses_both_delay_and_retry_after():
    with pytest.raises(ValueError, match=r"^RetryLater needs exactly one of delay or retry_after$"):
        RetryLater(5, retry_after="5")


@pytest.mark.parametrize("delay", [-1, dt.timedelta(seconds=-1)])
def test_retry_later_refuses_a_negative_delay(delay):
    with pytest.raises(ValueError, match=r"^RetryLater delay must not be negative$"):
        RetryLater(delay)


def test_retry_later_with_garbage_retry_after_raises_value_error():
    with pytest.raises(ValueError, match=r"^Retry-After is neither seconds nor an HTTP date: 'x'$"):
        RetryLater(retry_after="x")
