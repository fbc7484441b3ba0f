"""Bad input to schedule() gets scheduler_app's documented error, never a raw database or
OverflowError: NUL characters, non-finite and far-future times."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.checks.schedules import check_declared_schedules
from scheduler_app.clock import frozen_clock
from scheduler_app.exceptions import InvalidPayload, InvalidSchedule, ValidationError
from scheduler_app.models import Job, Schedule
from scheduler_app.schedules.per_item import local_run_time
from scheduler_app.scheduling import LATEST_RUN_AT, JobRequest, schedule, schedule_many

NOOP = "tests.noop"
NOW = dt.datetime(2026, 5, 4, 9, 30, tzinfo=dt.UTC)
NUL_PAYLOAD = "The payload contains a NUL character (\\x00), which the database cannot store."


def assert_refused(exc_class, message, func, *args, **kwargs):
    with pytest.raises(exc_class) as excinfo:
        func(*args, **kwargs)
    assert type(excinfo.value) is exc_class
    assert excinfo.value.message == message
    assert not Job.objects.exists()
    return excinfo.value


@pytest.mark.django_db
@pytest.mark.parametrize(
    "payload",
    [{"text": "a\x00b"}, {"a\x00": 1}, ["ok", {"deep": ["\x00"]}], "\x00"],
    ids=["value", "key", "nested", "string"],
)
def test_nul_in_a_payload_is_invalid_payload(payload):
    exc = assert_refused(InvalidPayload, NUL_PAYLOAD, schedule, NOOP, payload)
    assert exc.code == "invalid_payload"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "payload",
    [{"text": "bad \udc80 text"}, {"\ud800": 1}, ["ok", {"deep": ["\udfff"]}]],
    ids=["value", "key", "nested"],
)
def test_a_surrogate_in_a_payload_is_invalid_payload(payload):
    """PostgreSQL's json refuses lone surrogates: a clear error before the INSERT, so the
    caller's transaction is still usable, rather than a DataError from the database."""
    exc = assert_refused(
        InvalidPayload,
        "The payload contains text that is not valid Unicode (a surrogate code point), "
        "which the database cannot store.",
        schedule,
        NOOP,
        payload,
    )
    assert exc.code == "invalid_payload"


@pytest.mark.django_db
def test_backslash_u0000_text_is_not_a_nul():
    job = schedule(NOOP, {"text": "\\u0000"})
    assert Job.objects.get(pk=job.pk).payload == {"text": "\\u0000"}


@pytest.mark.django_db
def test_nul_in_a_unique_key_is_a_validation_error():
    assert_refused(
        ValidationError,
        "unique_key must not contain a NUL character (\\x00).",
        schedule,
        NOOP,
        unique_key="order:\x00",
    )


@pytest.mark.django_db
def test_a_surrogate_in_a_unique_key_is_a_validation_error():
    assert_refused(
        ValidationError,
        "unique_key must be valid Unicode text (no surrogate code points).",
        schedule,
        NOOP,
        unique_key="order:\udc80",
    )


@pytest.mark.django_db
def test_schedule_many_with_a_nul_in_one_item_writes_nothing(django_assert_num_queries):
    items = [{"n": 1}, JobRequest(payload={"n": 2}, unique_key="a\x00")]
    with django_assert_num_queries(0), pytest.raises(ValidationError) as excinfo:
        schedule_many(NOOP, items)

    assert excinfo.value.message == "Item 1: unique_key must not contain a NUL character (\\x00)."
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("option", ["delay", "undo_window"])
@pytest.mark.parametrize(
    ("value", "shown"), [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")]
)
def test_non_finite_durations_are_invalid_schedule(option, value, shown):
    exc = assert_refused(
        InvalidSchedule,
        "%s must be a finite number of seconds; got %s." % (option, shown),
        schedule,
        NOOP,
        **{option: value},
    )
    assert isinstance(exc, ValueError)


@pytest.mark.django_db
@pytest.mark.parametrize("option", ["delay", "undo_window"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (1e12, "1000000000000.0"),
        (10**20, "100000000000000000000"),
        (dt.timedelta.max, "999999999 days, 23:59:59.999999"),
        (dt.timedelta(days=365 * 7000), "2555000 days, 0:00:00"),
    ],
)
def test_durations_past_the_latest_run_time_are_invalid_schedule(option, value, shown):
    with frozen_clock(NOW):
        assert_refused(
            InvalidSchedule,
            "%s puts the run time after 9000-01-01T00:00:00+00:00, the latest allowed; got %s."
            % (option, shown),
            schedule,
            NOOP,
            **{option: value},
        )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("at", "shown"),
    [
        (LATEST_RUN_AT, "9000-01-01T00:00:00+00:00"),
        (dt.datetime.max.replace(tzinfo=dt.UTC), "9999-12-31T23:59:59.999999+00:00"),
        (
            dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            "9999-12-31T23:59:59.999999-05:00",
        ),
        (
            dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=5))),
            "0001-01-01T00:00:00+05:00",
        ),
    ],
    ids=["latest", "max-utc", "max-minus-5", "min-plus-5"],
)
def test_at_outside_the_allowed_range_is_invalid_schedule(at, shown):
    assert_refused(
        InvalidSchedule,
        "at must fall in the years 1 to 8999 (UTC); got %s." % shown,
        schedule,
        NOOP,
        at=at,
    )


@pytest.mark.django_db
def test_latest_allowed_run_time_is_accepted():
    job = schedule(NOOP, at=LATEST_RUN_AT - dt.timedelta(microseconds=1))
    assert Job.objects.get(pk=job.pk).run_at == LATEST_RUN_AT - dt.timedelta(microseconds=1)


def test_per_item_run_time_too_far_away_is_invalid_schedule():
    with pytest.raises(InvalidSchedule) as excinfo:
        local_run_time(
            event_at=NOW, now=NOW, timezone="Europe/Paris", days_after=10**9, at=dt.time(9)
        )
    assert excinfo.value.message == (
        "days_after puts the run time after 9000-01-01T00:00:00+00:00, the latest allowed; "
        "got 1000000000."
    )


@pytest.mark.django_db
def test_declared_schedule_with_a_nul_in_its_payload_fails_the_system_check():
    declared = {"nul": {"task": NOOP, "cron": "* * * * *", "payload": {"to": "a\x00"}}}
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "SCHEDULES": declared}):
        errors = check_declared_schedules()
    assert [(e.id, e.msg) for e in errors] == [
        ("scheduler_app.E020", "SCHEDULER_APP['SCHEDULES']['nul']: " + NUL_PAYLOAD)
    ]
    assert not Schedule.objects.exists()
