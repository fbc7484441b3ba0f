"""schedule() and schedule_many(): in the caller's transaction, unique keys, bulk, bad input."""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import override_settings

from scheduler_app.clock import frozen_clock
from scheduler_app.exceptions import (
    InvalidPayload,
    InvalidSchedule,
    UnknownQueue,
    UnknownTask,
    UnsupportedPayloadVersion,
    ValidationError,
)
from scheduler_app.models import Job
from scheduler_app.registry import TaskSpec, get_task
from scheduler_app.scheduling import JobRequest, schedule, schedule_many

NOW = dt.datetime(2026, 5, 4, 9, 30, 15, 250000, tzinfo=dt.UTC)
NOOP = "tests.noop"
VERSIONED = "tests.versioned"
BULK = 10_000


class Boom(Exception):
    pass


@pytest.fixture
def frozen():
    with frozen_clock(NOW) as clock:
        yield clock


def stored(job):
    return Job.objects.get(pk=job.pk)


# --- Transactional scheduling -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_schedule_in_a_transaction_that_rolls_back_leaves_no_job():
    with pytest.raises(Boom), transaction.atomic():
        job = schedule(NOOP, {"n": 1})
        assert Job.objects.filter(pk=job.pk).exists()
        raise Boom

    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_schedule_with_unique_key_in_a_transaction_that_rolls_back_leaves_no_job():
    with pytest.raises(Boom), transaction.atomic():
        schedule(NOOP, {"n": 1}, unique_key="rollback-me")
        raise Boom

    assert not Job.objects.exists()
    # The key is free again.
    assert schedule(NOOP, unique_key="rollback-me").unique_key == "rollback-me"


@pytest.mark.django_db(transaction=True)
def test_schedule_many_in_a_transaction_that_rolls_back_leaves_no_job():
    with pytest.raises(Boom), transaction.atomic():
        schedule_many(NOOP, [{"n": n} for n in range(50)])
        schedule_many(NOOP, [JobRequest(payload={}, unique_key="k%s" % n) for n in range(50)])
        assert Job.objects.count() == 100
        raise Boom

    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_job_rolls_back_with_the_business_change_it_was_scheduled_with():
    user_model = get_user_model()

    with pytest.raises(Boom), transaction.atomic():
        user = user_model.objects.create(username="alice")
        schedule(NOOP, {"welcome": user.pk}, owner=user)
        raise Boom

    assert not user_model.objects.exists()
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_job_scheduled_in_a_rolled_back_savepoint_is_gone_while_the_outer_block_commits():
    with transaction.atomic():
        kept = schedule(NOOP, {"kept": True})
        with pytest.raises(Boom), transaction.atomic():
            schedule(NOOP, {"kept": False})
            raise Boom

    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.django_db(transaction=True)
def test_job_scheduled_in_a_committed_transaction_exists():
    with transaction.atomic():
        job = schedule(NOOP, {"n": 1})

    assert stored(job).payload == {"n": 1}


# --- When: now, at, delay, undo window ----------------------------------------------------


@pytest.mark.django_db
def test_schedule_without_a_time_runs_now(frozen):
    job = schedule(NOOP, {"a": 1})

    row = stored(job)
    assert row.run_at == row.scheduled_for == row.created_at == NOW
    assert row.status == Job.Status.PENDING
    assert row.undo_deadline is None
    assert row.attempts == 0
    assert row.payload == {"a": 1}
    assert row.task_name == NOOP
    assert row.queue == "default"
    assert row.priority == 0
    assert row.max_attempts == 3
    assert row.unique_key is None
    assert row.owner is None


@pytest.mark.django_db
def test_schedule_without_a_payload_stores_an_empty_object(frozen):
    assert stored(schedule(NOOP)).payload == {}


@pytest.mark.django_db
def test_schedule_at_an_aware_utc_datetime(frozen):
    at = NOW + dt.timedelta(days=2, hours=3)

    row = stored(schedule(NOOP, at=at))

    assert row.run_at == row.scheduled_for == at
    assert row.created_at == NOW


