"""Partitioned job history (scheduler_app.partitions): the job table converted while it
holds rows, finished jobs moved by the worker's finish into the partition of their
interval, read by the ORM like any job, and dropped whole by retention."""

from __future__ import annotations

import datetime as dt
import importlib
import json

import psycopg
import pytest
from django.core import serializers
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from scheduler_app import attempt_partitions, clock, partitions, recipient_partitions, schedule
from scheduler_app.cancellation import cancel
from scheduler_app.models import Job, JobAttempt, PruneRun, Schedule, ScheduleOccurrence
from scheduler_app.retention import MOVED_JOBS, PARTITIONED_JOBS, prune
from tests.helpers import (
    migrate_database,
    reads_of,
    running_worker,
    scratch_database,
    wait_for_status,
)

Status = Job.Status
#: Read once, when the module is imported, which may be before the test database's
#: migrations made the partitions of the day they ran: see the ``partitioned`` fixture.
NOW = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)


@pytest.fixture
def recipients_as_found(transactional_db):
    """The recipient table afterwards as it was found: scheduler_partition converts it
    with the job table."""
    was_partitioned = recipient_partitions.is_partitioned()
    yield
    if not was_partitioned:
        recipient_partitions.revert()


@pytest.fixture
def partitioned(recipients_as_found):
    """A partitioned job table, as migrate leaves a new install (migration 0033), or as
    the conversion makes it (SCHEDULER_TEST_PLAIN_JOB_TABLE=1), with the partitions of
    NOW's interval and those ahead of it (a run that crosses midnight made the current
    ones after NOW); afterwards as found: the history partitions a test made are dropped."""
    if partitions.is_partitioned():
        found = {partition.name for partition in partitions.history_partitions()}
        partitions.ensure_partitions(now=NOW)
        yield
        for partition in partitions.history_partitions():
            if partition.name not in found:
                partitions.drop(partition)
        return
    partitions.convert()
    partitions.ensure_partitions(now=NOW)
    try:
        yield
    finally:
        partitions.revert()


@pytest.fixture
def plain(recipients_as_found):
    """The job table as one table, as an install that holds rows has it before the
    conversion; afterwards as migrate left it, partitioned or not."""
    was_partitioned = partitions.is_partitioned()
    partitions.revert()
    try:
        yield
    finally:
        if was_partitioned:
            partitions.convert()
        else:
            partitions.revert()


MIGRATION = importlib.import_module("scheduler_app.migrations.0033_partition_new_installs")


def migrate_a_new_install() -> None:
    """Run what migration 0033 runs, on the test database."""
    with connection.schema_editor(atomic=False) as editor:
        MIGRATION.partition_new_install(None, editor)


def where(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM scheduler_app_job WHERE id = %s", [job_id]
        )
        return cursor.fetchone()[0]


def finished(finished_at: dt.datetime, *, in_history: bool = True, **fields) -> Job:
    return Job.objects.create(
        task_name="tests.noop",
        status=Status.SUCCEEDED,
        scheduled_for=finished_at,
        run_at=finished_at,
        started_at=finished_at,
        finished_at=finished_at,
        attempts=1,
        in_history=in_history,
        **fields,
    )


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_migrate_partitions_the_job_table_of_a_new_install():
    # The test database is a new install: migrate ran 0033 on an empty table. .ci/run's
    # plain-table step sets PARTITIONED_HISTORY to False (SCHEDULER_TEST_PLAIN_JOB_TABLE=1).
    assert partitions.is_partitioned() is partitions.app_settings.PARTITIONED_HISTORY


