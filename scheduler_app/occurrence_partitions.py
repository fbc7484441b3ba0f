"""Schedule occurrences partitioned by time on PostgreSQL: old occurrences dropped whole.

After ``convert()`` (migration 0036 on a new install, ``manage.py scheduler_partition``
on one whose occurrence table holds rows) the occurrence table is partitioned by range
over ``occurrence_at``:

- ``scheduler_app_scheduleoccurrence_before``: the table as it was, renamed, with its
  indexes and constraints: the occurrences before the end of the interval being written
  when it was converted (or of the next one, within CONVERSION_MARGIN of it).
- ``scheduler_app_scheduleoccurrence_pYYYYMMDDtHHMM``: the occurrences of one interval of
  OCCURRENCE_PARTITION_DAYS (wider than the job table's: occurrences are few, and a
  look-up of a schedule's latest occurrences reads every partition), up to
  HISTORY_PARTITIONS_AHEAD ahead of the current one, made by each prune run (and the
  command) while RETENTION_OCCURRENCES_DAYS is set: kept for ever, they would only add up.
  Each has the table's foreign key to the schedule table.
- ``scheduler_app_scheduleoccurrence_overflow``, the DEFAULT partition: occurrences of an
  interval that has no partition (recorded late, by a catch-up of missed occurrences, or
  while occurrences are kept for ever).

An occurrence's unique key (schedule, time) holds within its partition, so across the
table. Retention drops a partition whole once its interval ended before the cutoff and
none of its occurrences has a job that is still pending or running (the overlap policy
looks for those: ``expired()``); the old occurrences of the before and overflow
partitions go row by row. SQLite, and PostgreSQL until converted, keep one table; the
ORM sees the same rows.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db.models import Exists, OuterRef

from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db import database_now
from scheduler_app.db.postgresql import partitioning
from scheduler_app.db.postgresql.partitioning import locked
from scheduler_app.models import Job, ScheduleOccurrence
from scheduler_app.models.jobs import OCCURRENCE_KEY_PREFIX
from scheduler_app.partitions import (
    Partition,
    attach_interval,
    start_of,
    time_partition,
    time_partitions,
)

logger = logging.getLogger("scheduler_app.partitions")

OCCURRENCE = ScheduleOccurrence._meta.db_table
BEFORE = OCCURRENCE + "_before"
OVERFLOW = OCCURRENCE + "_overflow"
PARTITION_PREFIX = OCCURRENCE + "_p"
#: The before partition's bound as a CHECK, validated before the conversion attaches the
#: table, so that attaching it reads no row (PostgreSQL proves it from the CHECK).
BEFORE_CHECK = "scheduler_occurrence_before"
#: The overflow partition's CHECK while partitions are attached (see ensure_partitions).
OVERFLOW_CHECK = "scheduler_occurrence_overflow_out"
#: How far past the database's clock a partition (and the before partition's bound) may
#: begin, at least: the interval being written, and one an occurrence due within the
#: margin falls in, stay where they are (see _first_to_make).
CONVERSION_MARGIN = dt.timedelta(hours=1)


class NotSupported(Exception):
    """Partitioned occurrences need PostgreSQL."""


def is_partitioned() -> bool:
    """Return whether the occurrence table is partitioned (always False on SQLite)."""
    return partitioning.is_partitioned(OCCURRENCE)


def convert() -> list[Partition]:
    """Partition the occurrence table, on PostgreSQL, while schedulers run; return the
    partitions made.

    Validates the before partition's CHECK on the table as it is (it reads the table,
    without blocking writes), then, in one short transaction that waits at most
    LOCK_TIMEOUT for its lock (retried): renames the table to the before partition, makes
    the partitioned table in its place, attaches it (no row read) and adds the overflow
    partition. Then makes the partitions ahead. Does nothing but the last step if the
    table is partitioned already.
    """
    if connection.vendor != "postgresql":
        raise NotSupported("Partitioned occurrences need PostgreSQL; SQLite keeps one table.")
    if is_partitioned():
        return ensure_partitions()
    with connection.cursor() as cursor:  # none is recorded ahead; an import might be
        cursor.execute("SELECT max(occurrence_at) FROM %s" % OCCURRENCE)
        latest = cursor.fetchone()[0]
    bound = _first_to_make()
    if latest is not None:
        bound = max(bound, start_of(latest, width()) + width())
    with partitioning.converting(
        OCCURRENCE, BEFORE_CHECK, "occurrence_at < '%s'" % bound.isoformat()
    ):
        sequence, identity = partitioning.id_sequence(OCCURRENCE)
        copied = _copied(OCCURRENCE)
        locked(
            *partitioning.in_place_of(
                OCCURRENCE, BEFORE, BEFORE_CHECK, "occurrence_at", "'%s'" % bound.isoformat()
            ),
            *_table(OVERFLOW, copied),
            "ALTER TABLE %s ATTACH PARTITION %s DEFAULT" % (OCCURRENCE, OVERFLOW),
            *partitioning.ids_owned_by(OCCURRENCE, BEFORE, sequence, identity=identity),
        )
    logger.info("partitioned table=%s before=%s", OCCURRENCE, BEFORE)
    return ensure_partitions()


def revert() -> None:
    """Put a partitioned occurrence table back as one table, its rows kept (migration
    0036's reverse: see partitioning.put_back). Does nothing if the table is not
    partitioned."""
    if is_partitioned():
        partitioning.put_back(OCCURRENCE, BEFORE, BEFORE_CHECK)


def _copied(source: str) -> list[str]:
    """Return the statements that give a new partition what it copies of ``source`` (the
    before partition, or the table before the conversion; see partitioning.copied_indexes):
    its foreign key to the schedule table (a deleted schedule's occurrence cannot be
    recorded meanwhile: making or dropping a partition waits briefly for that table), and
    its indexes but that of schedule_id alone, which the unique key of (schedule, time)
    serves."""
    prefixes = ("scheduler_occurrence_", OCCURRENCE + "_")
    indexes = [
        statement
        for statement in partitioning.copied_indexes(source, prefixes=prefixes)
        if not statement.endswith(" (schedule_id)")
    ]
    return [*indexes, *partitioning.foreign_keys(source)]


def _table(table: str, copied: list[str]) -> list[str]:
    """Return the statements that make ``table``, an empty partition: the before
    partition's columns and CHECK constraints but its bound, and ``copied``."""
    return partitioning.partition_like(table, BEFORE, BEFORE_CHECK, copied)


def width() -> dt.timedelta:
    """Return the time one partition covers (OCCURRENCE_PARTITION_DAYS)."""
    return dt.timedelta(days=app_settings.OCCURRENCE_PARTITION_DAYS)


def _kept_for_a_time() -> bool:
    """Return whether old occurrences are deleted some day: partitions are made only then
    (RETENTION_OCCURRENCES_DAYS)."""
    return app_settings.RETENTION_OCCURRENCES_DAYS is not None


def range_partitions() -> list[Partition]:
    """Return the partitions of intervals, oldest first (not the before nor the overflow
    one)."""
    return time_partitions(OCCURRENCE, PARTITION_PREFIX)


def range_partitions_before(cutoff: dt.datetime) -> list[Partition]:
    """Return the partitions of intervals that begin before ``cutoff`` (none if the table
    is not partitioned): their occurrences go with them, not row by row."""
    if not is_partitioned():
        return []
    return [partition for partition in range_partitions() if partition.start < cutoff]


def ensure_partitions(now: dt.datetime | None = None) -> list[Partition]:
    """Make the missing partitions of the intervals up to HISTORY_PARTITIONS_AHEAD after
    the current one (by the database's clock, or ``now``), from the first after the one
    being written (_first_to_make), while RETENTION_OCCURRENCES_DAYS is set (else none:
    new occurrences go to the overflow partition, as to one table); return those made.

    An interval that overlaps a partition (of another OCCURRENCE_PARTITION_DAYS) or some
    of whose occurrences are in the overflow partition already gets none (retention
    deletes those row by row). Each is made as a table of its own,
    indexed while empty, then attached, which takes a lock that lets schedulers go on
    (SHARE UPDATE EXCLUSIVE on the occurrence table); a CHECK that keeps the new
    intervals out of the overflow partition, validated first without blocking its
    writes, spares attaching a read of the overflow with its lock held.
    """
    if not _kept_for_a_time():
        return []
    now = now or database_now()
    made = range_partitions()
    begin = max(_first_to_make(now), _bound())
    begin = start_of(begin - dt.timedelta(microseconds=1), width()) + width()  # aligned
    wanted = []
    while begin <= start_of(now, width()) + app_settings.HISTORY_PARTITIONS_AHEAD * width():
        partition = time_partition(PARTITION_PREFIX, begin, width())
        overlaps = any(p.start < partition.end and partition.start < p.end for p in made)
        if not overlaps and not _in_overflow(partition):
            wanted.append(partition)
        begin = partition.end
    if not wanted:
        return []
    new: list[Partition] = []
    try:
        partitioning.validated_check(
            OVERFLOW,
            OVERFLOW_CHECK,
            " AND ".join(
                "NOT (occurrence_at >= '%s' AND occurrence_at < '%s')"
                % (p.start.isoformat(), p.end.isoformat())
                for p in wanted
            ),
        )
        copied = _copied(BEFORE)
        for partition in wanted:
            if partitioning.make_and_attach(
                OCCURRENCE,
                partition.name,
                _table(partition.name, copied),
                attach_interval(OCCURRENCE, partition),
            ):
                logger.info("occurrence partition made name=%s", partition.name)
                new.append(partition)
    finally:
        # Afterwards, or cut short: the overflow takes any occurrence again.
        locked("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s" % (OVERFLOW, OVERFLOW_CHECK))
    return new


def _first_to_make(now: dt.datetime | None = None) -> dt.datetime:
    """Return the start of the first interval a partition may be made for: the one after
    the interval CONVERSION_MARGIN past the database's clock (or ``now``) falls in. The
    CHECK that keeps a new partition's interval out of the overflow (or out of the table
    being converted) never fences off an occurrence being recorded."""
    return start_of((now or database_now()) + CONVERSION_MARGIN, width()) + width()


def _bound() -> dt.datetime:
    """Return where the before partition's interval ends."""
    return dt.datetime.fromisoformat(partitioning.upper_bound(BEFORE)).astimezone(dt.UTC)


def _in_overflow(partition: Partition) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM %s WHERE occurrence_at >= %%s AND occurrence_at < %%s)"
            % OVERFLOW,
            [partition.start, partition.end],
        )
        return cursor.fetchone()[0]


