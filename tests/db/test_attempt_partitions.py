"""Job attempts partitioned by job (scheduler_app.attempt_partitions): the attempt table
converted while it holds rows, each job's attempts in the partition of its id's range,
Job.attempt_history() reading that partition alone, and retention dropping a partition
whole once its jobs are gone or finished before the cutoff."""

from __future__ import annotations

import datetime as dt
import re

import psycopg
import pytest
from django.db import connection

from scheduler_app import attempt_partitions, clock
from scheduler_app.db.postgresql.partitioning import IdRange, id_sequence
from scheduler_app.models import Job, JobAttempt
from scheduler_app.retention import PARTITIONED_ATTEMPTS, prune
from tests.helpers import migrate_database, scratch_database

pytestmark = pytest.mark.postgres_only

DAY = dt.timedelta(days=1)
Status = Job.Status


@pytest.fixture(autouse=True)
def only_jobs_pruned(settings):
    """Retention of finished jobs alone (30 days, the default)."""
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "RETENTION_JOBS_DAYS": 30,
        "RETENTION_OCCURRENCES_DAYS": None,
    }


@pytest.fixture
def partitioned(transactional_db):
    """A partitioned attempt table, as migrate leaves a new install (migration 0037), or as
    the conversion makes it (SCHEDULER_TEST_PLAIN_JOB_TABLE=1), then as found: the
    partitions a test made are dropped (the test database's flush follows)."""
    if attempt_partitions.is_partitioned():
        found = set(attempt_partitions.range_partitions())
        yield
        with connection.cursor() as cursor:
            for partition in set(attempt_partitions.range_partitions()) - found:
                cursor.execute("DROP TABLE %s" % partition.name)
        return
    attempt_partitions.convert()
    try:
        yield
    finally:
        attempt_partitions.revert()


@pytest.fixture
def plain(transactional_db):
    """The attempt table as one table, as an install that holds rows has it before the
    conversion; afterwards as migrate left it."""
    was_partitioned = attempt_partitions.is_partitioned()
    attempt_partitions.revert()
    try:
        yield
    finally:
        if was_partitioned:
            attempt_partitions.convert()


def job(status=Status.FAILED, *, finished_ago=None, created_ago=dt.timedelta(0)) -> Job:
    now = clock.now()
    finished = now - finished_ago if finished_ago is not None else None
    return Job.objects.create(
        task_name="tests.noop",
        status=status,
        scheduled_for=now - created_ago,
        run_at=now - created_ago,
        created_at=now - created_ago,
        started_at=finished,
        finished_at=finished,
        attempts=1,
    )


def attempt(of: Job, outcome=JobAttempt.Outcome.FAILED) -> JobAttempt:
    at = of.finished_at or clock.now()
    return JobAttempt.objects.create(
        job=of,
        attempt=1,
        task_name=of.task_name,
        due_at=at,
        started_at=at,
        finished_at=at,
        outcome=outcome,
        error="boom",
    )


def where(row: JobAttempt) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM %s WHERE id = %%s" % attempt_partitions.ATTEMPT,
            [row.pk],
        )
        return cursor.fetchone()[0]


def exists(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [table])
        return cursor.fetchone()[0] is not None


def next_job_id(value: int) -> None:
    """Have the next job's id be ``value`` (jobs created meanwhile)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(%s, %s)", [id_sequence(Job._meta.db_table)[0], value - 1])


def fresh_partition() -> IdRange:
    """Return a new partition of job ids, as a prune makes them after a few jobs were
    created in an interval (MIN_WIDTH ids); the next jobs fall in it."""
    made = attempt_partitions.range_partitions()
    # Past those made, and past the jobs an earlier test's conversion left to the before one.
    next_job_id(max([p.end for p in made] + [attempt_partitions.before_bound()]) + 1000)
    job(Status.SUCCEEDED, finished_ago=2 * DAY, created_ago=2 * DAY)  # before the interval
    job(Status.PENDING)
    (partition, *_) = attempt_partitions.ensure_partitions()
    assert partition.end - partition.first == attempt_partitions.MIN_WIDTH
    next_job_id(partition.first)
    return partition


def test_migrate_partitions_the_attempt_table_of_a_new_install(monkeypatch):
    monkeypatch.delenv("SCHEDULER_TEST_PLAIN_JOB_TABLE", raising=False)  # a new install

    def state(url: str) -> tuple[bool, list[str]]:
        """(partitioned, the attempts' errors)."""
        with psycopg.connect(url) as db:
            return (
                db.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table "
                    "WHERE partrelid = 'scheduler_app_jobattempt'::regclass)"
                ).fetchone()[0],
                [row[0] for row in db.execute("SELECT error FROM scheduler_app_jobattempt")],
            )

    with scratch_database("attempts") as url:
        migrate_database(url, "scheduler_app")
        with psycopg.connect(url) as db:
            db.execute(
                "INSERT INTO scheduler_app_jobattempt (job_id, attempt, task_name, worker_id, "
                "due_at, started_at, finished_at, outcome, error) VALUES (1, 1, 't', '', "
                "now(), now(), now(), 'failed', 'boom')"
            )
        assert state(url) == (True, ["boom"])

        migrate_database(url, "scheduler_app", "0036")  # back: one table, its rows kept
        assert state(url) == (False, ["boom"])

        migrate_database(url, "scheduler_app")  # it holds rows: scheduler_partition's work
        assert state(url) == (False, ["boom"])