@pytest.mark.postgres_only
def test_migrate_leaves_a_job_table_with_rows_or_partitioned_history_off_as_one_table(plain):
    job = schedule("tests.noop")
    migrate_a_new_install()
    assert not partitions.is_partitioned()  # an existing install: scheduler_partition's work

    job.delete()
    with override_settings(SCHEDULER_APP={"PARTITIONED_HISTORY": False}):
        migrate_a_new_install()
    assert not partitions.is_partitioned()

    with override_settings(SCHEDULER_APP={"PARTITIONED_HISTORY": True}):
        migrate_a_new_install()
    assert partitions.is_partitioned()
    assert where(schedule("tests.noop").pk) == partitions.HOT


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_migrating_back_past_0032_puts_the_job_table_back_as_one_table_with_its_history(
    monkeypatch,
):
    monkeypatch.delenv("SCHEDULER_TEST_PLAIN_JOB_TABLE", raising=False)  # a new install

    def state(url: str) -> tuple[bool, list[int], bool]:
        """(partitioned, the jobs' ids, whether attempts have their foreign key)."""
        with psycopg.connect(url) as db:
            return (
                db.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table "
                    "WHERE partrelid = 'scheduler_app_job'::regclass)"
                ).fetchone()[0],
                [row[0] for row in db.execute("SELECT id FROM scheduler_app_job")],
                db.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE contype = 'f' "
                    "AND conrelid = 'scheduler_app_jobattempt'::regclass)"
                ).fetchone()[0],
            )

    with scratch_database("partitions") as url:
        migrate_database(url, "scheduler_app")
        with psycopg.connect(url) as db:  # a job the worker's finish put in history
            (job_id,) = db.execute(
                "INSERT INTO scheduler_app_job (task_name, queue, priority, payload, "
                "payload_version, status, scheduled_for, run_at, attempts, max_attempts, "
                "worker_id, lease_token, last_error, created_at, finished_at, in_history) "
                "VALUES ('tests.noop', 'default', 0, '{}', 1, 'succeeded', now(), now(), 1, "
                "1, '', 1, '', now(), now(), true) RETURNING id"
            ).fetchone()
        assert state(url) == (True, [job_id], False)

        migrate_database(url, "scheduler_app", "0031")
        assert state(url) == (False, [job_id], True)

        migrate_database(url, "scheduler_app")  # it holds a job: scheduler_partition's work
        assert state(url) == (False, [job_id], False)


@pytest.mark.postgres_only
def test_converting_keeps_every_job_where_it_was_and_ids_go_on(plain):
    pending = schedule("tests.noop", unique_key="k", delay=3600)
    done = finished(NOW - DAY, in_history=False)
    with running_worker():  # its finish, before the conversion, keeps the row hot
        ran = wait_for_status(schedule("tests.noop"), Status.SUCCEEDED)
    assert not ran.in_history
    made = partitions.convert()

    assert partitions.is_partitioned()
    assert len(made) == partitions.app_settings.HISTORY_PARTITIONS_AHEAD + 1
    assert {where(pending.pk), where(done.pk), where(ran.pk)} == {partitions.HOT}
    assert Job.objects.get(pk=done.pk).status == Status.SUCCEEDED
    later = schedule("tests.noop")
    assert later.pk > done.pk
    # The unique key of unfinished jobs holds in the hot partition.
    assert schedule("tests.noop", unique_key="k", delay=3600).pk == pending.pk
    assert partitions.convert() == []  # again: nothing to do


def test_a_history_partition_goes_without_the_indexes_of_pending_and_running_jobs():
    """UNFINISHED_INDEXES names the job table's indexes whose condition admits only
    pending or running jobs: the history partitions, which hold ended jobs, skip them."""
    conditions = {
        item.name: item.condition for item in (*Job._meta.indexes, *Job._meta.constraints)
    }

    def statuses(condition) -> set[str]:
        found = set()
        for child in condition.children:
            if isinstance(child, tuple) and child[0] == "status":
                found.add(child[1])
            elif isinstance(child, tuple) and child[0] == "status__in":
                found.update(child[1])
            elif not isinstance(child, tuple):
                found |= statuses(child)
        return found

    unfinished = set(Job.UNFINISHED)
    only_unfinished = {
        name
        for name, condition in conditions.items()
        if condition is not None and statuses(condition) and statuses(condition) <= unfinished
    }
    assert only_unfinished == partitions.UNFINISHED_INDEXES


