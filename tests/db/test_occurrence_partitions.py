"""Schedule occurrences partitioned by time (scheduler_app.occurrence_partitions): the table
converted while it holds rows, each occurrence in the partition of its interval, read by
the ORM like any occurrence, and retention dropping a partition whole once its interval
is past the cutoff and none of its runs is pending or running."""

from __future__ import annotations

import datetime as dt
import io

import psycopg
import pytest
from django.core.management import call_command
from django.db import IntegrityError, ProgrammingError, connection, transaction

from scheduler_app import (
    attempt_partitions,
    clock,
    occurrence_partitions,
    partitions,
    recipient_partitions,
)
from scheduler_app.db.postgresql.partitioning import id_sequence
from scheduler_app.models import AlertMemory, Job, Schedule, ScheduleOccurrence
from scheduler_app.models.jobs import OCCURRENCE_KEY_PREFIX
from scheduler_app.retention import PARTITIONED_OCCURRENCES, prune
from tests.helpers import migrate_database, scratch_database

pytestmark = pytest.mark.postgres_only

DAY = dt.timedelta(days=1)
#: The tables scheduler_partition converts besides the occurrence table.
OTHERS = (partitions, recipient_partitions, attempt_partitions)
Outcome = ScheduleOccurrence.Outcome


@pytest.fixture(autouse=True)
def only_occurrences_pruned(settings):
    """Retention of occurrences alone (90 days, the default): the prunes of these tests
    look months ahead, and must not drop the job table's partitions."""
    settings.SCHEDULER_APP = {
        **settings.SCHEDULER_APP,
        "RETENTION_JOBS_DAYS": None,
        "RETENTION_OCCURRENCES_DAYS": 90,
    }


@pytest.fixture
def partitioned(transactional_db):
    """A partitioned occurrence table, as migrate leaves a new install (migration 0036), or
    as the conversion makes it (SCHEDULER_TEST_PLAIN_JOB_TABLE=1), then as found: the
    partitions a test made are dropped (the test database's flush follows)."""
    if occurrence_partitions.is_partitioned():
        found = set(occurrence_partitions.range_partitions())
        yield
        with connection.cursor() as cursor:
            for partition in set(occurrence_partitions.range_partitions()) - found:
                cursor.execute("DROP TABLE %s" % partition.name)
        occurrence_partitions.ensure_partitions()  # those of now, if a prune dropped them
        return
    occurrence_partitions.convert()
    try:
        yield
    finally:
        occurrence_partitions.revert()


@pytest.fixture
def others_as_found(transactional_db):
    """The other tables scheduler_partition converts, afterwards as they were found."""
    found = [module for module in OTHERS if not module.is_partitioned()]
    yield
    for module in found:
        module.revert()


@pytest.fixture
def plain(transactional_db):
    """The occurrence table as one table, as an install that holds rows has it before the
    conversion; afterwards as migrate left it."""
    was_partitioned = occurrence_partitions.is_partitioned()
    occurrence_partitions.revert()
    try:
        yield
    finally:
        if was_partitioned:
            occurrence_partitions.convert()


def schedule(name: str = "nightly") -> Schedule:
    return Schedule.objects.create(
        name=name,
        task_name="tests.noop",
        kind=Schedule.Kind.FIXED_RATE,
        interval=dt.timedelta(hours=1),
    )


def occurred(
    row: Schedule, at: dt.datetime, *, job_status: str | None = None
) -> ScheduleOccurrence:
    """Return an occurrence of ``row`` at ``at``, with a run in ``job_status`` (None: skipped)."""
    job = None
    if job_status is not None:
        ended = job_status in Job.FINISHED
        job = Job.objects.create(
            task_name="tests.noop",
            status=job_status,
            scheduled_for=at,
            run_at=at,
            started_at=at if ended else None,
            finished_at=at + dt.timedelta(minutes=1) if ended else None,
            attempts=1 if ended else 0,
            unique_key="%s%s:%s" % (OCCURRENCE_KEY_PREFIX, row.name, at.isoformat()),
        )
    return ScheduleOccurrence.objects.create(
        schedule=row,
        occurrence_at=at,
        outcome=Outcome.ENQUEUED if job else Outcome.SKIPPED_OVERLAP,
        job=job,
    )


def where(occurrence: ScheduleOccurrence) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM %s WHERE id = %%s"
            % occurrence_partitions.OCCURRENCE,
            [occurrence.pk],
        )
        return cursor.fetchone()[0]


def exists(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [table])
        return cursor.fetchone()[0] is not None