@pytest.mark.django_db
def test_schedule_at_another_time_zone_stores_the_same_instant_in_utc(frozen):
    paris = dt.datetime(2026, 7, 1, 14, 0, 0, 500, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))

    job = schedule(NOOP, at=paris)
    row = stored(job)

    expected = dt.datetime(2026, 7, 1, 12, 0, 0, 500, tzinfo=dt.UTC)
    assert job.run_at == expected
    assert job.run_at.utcoffset() == dt.timedelta(0)
    assert row.run_at == row.scheduled_for == expected
    assert row.run_at.utcoffset() == dt.timedelta(0)


@pytest.mark.django_db
def test_schedule_at_a_past_time_is_due_at_once(frozen):
    job = schedule(NOOP, at=NOW - dt.timedelta(hours=1))

    assert Job.objects.due().filter(pk=job.pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (0, dt.timedelta(0)),
        (90, dt.timedelta(seconds=90)),
        (1.5, dt.timedelta(seconds=1.5)),
        (dt.timedelta(minutes=10), dt.timedelta(minutes=10)),
        (dt.timedelta(0), dt.timedelta(0)),
    ],
)
def test_schedule_after_a_delay_runs_at_now_plus_delay(frozen, delay, expected):
    row = stored(schedule(NOOP, delay=delay))

    assert row.run_at == row.scheduled_for == NOW + expected


@pytest.mark.django_db
def test_delayed_job_is_not_due_until_the_clock_reaches_it(frozen):
    job = schedule(NOOP, delay=60)

    assert not Job.objects.due().filter(pk=job.pk).exists()
    frozen.advance(dt.timedelta(seconds=59))
    assert not Job.objects.due().filter(pk=job.pk).exists()
    frozen.advance(dt.timedelta(seconds=1))
    assert Job.objects.due().filter(pk=job.pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("window", [30, dt.timedelta(seconds=30)])
def test_undo_window_runs_after_window_plus_safety_margin(frozen, window):
    row = stored(schedule(NOOP, undo_window=window))

    assert row.undo_deadline == NOW + dt.timedelta(seconds=30)
    assert row.run_at == row.scheduled_for == NOW + dt.timedelta(seconds=32)


@pytest.mark.django_db
@pytest.mark.parametrize(("margin", "run_after"), [(5, 35), (0.5, 30.5), (0, 30)])
def test_undo_safety_margin_comes_from_settings(frozen, margin, run_after):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "UNDO_SAFETY_MARGIN": margin}):
        row = stored(schedule(NOOP, undo_window=30))

    assert row.undo_deadline == NOW + dt.timedelta(seconds=30)
    assert row.run_at == NOW + dt.timedelta(seconds=run_after)


@pytest.mark.django_db
def test_schedule_options_override_task_defaults(frozen):
    user = get_user_model().objects.create(username="owner")

    row = stored(schedule(NOOP, {"x": 1}, queue="emails", priority=-7, max_attempts=9, owner=user))

    assert (row.queue, row.priority, row.max_attempts, row.owner) == ("emails", -7, 9, user)


@pytest.mark.django_db
def test_schedule_accepts_the_task_spec_itself(frozen):
    row = stored(schedule(get_task(NOOP), {"via": "spec"}))

    assert (row.task_name, row.payload) == (NOOP, {"via": "spec"})


@pytest.mark.django_db
def test_task_spec_schedule_shortcut(frozen):
    row = stored(get_task(NOOP).schedule({"via": "shortcut"}, delay=5))

    assert (row.task_name, row.payload, row.run_at) == (
        NOOP,
        {"via": "shortcut"},
        NOW + dt.timedelta(seconds=5),
    )


@pytest.mark.django_db
def test_returned_payload_is_what_reads_back_from_the_database(frozen):
    job = schedule(NOOP, {"items": (1, 2), 3: "int key"})

    assert job.payload == {"items": [1, 2], "3": "int key"}
    assert stored(job).payload == job.payload


# --- Unique keys --------------------------------------------------------------------------