def _holds_unfinished_jobs(partition: Partition) -> bool:
    """Return whether an occurrence of ``partition``'s interval has a job that is still
    pending or running: looked up from those jobs (the schedules' runs, as the overlap
    policy finds them: few), each in the partition's index of job ids."""
    return (
        Job.objects.hot()
        .unfinished()
        .filter(unique_key__startswith=OCCURRENCE_KEY_PREFIX)
        .filter(
            Exists(
                ScheduleOccurrence.objects.filter(
                    job=OuterRef("pk"),
                    occurrence_at__gte=partition.start,
                    occurrence_at__lt=partition.end,
                )
            )
        )
        .exists()
    )


def expired(cutoff: dt.datetime) -> list[Partition]:
    """Return the partitions retention may drop: their interval ended before ``cutoff``
    and no job of their occurrences is pending or running."""
    return [
        partition
        for partition in range_partitions()
        if partition.end <= cutoff and not _holds_unfinished_jobs(partition)
    ]


def drop(partition: Partition) -> bool:
    """Drop a partition with its occurrences; return False if it was gone already or one
    of its occurrences' jobs is pending or running now (re-run meanwhile).

    One transaction takes the occurrence table's lock (at most LOCK_TIMEOUT of waiting,
    tried again from the start), checks the jobs again and drops the table. Nothing
    refers to an occurrence; no statement reads the partition's rows.
    """

    return partitioning.drop_partition(
        OCCURRENCE, partition.name, needed=lambda: _holds_unfinished_jobs(partition)
    )


def row_by_row_tables() -> tuple[str, ...]:
    """Return the tables whose old occurrences retention deletes row by row: the
    occurrence table, or, partitioned, its before and overflow partitions."""
    return (BEFORE, OVERFLOW) if is_partitioned() else (OCCURRENCE,)
