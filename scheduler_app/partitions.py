"""Partitioned job history on PostgreSQL: finished jobs in time partitions, dropped whole.

After ``convert()`` (migration 0033 on a new install, ``manage.py scheduler_partition``
on one whose job table holds rows) the job table is partitioned by
range over HISTORY_KEY: 'infinity' for every job that has not ended through the worker,
its finish time for one that has (the worker's finish sets ``Job.in_history``):

- ``scheduler_app_job_hot`` holds the keys from 'infinity' up: every pending and running
  job, so every row the claim loop reads. It is the table as it was, renamed, with its
  indexes and constraints; the unique key's (partial on unfinished jobs) holds there for
  every unfinished job. The claim and the batched finish name HISTORY_KEY = 'infinity',
  so the planner reads no other partition.
- ``scheduler_app_job_pYYYYMMDDtHHMM``: the jobs that finished in one interval of
  HISTORY_PARTITION_MINUTES, with the hot partition's indexes but those of pending and
  running jobs (a CHECK says it holds ended jobs only). Retention drops such a
  partition whole once all of it is past the cutoff (with its jobs' attempts;
  occurrences and sync cursors are unlinked).
- ``scheduler_app_job_overflow``, the DEFAULT partition: finished jobs of an interval
  that had no partition yet (maintenance fell behind). Normally empty.

The ORM sees one table: every query of the admin, the API, the alerts and lateness, and
Job.attempt_history(), reads all partitions. Jobs that end outside the worker's finish
(cancelled before they ran, failed by the lease rescue) stay in the hot partition until
the next prune run moves them into history (retention.History); jobs finished before
the conversion stay there until ``scheduler_partition --move-history`` moves them, or
retention deletes them row by row, as on a table that is not partitioned. SQLite, and
PostgreSQL until converted, keep one table.
Queries of pending or running jobs name IN_HOT_PARTITION (JobQuerySet.hot()) so that the
planner reads the hot partition alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Iterator

from django.db import OperationalError

from scheduler_app import attempt_partitions, clock, database
from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db.postgresql import partitioning
from scheduler_app.db.postgresql.partitioning import locked, on_table
from scheduler_app.models import Job, ScheduleOccurrence, SyncCursor
from scheduler_app.models.jobs import HISTORY_KEY

logger = logging.getLogger("scheduler_app.partitions")

JOB = Job._meta.db_table
HOT = JOB + "_hot"
OVERFLOW = JOB + "_overflow"
PARTITION_PREFIX = JOB + "_p"
#: The job table's indexes of pending and running jobs only (Job.Meta): a table of
#: ended jobs is made without them (see _history_table).
UNFINISHED_INDEXES = frozenset(
    {
        "scheduler_job_claimable",
        "scheduler_job_next_due",
        "scheduler_job_leases",
        "scheduler_job_unique_key_unfinished",
        "scheduler_job_runs_unfinished",
    }
)
#: The statuses of ended jobs, and the CHECK that a history partition holds only those.
ENDED = "(%s)" % ", ".join("'%s'" % status for status in Job.FINISHED)
ENDED_CHECK = "scheduler_job_ended"
#: The hot partition's constraint as a CHECK, validated before the conversion attaches the
#: table, so that attaching it reads no row (PostgreSQL proves it from the CHECK).
HOT_CHECK = "scheduler_job_hot"


class NotSupported(Exception):
    """Partitioned history needs PostgreSQL."""


@dataclasses.dataclass(frozen=True)
class Partition:
    """One history partition: its table and the finish times it holds, [start, end)."""

    name: str
    start: dt.datetime
    end: dt.datetime


def moved_meanwhile(exc: OperationalError) -> bool:
    """Return whether ``exc`` is PostgreSQL's "tuple to be locked was already moved to
    another partition due to concurrent update" (SQLSTATE 40001 under READ COMMITTED): the
    row a statement waited for went into history (or back) meanwhile; the statement may
    be run again, and then finds it where it is."""
    return getattr(exc.__cause__, "sqlstate", None) == "40001"


def migrates_here(schema_editor) -> bool:
    """Return whether a migration runs on PostgreSQL, on scheduler_app's database: where
    the job table may be partitioned."""
    connection = schema_editor.connection
    return connection.vendor == "postgresql" and connection.alias == database.alias()


def is_partitioned() -> bool:
    """Return whether the job table is partitioned (always False on SQLite)."""
    return partitioning.is_partitioned(JOB)


def interval() -> dt.timedelta:
    """Return the time one history partition covers (HISTORY_PARTITION_MINUTES)."""
    return dt.timedelta(minutes=app_settings.HISTORY_PARTITION_MINUTES)


def start_of(moment: dt.datetime, width: dt.timedelta | None = None) -> dt.datetime:
    """Return the start of the partition interval (of ``width``, default interval())
    ``moment`` falls in (UTC-aligned)."""
    width = width or interval()
    epoch = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    return epoch + ((moment - epoch) // width) * width


def convert() -> list[Partition]:
    """Partition the job table, on PostgreSQL, while workers run; return the partitions made.

    Validates the hot partition's CHECK on the table as it is (it reads the table, without
    blocking writes), then, in one short transaction that waits at most LOCK_TIMEOUT for
    its lock (retried): renames the table to the hot partition, makes the partitioned
    table in its place, attaches it (no row read), adds the overflow partition and the
    partitions of the current and the next interval (so that no finish meets the table
    without them). Then makes the partitions of the next HISTORY_PARTITIONS_AHEAD
    intervals. Does nothing but the last step if the table is partitioned already.
    """
    if connection.vendor != "postgresql":
        raise NotSupported("Partitioned history needs PostgreSQL; SQLite keeps one table.")
    if not is_partitioned():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s",
                [JOB, HOT_CHECK],
            )
            if cursor.fetchone() is None:
                locked(
                    "ALTER TABLE %s ADD CONSTRAINT %s CHECK (%s IS NOT NULL AND %s >= "
                    "'infinity'::timestamptz) NOT VALID"
                    % (JOB, HOT_CHECK, HISTORY_KEY, HISTORY_KEY)
                )
            cursor.execute("ALTER TABLE %s VALIDATE CONSTRAINT %s" % (JOB, HOT_CHECK))
        sequence, identity = partitioning.id_sequence(JOB)
        indexes = _history_indexes(JOB)
        now = start_of(clock.now())
        first = [_partition(now), _partition(now + interval())]
        locked(
            "ALTER TABLE %s RENAME TO %s" % (JOB, HOT),
            "CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            " PARTITION BY RANGE (%s)" % (JOB, HOT, HISTORY_KEY),
            "ALTER TABLE %s DROP CONSTRAINT %s" % (JOB, HOT_CHECK),
            "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('infinity') TO (MAXVALUE)"
            % (JOB, HOT),
            *_history_table(OVERFLOW, indexes),
            "ALTER TABLE %s ATTACH PARTITION %s DEFAULT" % (JOB, OVERFLOW),
            # The current interval's and the next one's partitions, before any finish
            # can see the partitioned table: a finish with none would go to the
            # overflow, and the interval could then get no partition.
            *(
                statement
                for partition in first
                for statement in (*_history_table(partition.name, indexes), _attach(partition))
            ),
            *partitioning.ids_owned_by(JOB, HOT, sequence, identity=identity),
        )
        logger.info("partitioned table=%s hot=%s", JOB, HOT)
        return first + ensure_partitions()
    return ensure_partitions()


def own_id_sequence() -> None:
    """Have the partitioned job table's id column own the sequence job ids come from, if
    a conversion before migration 0034 left them coming from the hot partition's identity
    sequence (which Django's sequence reset cannot find: see partitioning.ids_owned_by).
    Does nothing on a table that is not partitioned, or whose id column owns it already."""
    if not is_partitioned() or partitioning.id_sequence(JOB)[0] is not None:
        return
    sequence, identity = partitioning.id_sequence(HOT)
    locked(*partitioning.ids_owned_by(JOB, HOT, sequence, identity=identity))
    logger.info("job ids now from a sequence table=%s owns", JOB)


def revert() -> None:
    """Put a partitioned job table back as one table, its history kept (migration 0033's
    reverse, so that migrating further back finds the table the migrations before made).

    In one transaction: every history job is moved back into the hot partition (by
    clearing ``in_history``), which is then detached, renamed to the job table and
    freed of its CHECK, and the partitioned table is dropped with its empty partitions
    (the sequence of the ids goes on, owned by the table's id column, as a serial's).
    It locks the job table while the history moves: an operator's step, not a deploy's.
    Does nothing if the table is not partitioned.
    """
    if not is_partitioned():
        return
    sequence = partitioning.id_sequence(JOB)[0]
    locked(
        # A moved row is inserted again: its foreign keys' deferred checks would be left
        # pending, and a table with pending trigger events cannot be altered.
        "SET CONSTRAINTS ALL IMMEDIATE",
        "UPDATE %s SET in_history = false WHERE in_history" % JOB,
        # The ids' sequence would go with the partitioned table.
        *(["ALTER SEQUENCE %s OWNED BY %s.id" % (sequence, HOT)] if sequence else []),
        "ALTER TABLE %s DETACH PARTITION %s" % (JOB, HOT),
        "DROP TABLE %s" % JOB,
        "ALTER TABLE %s RENAME TO %s" % (HOT, JOB),
        "ALTER TABLE %s DROP CONSTRAINT %s" % (JOB, HOT_CHECK),
    )
    logger.info("partitioned table put back as one table=%s", JOB)


def _history_table(table: str, indexes: list[str]) -> list[str]:
    """Return the statements that make ``table``, a table for ended jobs (a history or the
    overflow partition): the hot partition's columns and CHECK constraints but its own,
    a CHECK that its jobs have ended, and ``indexes`` (from _history_indexes()).

    Rows come in through the partitioned table, whose defaults apply: it takes none. The
    CHECK lets the planner pass over it for a query of pending or running jobs (by
    constraint exclusion), so it needs none of UNFINISHED_INDEXES, each of which would
    stay empty there and cost its making and dropping each interval.
    """
    return [
        "CREATE TABLE %s (LIKE %s INCLUDING CONSTRAINTS, CONSTRAINT %s CHECK (status IN %s))"
        % (table, HOT, ENDED_CHECK, ENDED),
        "ALTER TABLE %s DROP CONSTRAINT %s" % (table, HOT_CHECK),
        *on_table(indexes, table),
    ]


def _history_indexes(source: str) -> list[str]:
    """Return the statements that make the indexes of ``source`` (the hot partition, or the
    job table before the conversion) that a table for ended jobs copies: all but
    UNFINISHED_INDEXES (see partitioning.copied_indexes)."""
    return partitioning.copied_indexes(
        source, prefixes=("scheduler_job_", JOB + "_"), skip=UNFINISHED_INDEXES
    )


def history_partitions() -> list[Partition]:
    """Return the history partitions, oldest first (not the hot nor the overflow one)."""
    return time_partitions(JOB, PARTITION_PREFIX)


def time_partitions(parent: str, prefix: str) -> list[Partition]:
    """Return the partitions of ``parent`` whose names start with ``prefix``, each of an
    interval of time, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass AND c.relname LIKE %s",
            [parent, prefix.replace("_", r"\_") + "%"],
        )
        rows = cursor.fetchall()
    partitions = []
    for name, bound in rows:
        # FOR VALUES FROM ('2026-12-05 00:00:00+00') TO ('2026-12-06 00:00:00+00')
        start, end = bound.split("'")[1], bound.split("'")[3]
        partitions.append(Partition(name, _timestamp(start), _timestamp(end)))
    return sorted(partitions, key=lambda partition: partition.start)


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC)