def test_converting_keeps_every_attempt_and_new_jobs_attempts_go_to_partitions(plain):
    before = job(finished_ago=DAY)
    old = attempt(before)
    attempt_partitions.convert()

    assert where(old) == attempt_partitions.BEFORE
    assert before.attempt_history()[0].error == "boom"
    after = job(Status.PENDING)
    # Past the jobs the before partition keeps for those created while it converted.
    assert after.pk >= before.pk + attempt_partitions.CONVERSION_MARGIN
    retried = attempt(after, JobAttempt.Outcome.RETRIED)
    (partition,) = [p for p in attempt_partitions.range_partitions() if p.first <= after.pk < p.end]
    assert where(retried) == partition.name
    assert [a.pk for a in after.attempt_history()] == [retried.pk]
    assert id_sequence(attempt_partitions.ATTEMPT)[0] == "public.scheduler_app_jobattempt_id_seq"


def test_a_jobs_attempt_history_reads_its_partition_alone(partitioned):
    partition = fresh_partition()
    failed = job()
    attempt(failed)
    sql, params = JobAttempt.objects.filter(job=failed).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert set(re.findall(r" on (scheduler_app_jobattempt\w*?)(?:_job_id_\w+)? ", plan)) == {
        partition.name
    }, plan


def gone(*jobs: Job) -> None:
    """Delete ``jobs`` and nothing else, as the drop of their history partition does
    (which deletes only the attempts of the before and overflow partitions)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM scheduler_app_job WHERE id = ANY(%s)", [[j.pk for j in jobs]])


def test_retention_drops_a_partition_whose_jobs_are_gone_whole(partitioned):
    partition = fresh_partition()
    failed = [job(finished_ago=31 * DAY) for _ in range(2)]
    for row in failed:
        attempt(row)
        attempt(row, JobAttempt.Outcome.RETRIED)
    next_job_id(partition.end)  # no new job falls in its range
    gone(*failed)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % partition.name)

    run = prune(clock.now())

    assert not exists(partition.name)
    # From the statistics: the drop reads no attempt.
    assert run.counts[PARTITIONED_ATTEMPTS] == 4


def test_any_job_of_the_range_still_there_keeps_its_partition(partitioned):
    partition = fresh_partition()
    # Finished before the cutoff, but its history partition has not gone yet: its attempt
    # history is still read, and it may be retried.
    finished = job(finished_ago=31 * DAY)
    attempt(finished)
    # Neither a pending job without attempts, which may fail later.
    waiting = job(Status.PENDING)
    next_job_id(partition.end)

    assert partition not in attempt_partitions.expired()
    gone(finished)
    assert partition not in attempt_partitions.expired()
    gone(waiting)
    assert partition in attempt_partitions.expired()


def test_a_job_still_retrying_keeps_its_partition_until_it_and_its_range_are_gone(
    partitioned,
):
    partition = fresh_partition()
    retrying = job(Status.PENDING)
    attempt(retrying, JobAttempt.Outcome.RETRIED)
    next_job_id(partition.end)

    run = prune(clock.now())

    assert exists(partition.name)
    assert run.counts[PARTITIONED_ATTEMPTS] == 0
    assert len(retrying.attempt_history()) == 1

    Job.objects.filter(pk=retrying.pk).update(
        status=Status.FAILED, finished_at=clock.now() - 31 * DAY
    )
    prune(clock.now())  # the job goes (row by row here: it is in the hot partition)
    prune(clock.now())  # then its range's partition
    assert not exists(partition.name)


def test_a_job_of_the_range_that_appears_before_the_drop_keeps_the_partition(partitioned):
    """The drop checks the jobs again with the table locked."""
    partition = fresh_partition()
    next_job_id(partition.end)
    (expired,) = [p for p in attempt_partitions.expired() if p == partition]
    late = job(Status.PENDING)
    Job.objects.filter(pk=late.pk).update(id=partition.first)  # say, restored from a backup

    assert attempt_partitions.drop(expired) is False
    assert exists(partition.name)
