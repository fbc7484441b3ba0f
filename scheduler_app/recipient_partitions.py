"""Recipients partitioned by batch on PostgreSQL: a finished send's markers dropped whole.

After ``convert()`` (migration 0035 on a new install, ``manage.py scheduler_partition``
on one whose recipient table holds rows) the recipient table is partitioned by range
over ``batch_id``, so that all of a batch's recipients are in one partition:

- ``scheduler_app_recipient_before``: the table as it was, renamed, with its indexes and
  constraints: the recipients of the batches created before the conversion (and of
  those created while it ran: see CONVERSION_MARGIN).
- ``scheduler_app_recipient_p<first batch id>``: the recipients of a range of batch ids,
  made ahead (by each prune run, and the command), each as wide as the batches created
  in the last HISTORY_PARTITION_MINUTES (at least one), HISTORY_PARTITIONS_AHEAD of them,
  while RETENTION_BATCHES_DAYS is set: kept for ever, they would only add up.
- ``scheduler_app_recipient_overflow``, the DEFAULT partition: the recipients of batches
  past the partitions made (maintenance fell behind a burst of new batches, or batches
  are kept for ever), and of batches frozen after their range's partition went.

A batch's unique recipient keys hold within its partition, so across the table. Every
statement of a lane names its batch, so the planner reads that one partition. Retention
(RETENTION_BATCHES_DAYS) drops a partition whole once no new batch can fall in its range
and every batch with recipients in it finished before the cutoff (``expired()``); the
recipients of finished batches in the before and overflow partitions go row by row.
SQLite, and PostgreSQL until converted, keep one table; the ORM sees the same rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from django.db.models import Exists, OuterRef, QuerySet

from scheduler_app import clock, database
from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db.postgresql import partitioning
from scheduler_app.db.postgresql.partitioning import locked
from scheduler_app.models import FeedbackEvent, Recipient, SendBatch

logger = logging.getLogger("scheduler_app.partitions")

RECIPIENT = Recipient._meta.db_table
BATCH = SendBatch._meta.db_table
BEFORE = RECIPIENT + "_before"
OVERFLOW = RECIPIENT + "_overflow"
PARTITION_PREFIX = RECIPIENT + "_p"
#: The before partition's bound as a CHECK, validated before the conversion attaches the
#: table, so that attaching it reads no row (PostgreSQL proves it from the CHECK).
BEFORE_CHECK = "scheduler_recipient_before"
#: The overflow partition's CHECK while partitions are attached (see ensure_partitions).
OVERFLOW_CHECK = "scheduler_recipient_overflow_out"
#: Batch ids left to the before partition past the last one handed out when the
#: conversion began: batches created while it validates BEFORE_CHECK freeze there. The
#: batch ids' sequence then skips to the first partition's (ids are not dense anyway).
CONVERSION_MARGIN = 10_000


class NotSupported(Exception):
    """Partitioned recipients need PostgreSQL."""


#: One partition of recipients: its table and the batch ids it holds, [first, end).
Partition = partitioning.IdRange


def is_partitioned() -> bool:
    """Return whether the recipient table is partitioned (always False on SQLite)."""
    return partitioning.is_partitioned(RECIPIENT)


def convert() -> list[Partition]:
    """Partition the recipient table, on PostgreSQL, while workers send; return the
    partitions made.

    Validates the before partition's CHECK on the table as it is (it reads the table,
    without blocking writes), then, in one short transaction that waits at most
    LOCK_TIMEOUT for its lock (retried): renames the table to the before partition,
    makes the partitioned table in its place, attaches it (no row read), adds the
    overflow partition and the first one (while RETENTION_BATCHES_DAYS is set), and
    moves the batch ids past the before partition's. Then makes the partitions ahead.
    Does nothing but the last step if the table is partitioned already.
    """
    if connection.vendor != "postgresql":
        raise NotSupported("Partitioned recipients need PostgreSQL; SQLite keeps one table.")
    if is_partitioned():
        return ensure_partitions()
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM %s)" % RECIPIENT)
        margin = CONVERSION_MARGIN if cursor.fetchone()[0] else 0
    bound = partitioning.next_id(BATCH) + margin
    with partitioning.converting(
        RECIPIENT, BEFORE_CHECK, "batch_id IS NOT NULL AND batch_id < %d" % bound
    ):
        sequence, identity = partitioning.id_sequence(RECIPIENT)
        shape = _shape(RECIPIENT)
        first = [_partition(bound, _width())] if _kept_for_a_time() else []
        locked(
            *partitioning.in_place_of(RECIPIENT, BEFORE, BEFORE_CHECK, "batch_id", str(bound)),
            *_table(OVERFLOW, shape),
            "ALTER TABLE %s ATTACH PARTITION %s DEFAULT" % (RECIPIENT, OVERFLOW),
            *(statement for p in first for statement in (*_table(p.name, shape), _attach(p))),
            *partitioning.ids_owned_by(RECIPIENT, BEFORE, sequence, identity=identity),
            # New batches' recipients go to the partitions, past the before partition's ids.
            *([partitioning.ids_past(BATCH, bound)] if margin else []),
        )
    logger.info("partitioned table=%s before=%s", RECIPIENT, BEFORE)
    return [*first, *ensure_partitions()]


def revert() -> None:
    """Put a partitioned recipient table back as one table, its rows kept (migration
    0035's reverse: see partitioning.put_back). Does nothing if the table is not
    partitioned."""
    if is_partitioned():
        partitioning.put_back(RECIPIENT, BEFORE, BEFORE_CHECK)


@dataclasses.dataclass(frozen=True)
class _Shape:
    """What a new partition copies of the table as it was: its indexes and storage
    parameters (the recipient table's fillfactor). Not its foreign key to the batch: each
    partition's would lock the batch table to be made and dropped, behind every batch a
    transaction changes (the ORM's on_delete deletes a batch's recipients)."""

    indexes: list[str]
    options: str


def _shape(source: str) -> _Shape:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [source])
        options = ", ".join(cursor.fetchone()[0] or [])
    indexes = partitioning.copied_indexes(source, prefixes=("scheduler_recipient_", source + "_"))
    return _Shape(indexes, options)


def _table(table: str, shape: _Shape) -> list[str]:
    """Return the statements that make ``table``, an empty partition: the before
    partition's columns and CHECK constraints but its bound, and ``shape``."""
    return partitioning.partition_like(table, BEFORE, BEFORE_CHECK, shape.indexes, shape.options)


def _attach(partition: Partition) -> str:
    return partitioning.attach_id_range(RECIPIENT, partition)


def _partition(first: int, width: int) -> Partition:
    return Partition(PARTITION_PREFIX + str(first), first, first + width)


def _kept_for_a_time() -> bool:
    """Return whether finished batches' recipients are dropped some day: partitions are
    made only then (RETENTION_BATCHES_DAYS)."""
    return app_settings.RETENTION_BATCHES_DAYS is not None


def _width() -> int:
    """Return how many batch ids a new partition holds: the batches created in the last
    HISTORY_PARTITION_MINUTES, at least one."""
    since = clock.now() - dt.timedelta(minutes=app_settings.HISTORY_PARTITION_MINUTES)
    return max(1, SendBatch.objects.filter(created_at__gte=since).count())


def range_partitions() -> list[Partition]:
    """Return the partitions of ranges of batches, lowest first (not the before nor the
    overflow one)."""
    return partitioning.id_ranges(RECIPIENT, PARTITION_PREFIX)


def ensure_partitions() -> list[Partition]:
    """Make partitions ahead of the batch ids handed out, HISTORY_PARTITIONS_AHEAD of the
    current width past the next one's, while RETENTION_BATCHES_DAYS is set (else none:
    the recipients of new batches go to the overflow partition, as to one table); return
    those made.

    They start where the last one ends, or, if that is less than a width past the next
    batch id (maintenance fell behind), a width past it, and past the batches in the
    overflow partition: the batches in between freeze into the overflow partition. Each is
    made as a table of its own, indexed while empty, then attached, which takes a lock
    that lets lanes go on (SHARE UPDATE EXCLUSIVE on the recipient table). Attaching would
    also read the whole overflow partition with its lock held (no lane sending from it
    could go on meanwhile): a CHECK that keeps the new ranges out of it, validated first
    without blocking its writes, spares that read.
    """
    if not _kept_for_a_time():
        return []
    width = _width()
    ranges = [
        _partition(first, width)
        for first, _ in partitioning.id_ranges_ahead(
            OVERFLOW,
            "batch_id",
            made=range_partitions(),
            floor=0,
            next_id=partitioning.next_id(BATCH),
            width=width,
        )
    ]
    if not ranges:
        return []
    shape = _shape(BEFORE)
    return partitioning.make_id_ranges(
        RECIPIENT,
        "batch_id",
        (OVERFLOW, OVERFLOW_CHECK),
        ranges,
        lambda name: _table(name, shape),
    )


def _holds_live_batches(partition: Partition, finished: QuerySet) -> bool:
    """Return whether a batch of ``partition``'s range that is not in ``finished`` has
    frozen recipients there. A batch without any (a draft say, seed sends aside) freezes
    into the overflow partition once the range's partition is gone; its seed markers go
    with the partition."""
    live = (
        SendBatch.objects.filter(pk__gte=partition.first, pk__lt=partition.end)
        .exclude(pk__in=finished.values("pk"))
        .filter(Exists(Recipient.objects.filter(batch=OuterRef("pk"), is_seed=False)))
    )
    with database.atomic(), connection.cursor() as cursor:
        # The planner prices the look-up of a large partition's batches as if it read their
        # recipients, and would JIT-compile it (200 ms a partition) to read a row or two.
        cursor.execute("SET LOCAL jit = off")
        return live.exists()


def expired(finished: QuerySet) -> list[Partition]:
    """Return the partitions retention may drop: no batch can be created in their range
    any more, and every batch with recipients in them is in ``finished`` (the batches
    finished before the cutoff)."""
    next_id = partitioning.next_id(BATCH)
    return [
        partition
        for partition in range_partitions()
        if partition.end <= next_id and not _holds_live_batches(partition, finished)
    ]


def drop(partition: Partition, finished: QuerySet) -> bool:
    """Drop a partition with its recipients, unlinking the feedback events that name them;
    return False if it was gone already or holds a batch not in ``finished`` now.

    One transaction takes the recipient table's lock (at most LOCK_TIMEOUT of waiting,
    tried again from the start), so no freeze can add recipients meanwhile, checks the
    batches again, cuts the links (looking up only events whose recipient id is in the
    partition's range, read from the ends of its id index) and drops the table. No
    statement reads the partition's rows: the drop costs the same whatever it holds.
    """
    feedback = FeedbackEvent._meta.db_table

    def unlink_feedback(cursor) -> None:
        cursor.execute(
            f"UPDATE {feedback} AS f SET recipient_id = NULL"
            f" WHERE f.recipient_id BETWEEN (SELECT min(id) FROM {partition.name})"
            f" AND (SELECT max(id) FROM {partition.name})"
            f" AND EXISTS (SELECT 1 FROM {partition.name} AS r WHERE r.id = f.recipient_id)"
        )

    return partitioning.drop_partition(
        RECIPIENT,
        partition.name,
        needed=lambda: _holds_live_batches(partition, finished),
        before=unlink_feedback,
    )


def row_by_row_tables() -> tuple[str, ...]:
    """Return the tables whose recipients retention deletes row by row: the recipient
    table, or, partitioned, its before and overflow partitions."""
    return (BEFORE, OVERFLOW) if is_partitioned() else (RECIPIENT,)
