"""Job attempts partitioned by job on PostgreSQL: the attempts of pruned jobs dropped whole.

After ``convert()`` (migration 0037 on a new install, ``manage.py scheduler_partition``
on one whose attempt table holds rows) the attempt table is partitioned by range over
``job_id``, so that all of a job's attempts are in one partition:

- ``scheduler_app_jobattempt_before``: the table as it was, renamed, with its indexes:
  the attempts of the jobs created before the conversion (and of those created while it
  ran: see CONVERSION_MARGIN).
- ``scheduler_app_jobattempt_p<first job id>``: the attempts of a range of job ids, made
  ahead (by each prune run, and the command), each as wide as the job ids handed out in
  the last HISTORY_PARTITION_MINUTES (at least MIN_WIDTH), HISTORY_PARTITIONS_AHEAD of them, while
  RETENTION_JOBS_DAYS is set: kept for ever, they would only add up.
- ``scheduler_app_jobattempt_overflow``, the DEFAULT partition: the attempts of jobs past
  the partitions made (maintenance fell behind a burst of new jobs, or jobs are kept for
  ever), and of jobs whose range's partition went before they failed.

Job.attempt_history() names its job, so the planner reads one partition. Retention drops
a partition whole once no new job can fall in its range and every job of its range is
gone (``expired()``): the history partition drop deletes its jobs' attempts from the
before and overflow partitions only, and the attempts of a range go with it at a
prune run after. (The row-by-row prune of jobs deletes theirs wherever they are.) SQLite,
and PostgreSQL until converted, keep one table; the ORM sees the same rows.
"""

from __future__ import annotations

import datetime as dt
import logging

from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db import database_now
from scheduler_app.db.postgresql import partitioning
from scheduler_app.db.postgresql.partitioning import IdRange, locked
from scheduler_app.models import Job, JobAttempt

logger = logging.getLogger("scheduler_app.partitions")

ATTEMPT = JobAttempt._meta.db_table
JOB = Job._meta.db_table
BEFORE = ATTEMPT + "_before"
OVERFLOW = ATTEMPT + "_overflow"
PARTITION_PREFIX = ATTEMPT + "_p"
#: The before partition's bound as a CHECK, validated before the conversion attaches the
#: table, so that attaching it reads no row (PostgreSQL proves it from the CHECK).
BEFORE_CHECK = "scheduler_attempt_before"
#: The overflow partition's CHECK while partitions are attached (see ensure_partitions).
OVERFLOW_CHECK = "scheduler_attempt_overflow_out"
#: Job ids left to the before partition past the last one handed out when the conversion
#: of a live install began: a job created while it validates BEFORE_CHECK fails there.
#: The job ids' sequence then skips to the first partition's (ids are not dense anyway).
CONVERSION_MARGIN = 1_000_000
#: The fewest job ids a partition holds: where jobs are few, a partition of fewer would
#: hold a handful of attempts (and every prune could add some).
MIN_WIDTH = 100_000


class NotSupported(Exception):
    """Partitioned attempts need PostgreSQL."""


def is_partitioned() -> bool:
    """Return whether the attempt table is partitioned (always False on SQLite)."""
    return partitioning.is_partitioned(ATTEMPT)


def convert() -> list[IdRange]:
    """Partition the attempt table, on PostgreSQL, while workers run; return the
    partitions made.

    Validates the before partition's CHECK on the table as it is (it reads the table,
    without blocking writes), then, in one short transaction that waits at most
    LOCK_TIMEOUT for its lock (retried): renames the table to the before partition,
    makes the partitioned table in its place, attaches it (no row read), adds the
    overflow partition and the first one (while RETENTION_JOBS_DAYS is set), and moves
    the job ids past the before partition's. Then makes the partitions ahead. Does
    nothing but the last step if the table is partitioned already.
    """
    if connection.vendor != "postgresql":
        raise NotSupported("Partitioned attempts need PostgreSQL; SQLite keeps one table.")
    if is_partitioned():
        return ensure_partitions()
    with connection.cursor() as cursor:
        # Jobs exist: workers may be creating more while the CHECK is validated.
        cursor.execute("SELECT EXISTS (SELECT 1 FROM %s)" % JOB)
        margin = CONVERSION_MARGIN if cursor.fetchone()[0] else 0
    next_id = partitioning.next_id(JOB)
    bound = next_id + margin
    first = [_partition(bound, _width(next_id))] if _kept_for_a_time() else []
    with partitioning.converting(
        ATTEMPT, BEFORE_CHECK, "job_id IS NOT NULL AND job_id < %d" % bound
    ):
        sequence, identity = partitioning.id_sequence(ATTEMPT)
        indexes = _indexes(ATTEMPT)
        locked(
            *partitioning.in_place_of(ATTEMPT, BEFORE, BEFORE_CHECK, "job_id", str(bound)),
            *_table(OVERFLOW, indexes),
            "ALTER TABLE %s ATTACH PARTITION %s DEFAULT" % (ATTEMPT, OVERFLOW),
            *(statement for p in first for statement in (*_table(p.name, indexes), _attach(p))),
            *partitioning.ids_owned_by(ATTEMPT, BEFORE, sequence, identity=identity),
            # New jobs' attempts go to the partitions, past the before partition's ids.
            *([partitioning.ids_past(JOB, bound)] if margin else []),
        )
    logger.info("partitioned table=%s before=%s", ATTEMPT, BEFORE)
    return [*first, *ensure_partitions()]