@pytest.mark.postgres_only
def test_the_planner_passes_over_history_partitions_for_pending_and_running_jobs(partitioned):
    """A history partition has the indexes of ended jobs and a CHECK that it holds only
    those: a query of pending or running jobs (without JobQuerySet.hot()) reads none of
    its rows nor indexes, one of ended jobs reads it by its indexes."""
    start = partitions.start_of(NOW - 3 * DAY)
    (partition,) = partitions._make_partitions([start])
    done = finished(start)
    assert where(done.pk) == partition.name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE tablename = %s), count(*) FILTER (WHERE tablename "
            "= %s) FROM pg_indexes WHERE tablename IN (%s, %s)",
            [partition.name, partitions.HOT] * 2,
        )
        in_partition, in_hot = cursor.fetchone()
    assert in_partition == in_hot - len(partitions.UNFINISHED_INDEXES)

    for unfinished in (
        Job.objects.filter(status=Status.PENDING).order_by("priority", "run_at", "id"),
        Job.objects.filter(status=Status.RUNNING, lease_expires_at__lt=NOW),
        Job.objects.filter(status__in=[Status.PENDING, Status.RUNNING], unique_key="k"),
    ):
        assert partition.name not in unfinished.explain()
    ended = Job.objects.filter(status=Status.SUCCEEDED, finished_at__gte=start)
    assert partition.name in ended.explain()
    assert list(ended) == [done]