def ensure_partitions(
    now: dt.datetime | None = None, *, existing: list[Partition] | None = None
) -> list[Partition]:
    """Make the partitions of the current interval and the next HISTORY_PARTITIONS_AHEAD
    ones that are missing; return those made. ``existing``: history_partitions(), if the
    caller has read them."""
    start = start_of(now or clock.now())
    return _make_partitions(
        (start + step * interval() for step in range(app_settings.HISTORY_PARTITIONS_AHEAD + 1)),
        existing,
    )


def _make_partitions(
    starts: Iterable[dt.datetime], existing: list[Partition] | None = None
) -> list[Partition]:
    """Make the missing partitions of the intervals that begin at ``starts``; return them.

    Each is made as a table of its own, indexed while empty, then attached: attaching
    takes a lock that lets the claim loop go on (SHARE UPDATE EXCLUSIVE on the job
    table) and reads only the overflow partition. An interval some of whose jobs are in
    the overflow partition already gets none (attaching it would fail): retention
    deletes those rows one by one.
    """
    if existing is None:
        existing = history_partitions()
    made_before = {partition.start for partition in existing}
    made = []
    indexes: list[str] | None = None
    for begin in starts:
        if begin in made_before:
            continue
        partition = _partition(begin)
        bounds = [partition.start, partition.end]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM %s WHERE %s >= %%s AND %s < %%s)"
                % (OVERFLOW, HISTORY_KEY, HISTORY_KEY),
                bounds,
            )
            if cursor.fetchone()[0]:
                logger.warning("no partition for an interval in overflow from=%s", begin)
                continue
        if indexes is None:
            indexes = _history_indexes(HOT)
        # One transaction, one commit; the job table's lock only for the attach, at its end.
        if partitioning.make_and_attach(
            JOB, partition.name, _history_table(partition.name, indexes), _attach(partition)
        ):
            logger.info("history partition made name=%s", partition.name)
            made.append(partition)
    return made