def future_partition() -> partitions.Partition:
    """Return a partition of an interval a year ahead, past those made: made as the prune
    of that day will make it. (Every interval before the conversion is the before
    partition's.)"""
    (partition, *_) = occurrence_partitions.ensure_partitions(now=clock.now() + 400 * DAY)
    assert partition.end - partition.start == dt.timedelta(days=7)  # OCCURRENCE_PARTITION_DAYS
    return partition


def prune_after(partition: partitions.Partition):
    """Prune as of when ``partition``'s interval is 90 days old: past its retention."""
    return prune(partition.end + 90 * DAY)


def analyze(partition: partitions.Partition) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % partition.name)


def test_migrate_partitions_the_occurrence_table_of_a_new_install(monkeypatch):
    monkeypatch.delenv("SCHEDULER_TEST_PLAIN_JOB_TABLE", raising=False)  # a new install

    def state(url: str) -> tuple[bool, list[str]]:
        """(partitioned, the occurrences' outcomes)."""
        with psycopg.connect(url) as db:
            return (
                db.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table "
                    "WHERE partrelid = 'scheduler_app_scheduleoccurrence'::regclass)"
                ).fetchone()[0],
                [
                    row[0]
                    for row in db.execute("SELECT outcome FROM scheduler_app_scheduleoccurrence")
                ],
            )

    with scratch_database("occurrences") as url:
        migrate_database(url, "scheduler_app")
        with psycopg.connect(url) as db:
            (schedule_id,) = db.execute(
                "INSERT INTO scheduler_app_schedule (name, task_name, payload, queue, enabled, "
                "kind, cron, timezone, interval, overlap_policy, misfire_policy, misfire_grace, "
                "jitter, declared_in_code, created_at, updated_at) VALUES ('s', 't', '{}', '', "
                "true, 'fixed_rate', '', 'UTC', '1 hour', 'skip', 'run_once', '1 minute', '0', "
                "false, now(), now()) RETURNING id"
            ).fetchone()
            db.execute(
                "INSERT INTO scheduler_app_scheduleoccurrence (schedule_id, occurrence_at, "
                "outcome, detail, created_at) VALUES (%s, now(), 'skipped_overlap', '', now())",
                [schedule_id],
            )
        assert state(url) == (True, ["skipped_overlap"])

        migrate_database(url, "scheduler_app", "0035")  # back: one table, its rows kept
        assert state(url) == (False, ["skipped_overlap"])

        migrate_database(url, "scheduler_app")  # it holds rows: scheduler_partition's work
        assert state(url) == (False, ["skipped_overlap"])


def test_converting_keeps_every_occurrence_and_later_ones_go_to_partitions(
    plain, others_as_found, settings
):
    nightly = schedule()
    now = clock.now()
    before = occurred(nightly, now - DAY, job_status=Job.Status.SUCCEEDED)

    out = io.StringIO()
    call_command("scheduler_partition", stdout=out)

    assert (
        "The schedule occurrence table is partitioned; its rows are in %s."
        % occurrence_partitions.BEFORE
        in out.getvalue().splitlines()
    )
    assert where(before) == occurrence_partitions.BEFORE
    # The interval being written stays in the before partition: no partition, nor the
    # CHECK that keeps it out of the overflow, fences off an occurrence recorded now.
    assert where(occurred(nightly, now)) == occurrence_partitions.BEFORE
    first = occurrence_partitions.range_partitions()[0]
    later = occurred(nightly, first.start)
    assert where(later) == first.name
    assert nightly.occurrences.values_list("pk", flat=True).first() == later.pk
    with pytest.raises(IntegrityError), transaction.atomic():  # once per schedule and time
        occurred(nightly, first.start)
    assert id_sequence(occurrence_partitions.OCCURRENCE)[0] == (
        "public.scheduler_app_scheduleoccurrence_id_seq"
    )
    # Kept for ever: no partition is made, later occurrences go to the overflow.
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "RETENTION_OCCURRENCES_DAYS": None}
    assert occurrence_partitions.ensure_partitions(now=first.start + 400 * DAY) == []
    assert where(occurred(nightly, first.start + 400 * DAY)) == occurrence_partitions.OVERFLOW


def test_retention_drops_an_old_partition_whole(partitioned):
    nightly = schedule()
    partition = future_partition()
    succeeded = occurred(nightly, partition.start, job_status=Job.Status.SUCCEEDED)
    skipped = occurred(nightly, partition.start + dt.timedelta(hours=1))
    assert where(succeeded) == where(skipped) == partition.name
    analyze(partition)

    run = prune_after(partition)

    assert not exists(partition.name)
    assert not ScheduleOccurrence.objects.filter(pk__in=[succeeded.pk, skipped.pk]).exists()
    # From the statistics: the drop reads no occurrence; none went one by one.
    assert (run.counts[PARTITIONED_OCCURRENCES], run.counts["occurrences"]) == (2, 0)


