"""Per-item schedules: "3 days after the failure, at 09:00 in the customer's own zone".

Customers in Pacific/Auckland (UTC+13 in January, NZDT) and Pacific/Honolulu
(UTC-10, no DST), each with a payment that failed at 23:59 local time: the
day is counted on the customer's own calendar, whatever the UTC date.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import CancelOutcome, cancel_by_key, task
from scheduler_app.exceptions import InvalidSchedule
from scheduler_app.models import Job
from scheduler_app.schedules.per_item import Item, local_run_time, schedule_per_item
from tests.schedules.steps import utc

AUCKLAND = "Pacific/Auckland"
HONOLULU = "Pacific/Honolulu"
NINE = dt.time(9, 0)
RETRY_TASK = "tests.schedules.retry_payment"


@task(name=RETRY_TASK)
def retry_payment(ctx):
    return None


def local(zone, *args):
    from zoneinfo import ZoneInfo

    return dt.datetime(*args, tzinfo=ZoneInfo(zone))


# zone, failure (local wall clock), days_after -> run time in UTC
RUN_TIMES = {
    # 23:59 NZDT on the 15th is 10:59 UTC the same day;
    # 09:00 NZDT on the 18th is 20:00 UTC on the 17th.
    "auckland-utc+13": (AUCKLAND, (2026, 1, 15, 23, 59), 3, utc(2026, 1, 17, 20, 0)),
    # 23:59 HST on the 15th is 09:59 UTC the 16th; 09:00 HST on the 18th is 19:00 UTC the 18th.
    "honolulu-utc-10": (HONOLULU, (2026, 1, 15, 23, 59), 3, utc(2026, 1, 18, 19, 0)),
    # Month ends: January 30th + 3 days is February 2nd.
    "auckland-jan-30": (AUCKLAND, (2026, 1, 30, 23, 59), 3, utc(2026, 2, 1, 20, 0)),
    "honolulu-jan-30": (HONOLULU, (2026, 1, 30, 23, 59), 3, utc(2026, 2, 2, 19, 0)),
    # 2026 is not a leap year: February 28th + 1 day is March 1st.
    "auckland-feb-28": (AUCKLAND, (2026, 2, 28, 23, 59), 1, utc(2026, 2, 28, 20, 0)),
    "honolulu-feb-28": (HONOLULU, (2026, 2, 28, 23, 59), 1, utc(2026, 3, 1, 19, 0)),
}


@pytest.mark.parametrize("case", RUN_TIMES)
def test_local_run_time_counts_days_on_the_customers_calendar(case):
    zone, failed_local, days_after, expected = RUN_TIMES[case]
    failed_at = local(zone, *failed_local)
    run_at = local_run_time(
        event_at=failed_at, now=failed_at, timezone=zone, days_after=days_after, at=NINE
    )
    assert run_at == expected
    assert run_at.tzinfo is dt.UTC
    in_zone = run_at.astimezone(failed_at.tzinfo)
    assert (in_zone.time(), in_zone.date()) == (
        NINE,
        failed_at.date() + dt.timedelta(days=days_after),
    )


def test_local_run_time_already_past_moves_to_the_next_day():
    """days_after=0 at 09:00 for a failure at 23:59: today's 09:00 is past, so tomorrow's."""
    failed_at = local(HONOLULU, 2026, 1, 15, 23, 59)
    run_at = local_run_time(
        event_at=failed_at, now=failed_at, timezone=HONOLULU, days_after=0, at=NINE
    )
    assert run_at == local(HONOLULU, 2026, 1, 16, 9, 0)


@pytest.mark.parametrize(
    ("event_day", "at", "expected"),
    [
        # 02:30 does not exist on 8 March 2026 in New York: it runs an hour later, 03:30 EDT.
        ((2026, 3, 5), dt.time(2, 30), utc(2026, 3, 8, 7, 30)),
        # 01:30 happens twice on 1 November 2026: it runs at the first, 01:30 EDT.
        ((2026, 10, 29), dt.time(1, 30), utc(2026, 11, 1, 5, 30)),
    ],
)
def test_local_run_time_on_a_dst_change_day(event_day, at, expected):
    failed_at = local("America/New_York", *event_day, 12, 0)
    run_at = local_run_time(
        event_at=failed_at, now=failed_at, timezone="America/New_York", days_after=3, at=at
    )
    assert run_at == expected


def test_jitter_is_fixed_per_key_and_within_bounds():
    failed_at = local(AUCKLAND, 2026, 1, 15, 23, 59)
    jitter = dt.timedelta(minutes=30)

    def run_at(key):
        return local_run_time(
            event_at=failed_at,
            now=failed_at,
            timezone=AUCKLAND,
            days_after=3,
            at=NINE,
            jitter=jitter,
            jitter_key=key,
        )

    base = utc(2026, 1, 17, 20, 0)
    offsets = {key: run_at(key) - base for key in ("customer-%s" % i for i in range(50))}
    assert all(dt.timedelta(0) <= offset < jitter for offset in offsets.values())
    assert all(run_at(key) - base == offset for key, offset in offsets.items())  # stable
    assert len(set(offsets.values())) == 50  # spread, not all at 09:00:00


@pytest.mark.django_db
def test_schedule_per_item_is_a_no_op_the_second_time_and_cancel_by_key_cancels_one():
    now = utc(2026, 1, 16, 10, 0)
    items = [
        Item(
            key="auckland-42",
            event_at=local(AUCKLAND, 2026, 1, 15, 23, 59),
            timezone=AUCKLAND,
            payload={"customer": 42},
        ),
        Item(
            key="honolulu-7",
            event_at=local(HONOLULU, 2026, 1, 15, 23, 59),
            timezone=HONOLULU,
            payload={"customer": 7},
        ),
    ]
    jitter = dt.timedelta(minutes=10)
    options = {"now": now, "days_after": 3, "at": NINE, "jitter": jitter, "key_prefix": "dunning:"}

    jobs = schedule_per_item(RETRY_TASK, items, **options)

    assert [job.unique_key for job in jobs] == ["dunning:auckland-42", "dunning:honolulu-7"]
    assert [job.payload for job in jobs] == [{"customer": 42}, {"customer": 7}]
    for job, base in zip(jobs, [utc(2026, 1, 17, 20, 0), utc(2026, 1, 18, 19, 0)], strict=True):
        assert dt.timedelta(0) <= job.run_at - base < jitter
        assert job.run_at == local_run_time(
            event_at=next(i.event_at for i in items if "dunning:" + i.key == job.unique_key),
            now=now,
            timezone=AUCKLAND if "auckland" in job.unique_key else HONOLULU,
            days_after=3,
            at=NINE,
            jitter=jitter,
            jitter_key=job.unique_key,
        )
    stored = {job.pk: job.run_at for job in Job.objects.all()}
    assert stored == {job.pk: job.run_at for job in jobs}

    again = schedule_per_item(RETRY_TASK, items, **options)
    assert [job.pk for job in again] == [job.pk for job in jobs]
    assert {job.pk: job.run_at for job in Job.objects.all()} == stored  # no new rows, unchanged

    assert cancel_by_key(RETRY_TASK, "dunning:honolulu-7") is CancelOutcome.CANCELLED
    statuses = dict(Job.objects.values_list("unique_key", "status"))
    assert statuses == {
        "dunning:auckland-42": Job.Status.PENDING,
        "dunning:honolulu-7": Job.Status.CANCELLED,
    }
    assert cancel_by_key(RETRY_TASK, "dunning:honolulu-7") is CancelOutcome.ALREADY_CANCELLED
    assert cancel_by_key(RETRY_TASK, "dunning:nobody") is CancelOutcome.NOT_FOUND


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("timezone", "days_after", "message"),
    [
        ("Mars/Olympus", 3, "Unknown time zone 'Mars/Olympus'."),
        ("", 3, "Unknown time zone ''."),
        # The host's own zone (a file beside the IANA ones): what it means depends on the
        # machine that reads it.
        ("localtime", 3, "Unknown time zone 'localtime'."),
        (AUCKLAND, -1, "days_after must not be negative; got -1."),
    ],
)
def test_bad_time_zone_or_negative_days_is_refused_with_a_clear_message(
    timezone, days_after, message
):
    item = Item(key="c-1", event_at=utc(2026, 1, 15, 10, 59), timezone=timezone)
    with pytest.raises(InvalidSchedule) as caught:
        schedule_per_item(
            RETRY_TASK, [item], now=utc(2026, 1, 15, 11), days_after=days_after, at=NINE
        )
    assert caught.value.message == message
    assert caught.value.code == "invalid_schedule"
    assert not Job.objects.exists()


def test_naive_datetimes_are_refused():
    with pytest.raises(InvalidSchedule, match=r"^event_at and now must be timezone-aware\.$"):
        local_run_time(
            event_at=dt.datetime(2026, 1, 15, 23, 59),
            now=utc(2026, 1, 15, 11),
            timezone=AUCKLAND,
            days_after=3,
            at=NINE,
        )