def _partition(begin: dt.datetime) -> Partition:
    """Return the history partition of the interval that begins at ``begin`` (made or not)."""
    return time_partition(PARTITION_PREFIX, begin, interval())


def time_partition(prefix: str, begin: dt.datetime, width: dt.timedelta) -> Partition:
    """Return the partition named with ``prefix`` of the interval of ``width`` that begins
    at ``begin``."""
    return Partition(prefix + begin.strftime("%Y%m%dt%H%M"), begin, begin + width)


def _attach(partition: Partition) -> str:
    return attach_interval(JOB, partition)


def attach_interval(parent: str, partition: Partition) -> str:
    """Return the statement that attaches ``partition`` to ``parent`` for its interval."""
    return "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')" % (
        parent,
        partition.name,
        partition.start.isoformat(),
        partition.end.isoformat(),
    )


def history_to_move(since: dt.datetime | None, *, limit: int, table: str = HOT) -> int:
    """Return how many finished jobs of the hot partition (or ``table``: the job table
    before the conversion) finished at or after ``since`` (None: whenever), counted up
    to ``limit``: what move_history() would move."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s LIMIT %%s) AS left_behind"
            % (table, _LEFT_BEHIND),
            [since, since, limit],
        )
        return cursor.fetchone()[0]


#: Jobs of the hot partition that finished (before the conversion, or outside the
#: worker's finish) at or after a time, or whenever if it is NULL.
_LEFT_BEHIND = (
    "status IN %s AND (%%s::timestamptz IS NULL OR COALESCE(finished_at, created_at) >= %%s)"
    % ENDED
)


def move_history(
    since: dt.datetime | None, *, batch_size: int, limit: int | None = None
) -> Iterator[int]:
    """Move the finished jobs of the hot partition that finished at or after ``since``
    (up to ``limit`` of them; None: all) into the partitions of their intervals,
    ``batch_size`` at a time, each batch its own transaction; yield each batch's count.

    Makes the partitions of the intervals from ``since`` (or the earliest such job) on
    first. A batch locks only the rows it moves, skipping those a worker holds (SKIP
    LOCKED), and moves them as the worker's finish does: by marking them in_history.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(COALESCE(finished_at, created_at)) FROM %s WHERE %s" % (HOT, _LEFT_BEHIND),
            [since, since],
        )
        earliest = cursor.fetchone()[0]
    if earliest is None:
        return
    begin, current = start_of(earliest), start_of(clock.now())
    _make_partitions(begin + step * interval() for step in range((current - begin) // interval()))
    ensure_partitions()
    left = limit
    while left is None or left > 0:
        with database.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE %s SET in_history = true WHERE %s = 'infinity' AND id IN "
                "(SELECT id FROM %s WHERE %s LIMIT %%s FOR UPDATE SKIP LOCKED)"
                % (JOB, HISTORY_KEY, HOT, _LEFT_BEHIND),
                [since, since, batch_size if left is None else min(batch_size, left)],
            )
            moved = cursor.rowcount
        if not moved:
            return
        if left is not None:
            left -= moved
        yield moved


def drop(partition: Partition) -> bool:
    """Drop a history partition with its jobs' attempts (those of the attempt table, or,
    partitioned, of its before and overflow partitions: the others go with their own
    partitions), unlinking the occurrences and sync cursors that name its jobs (what the
    ORM's on_delete would do); return False if it was gone already (another prune run
    dropped it).

    One transaction deletes the attempts, cuts the links (looking up only rows whose job
    id is in the partition's range, read from the ends of its id index) and drops the
    table, waiting at most LOCK_TIMEOUT for the drop's lock (tried again from the start).
    No statement reads the partition's rows: the drop costs the same whatever it holds.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [partition.name])
        if cursor.fetchone()[0] is None:
            return False
        cursor.execute("SELECT min(id), max(id) FROM %s" % partition.name)
        lowest, highest = cursor.fetchone()
    statements = []
    if lowest is not None:
        within = "job_id BETWEEN %d AND %d AND job_id IN (SELECT id FROM %s)" % (
            lowest,
            highest,
            partition.name,
        )
        statements.extend(
            "DELETE FROM %s WHERE %s" % (table, within)
            for table in attempt_partitions.row_by_row_tables()
        )
        statements.extend(
            "UPDATE %s SET job_id = NULL WHERE %s" % (model._meta.db_table, within)
            for model in (ScheduleOccurrence, SyncCursor)
        )
    locked(*statements, "DROP TABLE %s" % partition.name)
    logger.info("history partition dropped name=%s", partition.name)
    return True