def id_sequence() -> str | None:
    """Return the sequence Django's sequence reset finds for the job table's ids."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [partitions.JOB])
        return cursor.fetchone()[0]


@pytest.mark.postgres_only
def test_jobs_loaded_from_a_fixture_are_followed_by_new_ids(partitioned, tmp_path):
    """loaddata resets the sequence of the ids it loads (Django reads it from the job
    table's id column): a job made after the load gets an id past them."""
    jobs = [finished(NOW), schedule("tests.noop", delay=3600)]
    assert {where(job.pk) for job in jobs} == {
        partitions.HOT,
        partitions._partition(partitions.start_of(NOW)).name,
    }
    data = json.loads(serializers.serialize("json", jobs))
    for shift, row in enumerate(data, start=1000):
        row["pk"] += shift
    Job.objects.all().delete()
    fixture = tmp_path / "jobs.json"
    fixture.write_text(json.dumps(data))

    call_command("loaddata", str(fixture), verbosity=0)

    assert id_sequence() is not None
    loaded = [row["pk"] for row in data]
    assert sorted(Job.objects.values_list("pk", flat=True)) == sorted(loaded)
    assert schedule("tests.noop").pk > max(loaded)


MIGRATION_0034 = importlib.import_module(
    "scheduler_app.migrations.0034_job_ids_sequence_owned_by_the_job_table"
)


@pytest.mark.postgres_only
def test_migrate_has_a_table_partitioned_before_0034_own_its_ids_sequence(partitioned):
    """A table converted before 0034 drew its ids from the hot partition's identity;
    0034 gives the partitioned table's column the sequence, at the same value."""
    before = schedule("tests.noop").pk
    with connection.cursor() as cursor:  # as the conversion before 0034 left the table
        for statement in (
            "ALTER TABLE {hot} ALTER COLUMN id DROP DEFAULT",
            "ALTER TABLE {hot} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY",
            "SELECT setval(pg_get_serial_sequence('{hot}', 'id'), last_value) FROM {seq}",
            "ALTER TABLE ONLY {job} ALTER COLUMN id SET DEFAULT "
            "nextval(pg_get_serial_sequence('{hot}', 'id')::regclass)",
            "DROP SEQUENCE {seq}",
        ):
            cursor.execute(
                statement.format(
                    hot=partitions.HOT, job=partitions.JOB, seq=partitions.JOB + "_id_seq"
                )
            )
    assert id_sequence() is None

    with connection.schema_editor(atomic=False) as editor:
        MIGRATION_0034.own_id_sequence(None, editor)
        MIGRATION_0034.own_id_sequence(None, editor)  # again: nothing to do

    assert id_sequence() == "public.%s_id_seq" % partitions.JOB
    assert schedule("tests.noop").pk == before + 1


@pytest.mark.postgres_only
def test_a_job_the_worker_finishes_moves_into_its_intervals_partition(partitioned):
    retried_key = "again"
    with running_worker():
        job = schedule("tests.noop", unique_key=retried_key)
        stored = wait_for_status(job, Status.SUCCEEDED)

    assert stored.in_history
    (home,) = [
        partition
        for partition in partitions.history_partitions()
        if partition.start <= stored.finished_at < partition.end
    ]
    assert where(job.pk) == home.name.lower()
    # Read like any job: by id, in the history the admin and the API show.
    assert [attempt.outcome for attempt in stored.attempt_history()] == ["succeeded"]
    assert Job.objects.finished().filter(pk=job.pk).exists()
    # Its unique key is free again: a finished job does not hold it.
    assert schedule("tests.noop", unique_key=retried_key).pk != job.pk


@pytest.mark.postgres_only
def test_retention_drops_a_partition_past_the_cutoff_whole(partitioned):
    past = partitions.ensure_partitions(now=NOW - 40 * DAY)[0]
    old = [finished(past.start + dt.timedelta(hours=hour)) for hour in (1, 2)]
    JobAttempt.objects.create(
        job=old[0],
        attempt=1,
        task_name="tests.noop",
        due_at=past.start,
        started_at=past.start,
        finished_at=past.start,
        outcome=JobAttempt.Outcome.RETRIED,
    )
    occurrence = ScheduleOccurrence.objects.create(
        schedule=Schedule.objects.create(name="s", task_name="tests.noop", cron="0 3 * * *"),
        occurrence_at=past.start,
        outcome="enqueued",
        job=old[1],
    )
    cancelled_long_ago = finished(NOW - 40 * DAY, in_history=False)  # in the hot partition
    recent = finished(NOW)
    assert {where(job.pk) for job in old} == {past.name.lower()}

    with override_settings(SCHEDULER_APP={"PRUNE_MAX_ROWS": 1}):
        run = prune(NOW)

    assert run.outcome == PruneRun.Outcome.PRUNED  # the breaker counts rows deleted one by one
    assert run.counts[PARTITIONED_JOBS] == 2
    assert run.counts["jobs"] == 1
    assert past.name not in {partition.name for partition in partitions.history_partitions()}
    assert list(Job.objects.values_list("pk", flat=True)) == [recent.pk]
    # Its attempt went with it, or waits for the partition of its range of jobs, which
    # goes once all of them have (attempt_partitions).
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM %s" % JobAttempt._meta.db_table)
        left = {row[0] for row in cursor.fetchall()}
    assert not left or left <= {p.name for p in attempt_partitions.range_partitions()}
    occurrence.refresh_from_db()
    assert occurrence.job_id is None
    assert cancelled_long_ago.pk not in set(Job.objects.values_list("pk", flat=True))


@pytest.mark.postgres_only
def test_a_dry_run_counts_the_partitions_rows_and_drops_nothing(partitioned):
    past = partitions.ensure_partitions(now=NOW - 40 * DAY)[0]
    finished(past.start)

    run = prune(NOW, dry_run=True)

    assert run.counts[PARTITIONED_JOBS] == 1
    assert past.name in {partition.name for partition in partitions.history_partitions()}
    assert Job.objects.count() == 1


@pytest.mark.postgres_only
def test_the_audit_counts_a_partitions_jobs_from_its_statistics_without_reading_them(
    partitioned,
):
    past = partitions.ensure_partitions(now=NOW - 40 * DAY)[0]
    for minute in range(30):
        finished(past.start + dt.timedelta(minutes=minute))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE %s" % past.name)  # autovacuum's work, long before

    with CaptureQueriesContext(connection) as queries:
        run = prune(NOW, dry_run=True)

    assert run.counts[PARTITIONED_JOBS] == 30
    with transaction.atomic():  # rows_read() rolls back to a savepoint
        assert sum(read for read, _ in reads_of(queries.captured_queries, past.name)) < 30


@pytest.mark.postgres_only
def test_a_prune_moves_jobs_that_ended_outside_the_workers_finish_into_history(partitioned):
    cancelled = schedule("tests.noop", at=NOW + DAY)
    assert cancel(cancelled.pk).changed
    expired = finished(NOW - 40 * DAY, in_history=False)
    (home,) = [p for p in partitions.history_partitions() if p.start <= clock.now() < p.end]
    assert where(cancelled.pk) == partitions.HOT

    dry = prune(clock.now(), dry_run=True)
    assert dry.counts[MOVED_JOBS] == 1
    assert where(cancelled.pk) == partitions.HOT

    run = prune(clock.now())

    assert run.counts[MOVED_JOBS] == 1
    assert run.counts["jobs"] == 1  # past the cutoff: deleted, not moved
    assert where(cancelled.pk) == home.name.lower()
    assert not Job.objects.filter(pk=expired.pk).exists()
    assert Job.objects.get(pk=cancelled.pk).status == Status.CANCELLED
    assert prune(clock.now()).counts[MOVED_JOBS] == 0


@pytest.mark.postgres_only
def test_a_job_that_finishes_in_an_interval_without_partition_goes_to_the_overflow(
    partitioned,
):
    lagged = finished(NOW - 1000 * DAY)  # no test made partitions that far back

    assert where(lagged.pk) == partitions.OVERFLOW
    run = prune(NOW)
    assert run.counts["jobs"] == 1
    assert not Job.objects.exists()


@pytest.mark.postgres_only
def test_the_claim_and_the_finish_read_only_the_hot_partition(partitioned):
    for _ in range(3):
        finished(NOW)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT * FROM scheduler_app_job WHERE status = 'pending' AND %s = 'infinity'"
            % partitions.HISTORY_KEY
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname LIKE 'scheduler_app_%%_jobs'")
        functions = [row[0] for row in cursor.fetchall()]

    assert partitions.HOT in plan
    assert partitions.PARTITION_PREFIX not in plan and partitions.OVERFLOW not in plan
    # The functions name the partition key as partitions.HISTORY_KEY does.
    key = "CASE WHEN in_history AND status IN ('succeeded', 'failed', 'cancelled')"
    assert len(functions) == 2
    assert all(key in " ".join(source.replace("j.", "").split()) for source in functions)


@pytest.mark.postgres_only
def test_the_command_says_what_it_would_do_and_changes_nothing_in_a_dry_run(plain, capsys):
    call_command("scheduler_partition", "--dry-run")

    assert "Would partition the job table" in capsys.readouterr().out
    assert not partitions.is_partitioned()


@pytest.mark.django_db
def test_the_command_on_sqlite_says_partitioning_needs_postgresql():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's answer")
    with pytest.raises(CommandError, match="needs PostgreSQL"):
        call_command("scheduler_partition")


@pytest.mark.postgres_only
def test_moving_history_puts_what_finished_before_in_partitions_in_batches(partitioned, capsys):
    recent = [
        finished(NOW - 2 * DAY - dt.timedelta(hours=hour), in_history=False) for hour in (1, 2, 3)
    ]
    past_retention = finished(NOW - 40 * DAY, in_history=False)  # retention deletes it
    pending = schedule("tests.noop", unique_key="still")

    call_command("scheduler_partition", "--move-history", "--batch-size", "2")

    assert "moved 3 finished jobs into partitions" in capsys.readouterr().out
    homes = {where(job.pk) for job in recent}
    assert partitions.HOT not in homes and partitions.OVERFLOW not in homes
    assert where(past_retention.pk) == where(pending.pk) == partitions.HOT
    assert all(Job.objects.get(pk=job.pk).in_history for job in recent)
    call_command("scheduler_partition", "--move-history", "--dry-run")
    assert "would move 0 finished jobs" in capsys.readouterr().out


@pytest.mark.postgres_only
def test_moving_history_refuses_above_the_breaker_and_moves_nothing(partitioned):
    jobs = [finished(NOW - DAY, in_history=False) for _ in range(2)]

    with pytest.raises(CommandError, match="more than 1 finished jobs would move"):
        call_command("scheduler_partition", "--move-history", "--max-rows", "1")

    assert {where(job.pk) for job in jobs} == {partitions.HOT}