@pytest.mark.django_db
def test_same_unique_key_while_pending_returns_the_existing_job(frozen):
    first = schedule(NOOP, {"v": 1}, unique_key="welcome:42")

    again = schedule(NOOP, {"v": 2}, unique_key="welcome:42", delay=3600)

    assert again.pk == first.pk
    assert Job.objects.count() == 1
    row = stored(first)
    # The existing job's payload and time are left as they were.
    assert (row.payload, row.run_at) == ({"v": 1}, NOW)
    assert (again.payload, again.run_at) == ({"v": 1}, NOW)


@pytest.mark.django_db
def test_same_unique_key_while_running_returns_the_existing_job(frozen):
    first = schedule(NOOP, unique_key="k")
    Job.objects.filter(pk=first.pk).update(status=Job.Status.RUNNING)

    again = schedule(NOOP, unique_key="k")

    assert again.pk == first.pk
    assert again.status == Job.Status.RUNNING
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "finished", [Job.Status.SUCCEEDED, Job.Status.CANCELLED, Job.Status.FAILED]
)
def test_same_unique_key_after_the_job_finished_creates_a_new_job(frozen, finished):
    first = schedule(NOOP, {"v": 1}, unique_key="k")
    Job.objects.filter(pk=first.pk).update(status=finished)

    second = schedule(NOOP, {"v": 2}, unique_key="k")

    assert second.pk != first.pk
    assert stored(second).payload == {"v": 2}
    assert stored(second).status == Job.Status.PENDING
    assert stored(first).status == finished
    assert Job.objects.filter(unique_key="k").count() == 2
    # ...and while the new one is pending, the key is taken again.
    assert schedule(NOOP, unique_key="k").pk == second.pk


@pytest.mark.django_db
def test_unique_key_records_undo_deadline_on_a_new_job(frozen):
    row = stored(schedule(NOOP, unique_key="undo", undo_window=10))

    assert row.undo_deadline == NOW + dt.timedelta(seconds=10)
    assert row.run_at == NOW + dt.timedelta(seconds=12)


@pytest.mark.django_db
def test_schedule_many_with_unique_keys_returns_existing_jobs_and_creates_the_rest(frozen):
    existing = {key: schedule(NOOP, {"old": key}, unique_key=key) for key in ("k1", "k3")}
    finished = schedule(NOOP, {"old": "k4"}, unique_key="k4")
    Job.objects.filter(pk=finished.pk).update(status=Job.Status.SUCCEEDED)

    jobs = schedule_many(
        NOOP, [JobRequest(payload={"new": "k%s" % n}, unique_key="k%s" % n) for n in range(5)]
    )

    assert [job.unique_key for job in jobs] == ["k0", "k1", "k2", "k3", "k4"]
    assert jobs[1].pk == existing["k1"].pk
    assert jobs[3].pk == existing["k3"].pk
    assert jobs[4].pk != finished.pk
    assert [job.payload for job in jobs] == [
        {"new": "k0"},
        {"old": "k1"},
        {"new": "k2"},
        {"old": "k3"},
        {"new": "k4"},
    ]
    assert Job.objects.count() == 6
    assert Job.objects.unfinished().count() == 5
    assert {job.pk for job in jobs} == set(Job.objects.unfinished().values_list("pk", flat=True))


@pytest.mark.django_db
def test_schedule_many_mixing_keyed_and_plain_items_returns_jobs_in_item_order(frozen):
    old = schedule(NOOP, {"n": "old"}, unique_key="b")

    jobs = schedule_many(
        NOOP,
        [
            {"n": 0},
            JobRequest(payload={"n": 1}, unique_key="a"),
            JobRequest(payload={"n": 2}, unique_key="b"),
            {"n": 3},
        ],
    )

    assert [job.payload for job in jobs] == [{"n": 0}, {"n": 1}, {"n": "old"}, {"n": 3}]
    assert jobs[2].pk == old.pk
    assert all(job.pk is not None for job in jobs)
    assert [stored(job).payload for job in jobs] == [job.payload for job in jobs]
    assert Job.objects.count() == 4