def test_the_last_success_is_remembered_whatever_the_statistics_say(partitioned):
    nightly = schedule()
    partition = future_partition()
    analyze(partition)  # while empty: the statistics say 0 rows
    succeeded = occurred(nightly, partition.start, job_status=Job.Status.SUCCEEDED)

    prune_after(partition)

    assert not exists(partition.name)
    # What the absent rule needs of the schedule survives its occurrences.
    memory = AlertMemory.objects.get(subject="schedule:nightly")
    assert memory.last_success_at == Job.objects.get(pk=succeeded.job_id).finished_at


def test_a_partition_keeps_the_schedule_foreign_key(partitioned):
    partition = future_partition()
    with pytest.raises(IntegrityError), transaction.atomic():  # checked at commit
        ScheduleOccurrence.objects.create(
            schedule_id=999_999, occurrence_at=partition.start, outcome=Outcome.SKIPPED_OVERLAP
        )


def test_a_conversion_that_fails_leaves_the_table_as_it_was(plain):
    nightly = schedule()
    with connection.cursor() as cursor:  # the name the table would take
        cursor.execute("CREATE TABLE %s (id int)" % occurrence_partitions.BEFORE)
    try:
        with pytest.raises(ProgrammingError):
            occurrence_partitions.convert()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE %s" % occurrence_partitions.BEFORE)

    assert not occurrence_partitions.is_partitioned()
    # Without its CHECK, which would have refused every occurrence past its bound.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass",
            [occurrence_partitions.OCCURRENCE],
        )
        assert occurrence_partitions.BEFORE_CHECK not in {row[0] for row in cursor.fetchall()}
    occurred(nightly, clock.now() + 400 * DAY).delete()


def test_a_run_still_pending_keeps_its_partition_whole_until_it_ends(partitioned):
    nightly = schedule()
    partition = future_partition()
    pending = occurred(nightly, partition.start, job_status=Job.Status.PENDING)
    skipped = occurred(nightly, partition.start + dt.timedelta(hours=1))

    run = prune_after(partition)

    assert exists(partition.name)
    # Its other occurrences wait for the partition rather than going row by row.
    assert ScheduleOccurrence.objects.filter(pk__in=[pending.pk, skipped.pk]).count() == 2
    assert (run.counts[PARTITIONED_OCCURRENCES], run.counts["occurrences"]) == (0, 0)

    Job.objects.filter(pk=pending.job_id).update(
        status=Job.Status.CANCELLED, finished_at=clock.now()
    )
    prune_after(partition)
    assert not exists(partition.name)


def test_a_run_retried_before_the_drop_keeps_the_partition(partitioned):
    """The drop checks the runs again with the table locked: one pending again after the
    prune found the partition expired keeps it."""
    nightly = schedule()
    partition = future_partition()
    failed = occurred(nightly, partition.start, job_status=Job.Status.FAILED)
    (expired,) = [p for p in occurrence_partitions.expired(partition.end) if p == partition]
    Job.objects.filter(pk=failed.job_id).update(status=Job.Status.PENDING, finished_at=None)

    assert occurrence_partitions.drop(expired) is False
    assert where(failed) == partition.name


def test_old_occurrences_of_the_before_and_overflow_partitions_go_row_by_row(plain):
    nightly = schedule()
    old = occurred(nightly, clock.now() - 100 * DAY, job_status=Job.Status.SUCCEEDED)
    occurrence_partitions.convert()
    try:
        # In an interval with no partition (maintenance fell behind).
        late = occurred(nightly, occurrence_partitions.range_partitions()[-1].end + DAY)
        assert (where(old), where(late)) == (
            occurrence_partitions.BEFORE,
            occurrence_partitions.OVERFLOW,
        )

        run = prune(late.occurrence_at + 91 * DAY)

        assert run.counts["occurrences"] == 2
        assert not ScheduleOccurrence.objects.filter(pk__in=[old.pk, late.pk]).exists()
    finally:
        occurrence_partitions.revert()


def test_a_partition_is_not_made_for_an_interval_with_occurrences_in_the_overflow(partitioned):
    nightly = schedule()
    start = partitions.start_of(clock.now() + 800 * DAY, occurrence_partitions.width())
    following = start + occurrence_partitions.width()  # the first a prune then would make
    late = occurred(nightly, following + dt.timedelta(hours=2))
    assert where(late) == occurrence_partitions.OVERFLOW

    made = occurrence_partitions.ensure_partitions(now=start)

    assert made and following not in {partition.start for partition in made}
    assert where(late) == occurrence_partitions.OVERFLOW
    # The overflow takes any occurrence again afterwards.
    again = occurred(nightly, following + dt.timedelta(hours=3))
    assert where(again) == occurrence_partitions.OVERFLOW