def revert() -> None:
    """Put a partitioned attempt table back as one table, its rows kept (migration 0037's
    reverse: see partitioning.put_back). Does nothing if the table is not partitioned."""
    if is_partitioned():
        partitioning.put_back(ATTEMPT, BEFORE, BEFORE_CHECK)


def _indexes(source: str) -> list[str]:
    """Return the statements that make the indexes of ``source`` (the before partition, or
    the table before the conversion) on a new partition (see partitioning.copied_indexes)."""
    return partitioning.copied_indexes(source, prefixes=("scheduler_attempt_", ATTEMPT + "_"))


def _table(table: str, indexes: list[str]) -> list[str]:
    """Return the statements that make ``table``, an empty partition: the before
    partition's columns and CHECK constraints but its bound, and ``indexes``."""
    return partitioning.partition_like(table, BEFORE, BEFORE_CHECK, indexes)


def _partition(first: int, width: int) -> IdRange:
    return IdRange(PARTITION_PREFIX + str(first), first, first + width)


def _attach(partition: IdRange) -> str:
    return partitioning.attach_id_range(ATTEMPT, partition)


def before_bound() -> int:
    """Return the first job id past the before partition's."""
    return int(partitioning.upper_bound(BEFORE))


def _kept_for_a_time() -> bool:
    """Return whether finished jobs are deleted some day: partitions are made only then
    (RETENTION_JOBS_DAYS)."""
    return app_settings.RETENTION_JOBS_DAYS is not None


def _width(next_id: int, floor: int = 0) -> int:
    """Return how many job ids a new partition holds: those handed out since the first job
    created in the last HISTORY_PARTITION_MINUTES, or since ``floor`` if later (the ids the
    conversion skipped are not counted), at least MIN_WIDTH. The first such job is found
    by bisecting the job ids by creation time: each step looks up each job partition's
    primary key once."""
    since = database_now() - dt.timedelta(minutes=app_settings.HISTORY_PARTITION_MINUTES)
    low, high = 0, next_id  # every job from ``high`` on was created at or after ``since``
    first = None  # the first job from ``high`` on
    while low < high:
        middle = (low + high) // 2
        found = Job.objects.filter(pk__gte=middle).order_by("pk").values_list("pk", "created_at")
        found = found.first()
        if found is None or found[1] >= since:
            high, first = middle, found[0] if found else None
        else:
            low = found[0] + 1
    if first is None:
        return MIN_WIDTH
    return max(MIN_WIDTH, next_id - max(first, floor))


def range_partitions() -> list[IdRange]:
    """Return the partitions of ranges of jobs, lowest first (not the before nor the
    overflow one)."""
    return partitioning.id_ranges(ATTEMPT, PARTITION_PREFIX)


def ensure_partitions() -> list[IdRange]:
    """Make partitions ahead of the job ids handed out, HISTORY_PARTITIONS_AHEAD of the
    current width past the next one's, while RETENTION_JOBS_DAYS is set (else none: the
    attempts of new jobs go to the overflow partition, as to one table); return those made.

    They start where the last one ends, or, if that is less than a width past the next
    job id (maintenance fell behind), a width past it, and past the jobs with attempts in
    the overflow partition. Each is made as a table of its own, indexed while empty, then
    attached (SHARE UPDATE EXCLUSIVE on the attempt table: workers go on); a CHECK that
    keeps the new ranges out of the overflow partition, validated first without blocking
    its writes, spares attaching a read of the overflow with its lock held.
    """
    if not _kept_for_a_time():
        return []
    next_id, bound = partitioning.next_id(JOB), before_bound()
    width = _width(next_id, floor=bound)
    ranges = [
        _partition(first, width)
        for first, _ in partitioning.id_ranges_ahead(
            OVERFLOW, "job_id", made=range_partitions(), floor=bound, next_id=next_id, width=width
        )
    ]
    if not ranges:
        return []
    indexes = _indexes(BEFORE)
    return partitioning.make_id_ranges(
        ATTEMPT, "job_id", (OVERFLOW, OVERFLOW_CHECK), ranges, lambda name: _table(name, indexes)
    )


def _holds_jobs(partition: IdRange) -> bool:
    """Return whether a job of ``partition``'s range is still there (whatever its state:
    a finished one's attempt history is read until it goes, and it may be retried): one
    look-up of each job partition's primary key."""
    return Job.objects.filter(pk__gte=partition.first, pk__lt=partition.end).exists()


def expired() -> list[IdRange]:
    """Return the partitions retention may drop: no job can be created in their range any
    more, and every job of their range is gone (the jobs' own retention removed them)."""
    next_id = partitioning.next_id(JOB)
    return [
        partition
        for partition in range_partitions()
        if partition.end <= next_id and not _holds_jobs(partition)
    ]


def drop(partition: IdRange) -> bool:
    """Drop a partition with its attempts; return False if it was gone already or a job of
    its range is there now.

    One transaction takes the attempt table's lock (at most LOCK_TIMEOUT of waiting,
    tried again from the start), checks the jobs again and drops the table. Nothing
    refers to an attempt; no statement reads the partition's rows.
    """

    return partitioning.drop_partition(
        ATTEMPT, partition.name, needed=lambda: _holds_jobs(partition)
    )


def row_by_row_tables() -> tuple[str, ...]:
    """Return the tables whose attempts go with their jobs row by row: the attempt table,
    or, partitioned, its before and overflow partitions."""
    return (BEFORE, OVERFLOW) if is_partitioned() else (ATTEMPT,)