# --- schedule_many options ----------------------------------------------------------------


@pytest.mark.django_db
def test_schedule_many_applies_shared_options_and_per_item_overrides(frozen):
    owner = get_user_model().objects.create(username="o")
    other = get_user_model().objects.create(username="p")

    jobs = schedule_many(
        NOOP,
        [
            {"n": 0},
            JobRequest(payload={"n": 1}, delay=dt.timedelta(minutes=1), priority=3, owner=other),
            JobRequest(payload={"n": 2}, at=NOW + dt.timedelta(days=1)),
        ],
        delay=30,
        queue="slow",
        priority=-1,
        owner=owner,
        max_attempts=5,
    )

    rows = [stored(job) for job in jobs]
    assert [row.run_at for row in rows] == [
        NOW + dt.timedelta(seconds=30),
        NOW + dt.timedelta(minutes=1),
        NOW + dt.timedelta(days=1),
    ]
    assert [row.priority for row in rows] == [-1, 3, -1]
    assert [row.owner for row in rows] == [owner, other, owner]
    assert {row.queue for row in rows} == {"slow"}
    assert {row.max_attempts for row in rows} == {5}
    assert {row.created_at for row in rows} == {NOW}


@pytest.mark.django_db
def test_schedule_many_of_nothing_writes_nothing(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert schedule_many(NOOP, []) == []
        assert schedule_many(NOOP, iter(())) == []


@pytest.mark.django_db
def test_schedule_many_accepts_a_generator(frozen):
    jobs = schedule_many(NOOP, ({"n": n} for n in range(3)))

    assert [stored(job).payload for job in jobs] == [{"n": 0}, {"n": 1}, {"n": 2}]


# --- Bad input ----------------------------------------------------------------------------


def assert_raises_exactly(exc_class, message, func, *args, **kwargs):
    with pytest.raises(exc_class) as excinfo:
        func(*args, **kwargs)
    assert type(excinfo.value) is exc_class
    assert str(excinfo.value) == message
    assert excinfo.value.message == message
    return excinfo.value


@pytest.mark.django_db
def test_naive_datetime_is_refused():
    exc = assert_raises_exactly(
        InvalidSchedule,
        "at must be timezone-aware; got the naive datetime 2026-01-01T12:00:00.",
        schedule,
        NOOP,
        at=dt.datetime(2026, 1, 1, 12, 0),
    )
    assert exc.code == "invalid_schedule"
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_at_that_is_not_a_datetime_is_refused():
    assert_raises_exactly(
        InvalidSchedule,
        "at must be a datetime, not date.",
        schedule,
        NOOP,
        at=dt.date(2026, 1, 1),
    )
    assert_raises_exactly(
        InvalidSchedule,
        "at must be a datetime, not str.",
        schedule,
        NOOP,
        at="2026-01-01T00:00:00Z",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("delay", "shown"), [(-1, "-1"), (-0.5, "-0.5"), (dt.timedelta(seconds=-1), "-1 day, 23:59:59")]
)
def test_negative_delay_is_refused(delay, shown):
    assert_raises_exactly(
        InvalidSchedule, "delay must not be negative; got %s." % shown, schedule, NOOP, delay=delay
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("delay", "type_name"), [("5", "str"), (True, "bool"), ([5], "list")])
def test_delay_that_is_not_a_number_or_timedelta_is_refused(delay, type_name):
    assert_raises_exactly(
        InvalidSchedule,
        "delay must be a timedelta or a number of seconds, not %s." % type_name,
        schedule,
        NOOP,
        delay=delay,
    )


@pytest.mark.django_db
def test_negative_undo_window_is_refused():
    assert_raises_exactly(
        InvalidSchedule,
        "undo_window must not be negative; got -5.",
        schedule,
        NOOP,
        undo_window=-5,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "options",
    [
        {"at": NOW, "delay": 5},
        {"at": NOW, "undo_window": 5},
        {"delay": 5, "undo_window": 5},
        {"at": NOW, "delay": 0, "undo_window": 0},
    ],
)
def test_more_than_one_of_at_delay_undo_window_is_refused(options):
    assert_raises_exactly(
        InvalidSchedule,
        "Give at most one of at, delay and undo_window.",
        schedule,
        NOOP,
        **options,
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_schedule_many_item_with_both_at_and_delay_is_refused():
    assert_raises_exactly(
        InvalidSchedule,
        "Item 0: Give at most one of at, delay and undo_window.",
        schedule_many,
        NOOP,
        [JobRequest(at=NOW, delay=1)],
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"when": NOW}, "Object of type datetime is not JSON serializable"),
        ({"tags": {"a", "b"}}, "Object of type set is not JSON serializable"),
        (b"bytes", "Object of type bytes is not JSON serializable"),
    ],
    ids=["datetime", "set", "bytes"],
)
def test_non_json_payload_is_refused(payload, reason):
    exc = assert_raises_exactly(
        InvalidPayload,
        "The payload is not JSON-serialisable: %s." % reason,
        schedule,
        NOOP,
        payload,
    )
    assert exc.code == "invalid_payload"
    assert isinstance(exc.__cause__, TypeError)
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_payload_with_nan_or_infinity_is_refused(number):
    assert_raises_exactly(
        InvalidPayload,
        "The payload contains NaN or Infinity, which JSON cannot represent.",
        schedule,
        NOOP,
        {"ratio": number},
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_unknown_queue_is_refused():
    exc = assert_raises_exactly(
        UnknownQueue,
        "Unknown queue 'nope'; SCHEDULER_APP['QUEUES'] lists: default, emails, slow.",
        schedule,
        NOOP,
        queue="nope",
    )
    assert exc.code == "unknown_queue"


@pytest.mark.django_db
def test_task_whose_default_queue_was_removed_from_settings_is_refused():
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "QUEUES": ["emails"]}):
        assert_raises_exactly(
            UnknownQueue,
            "Unknown queue 'default'; SCHEDULER_APP['QUEUES'] lists: emails.",
            schedule,
            NOOP,
        )


@pytest.mark.django_db
def test_unknown_task_name_is_refused():
    exc = assert_raises_exactly(
        UnknownTask, "No task is registered as 'tests.missing'.", schedule, "tests.missing"
    )
    assert exc.code == "unknown_task"
    assert_raises_exactly(
        UnknownTask,
        "No task is registered as 'tests.missing'.",
        schedule_many,
        "tests.missing",
        [{}],
    )


@pytest.mark.django_db
def test_unregistered_task_spec_is_refused():
    spec = TaskSpec(name="tests.never_registered", func=lambda ctx: None)

    assert_raises_exactly(
        UnknownTask, "No task is registered as 'tests.never_registered'.", schedule, spec
    )


@pytest.mark.django_db
def test_task_that_is_neither_a_spec_nor_a_name_is_refused():
    assert_raises_exactly(
        ValidationError, "task must be a registered task or its name, not 123.", schedule, 123
    )


@pytest.mark.django_db
@pytest.mark.parametrize("version", [3, 0])
def test_unsupported_payload_version_is_refused(version):
    exc = assert_raises_exactly(
        UnsupportedPayloadVersion,
        "Task 'tests.versioned' does not accept payload version %s (accepted: 1, 2)." % version,
        schedule,
        VERSIONED,
        payload_version=version,
    )
    assert exc.code == "unsupported_payload_version"
    assert_raises_exactly(
        UnsupportedPayloadVersion,
        "Task 'tests.noop' does not accept payload version 2 (accepted: 1).",
        schedule,
        NOOP,
        payload_version=2,
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [32768, -32769, 10**9, "1", 1.0, True])
def test_priority_out_of_range_or_not_an_integer_is_refused(priority):
    assert_raises_exactly(
        ValidationError,
        "priority must be an integer from -32768 to 32767; got %r." % (priority,),
        schedule,
        NOOP,
        priority=priority,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [-32768, 32767])
def test_priority_at_the_limits_is_accepted(priority):
    assert stored(schedule(NOOP, priority=priority)).priority == priority


@pytest.mark.django_db
def test_max_attempts_past_the_column_is_refused_before_the_insert():
    """2**31 was a DataError from the INSERT, which a caller's ``except ValidationError``
    does not catch."""
    assert_raises_exactly(
        ValidationError,
        "max_attempts must be at most 2147483647; got 2147483648.",
        schedule,
        NOOP,
        max_attempts=2**31,
    )
    assert stored(schedule(NOOP, max_attempts=2**31 - 1)).max_attempts == 2**31 - 1


@pytest.mark.django_db
@pytest.mark.parametrize("max_attempts", [0, -1, True, "3"])
def test_max_attempts_not_a_positive_integer_is_refused(max_attempts):
    assert_raises_exactly(
        ValidationError,
        "max_attempts must be a positive integer; got %r." % (max_attempts,),
        schedule,
        NOOP,
        max_attempts=max_attempts,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "k" * 256, 42], ids=["empty", "too-long", "not-a-string"])
def test_bad_unique_key_is_refused(key):
    assert_raises_exactly(
        ValidationError,
        "unique_key must be a non-empty string of at most 255 characters.",
        schedule,
        NOOP,
        unique_key=key,
    )
    assert_raises_exactly(
        ValidationError,
        "Item 1: unique_key must be a non-empty string of at most 255 characters.",
        schedule_many,
        NOOP,
        [JobRequest(unique_key="fine"), JobRequest(unique_key=key)],
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_unique_key_of_255_characters_is_accepted():
    assert stored(schedule(NOOP, unique_key="k" * 255)).unique_key == "k" * 255


@pytest.mark.django_db
def test_schedule_many_with_the_same_unique_key_twice_is_refused():
    assert_raises_exactly(
        ValidationError,
        "schedule_many() was given the same unique_key more than once: 'a'.",
        schedule_many,
        NOOP,
        [JobRequest(unique_key="a"), JobRequest(unique_key="b"), JobRequest(unique_key="a")],
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bad_item", "exc_class"),
    [
        ({"when": NOW}, InvalidPayload),
        (JobRequest(at=dt.datetime(2026, 1, 1)), InvalidSchedule),
        (JobRequest(delay=-1), InvalidSchedule),
        (JobRequest(priority=99999), ValidationError),
        (JobRequest(unique_key=""), ValidationError),
    ],
    ids=["payload", "naive-at", "negative-delay", "priority", "empty-key"],
)
def test_schedule_many_with_one_bad_item_writes_nothing(
    bad_item, exc_class, django_assert_num_queries
):
    items = [{"n": n} for n in range(500)] + [JobRequest(unique_key="ok")]
    items.insert(250, bad_item)

    with django_assert_num_queries(0), pytest.raises(exc_class) as excinfo:
        schedule_many(NOOP, items)

    assert type(excinfo.value) is exc_class
    assert not Job.objects.exists()


# --- Bulk ---------------------------------------------------------------------------------


def rows_per_insert():
    """Return how many jobs one INSERT carries: 1000, or less where the backend caps it.

    PostgreSQL takes the requested 1000; SQLite's 999-variable limit allows
    ``999 // number of columns`` rows per statement.
    """
    fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
    return min(1000, connection.ops.bulk_batch_size(fields, [None] * 1000))


def insert_statements(count):
    return math.ceil(count / rows_per_insert())


def key_lookup_statements(count):
    """Return the SELECTs that find stored jobs by unique key, 500 keys each.

    PostgreSQL inserts with ON CONFLICT DO NOTHING, then looks the keys up
    once; SQLite looks them up before the INSERT too.
    """
    passes = 1 if connection.vendor == "postgresql" else 2
    return passes * math.ceil(count / 500)


def max_queries(count, *, keyed):
    return insert_statements(count) + (key_lookup_statements(count) if keyed else 0) + 5


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_bulk_query_bounds_on_postgresql_are_15_and_40():
    assert insert_statements(BULK) == 10
    assert max_queries(BULK, keyed=False) == 15
    assert max_queries(BULK, keyed=True) <= 40


@pytest.mark.django_db
def test_schedule_many_ten_thousand_jobs_issues_a_bounded_number_of_queries(
    frozen, django_assert_max_num_queries
):
    # PostgreSQL: 10 INSERTs + 1 NOTIFY, within 15.
    with django_assert_max_num_queries(max_queries(BULK, keyed=False)):
        jobs = schedule_many(NOOP, [{"n": n} for n in range(BULK)], delay=60)

    assert len(jobs) == BULK
    ids = [job.pk for job in jobs]
    assert all(pk is not None for pk in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == BULK
    assert list(Job.objects.order_by("pk").values_list("pk", "payload")) == [
        (pk, {"n": n}) for n, pk in enumerate(ids)
    ]
    assert Job.objects.filter(run_at=NOW + dt.timedelta(seconds=60)).count() == BULK


@pytest.mark.django_db
def test_schedule_many_ten_thousand_unique_keys_issues_a_bounded_number_of_queries(
    frozen, django_assert_max_num_queries
):
    existing = schedule_many(
        NOOP,
        [JobRequest(payload={"old": n}, unique_key="key-%05d" % n) for n in range(0, BULK, 100)],
    )

    # PostgreSQL: 10 INSERTs + 20 look-ups + 1 NOTIFY, within 35.
    with django_assert_max_num_queries(max_queries(BULK, keyed=True)):
        jobs = schedule_many(
            NOOP, [JobRequest(payload={"n": n}, unique_key="key-%05d" % n) for n in range(BULK)]
        )

    assert len(jobs) == BULK
    assert Job.objects.count() == BULK
    assert [job.unique_key for job in jobs] == ["key-%05d" % n for n in range(BULK)]
    by_key = {job.unique_key: job.pk for job in existing}
    assert [job.pk for job in jobs if job.unique_key in by_key] == [job.pk for job in existing]
    new_ids = [job.pk for job in jobs if job.unique_key not in by_key]
    assert len(new_ids) == BULK - len(existing)
    assert new_ids == sorted(new_ids)
    assert min(new_ids) > max(by_key.values())
    assert dict(Job.objects.values_list("unique_key", "pk")) == {
        job.unique_key: job.pk for job in jobs
    }
    assert [job.payload for job in jobs[:3]] == [{"old": 0}, {"n": 1}, {"n": 2}]


# --- Payload versions ---------------------------------------------------------------------


@pytest.mark.django_db
def test_payload_version_defaults_to_the_highest_accepted():
    assert stored(schedule(VERSIONED)).payload_version == 2
    assert stored(schedule(NOOP)).payload_version == 1


@pytest.mark.django_db
@pytest.mark.parametrize("version", [1, 2])
def test_any_accepted_payload_version_can_be_chosen(version):
    assert stored(schedule(VERSIONED, payload_version=version)).payload_version == version


@pytest.mark.django_db
def test_schedule_many_uses_the_payload_version_for_every_job():
    default = schedule_many(VERSIONED, [{}, {}])
    older = schedule_many(VERSIONED, [{}, {}], payload_version=1)

    assert [stored(job).payload_version for job in default + older] == [2, 2, 1, 1]


@pytest.mark.django_db
def test_schedule_many_with_an_unsupported_payload_version_writes_nothing():
    assert_raises_exactly(
        UnsupportedPayloadVersion,
        "Item 0: Task 'tests.versioned' does not accept payload version 7 (accepted: 1, 2).",
        schedule_many,
        VERSIONED,
        [{}, {}],
        payload_version=7,
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_payload_version_that_is_not_an_integer_is_refused(version):
    assert_raises_exactly(
        ValidationError,
        "payload_version must be an integer; got %r." % (version,),
        schedule,
        VERSIONED,
        payload_version=version,
    )
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_unique_keys_are_scoped_to_their_task():
    first = schedule(NOOP, unique_key="invoice-1")
    second = schedule(VERSIONED, unique_key="invoice-1")

    assert first.pk != second.pk
    assert schedule(VERSIONED, unique_key="invoice-1").pk == second.pk
