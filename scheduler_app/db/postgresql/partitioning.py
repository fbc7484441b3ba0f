"""The DDL that partitioned tables share (job history: scheduler_app.partitions; recipients:
scheduler_app.recipient_partitions; schedule occurrences: scheduler_app.occurrence_partitions):
maintenance statements that wait briefly for their locks, a table partitioned in place and
put back, the ids' sequence, copied indexes, and row counts from the statistics."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import IntegrityError, OperationalError

from scheduler_app import database
from scheduler_app.conf import app_settings
from scheduler_app.database import connection

logger = logging.getLogger("scheduler_app.partitions")

#: How long a DDL statement on a busy table may wait for its lock: the workers'
#: statements queue behind a waiting one. A maintenance step that times out is retried.
LOCK_TIMEOUT = "500ms"
LOCK_TRIES = 20
T = TypeVar("T")

#: Where copied_indexes() statements name their table (not a valid identifier).
TABLE_PLACEHOLDER = "<table>"


@dataclasses.dataclass(frozen=True)
class IdRange:
    """A partition of the rows whose key (their owner's id) is in [first, end)."""

    name: str
    first: int
    end: int


#: FOR VALUES FROM ('12') TO ('20'), or FROM (MINVALUE) TO ('12')
_BOUNDS = re.compile(r"FROM \('?(\w+)'?\) TO \('?(\w+)'?\)")


def id_ranges(parent: str, prefix: str) -> list[IdRange]:
    """Return the partitions of ``parent`` whose names start with ``prefix``, each of a
    range of ids, lowest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [parent],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        if name.startswith(prefix):
            first, end = _BOUNDS.search(bound).groups()
            found.append(IdRange(name, int(first), int(end)))
    return sorted(found, key=lambda partition: partition.first)


def upper_bound(partition: str) -> str:
    """Return the end of ``partition``'s range as PostgreSQL shows it (an id, or a
    timestamp): its values are below it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE oid = %s::regclass",
            [partition],
        )
        # FOR VALUES FROM (MINVALUE) TO ('12'), or TO ('2026-12-12 00:00:00+00')
        return re.search(r"TO \('?([^')]+)'?\)", cursor.fetchone()[0]).group(1)


def is_partitioned(table: str) -> bool:
    """Return whether ``table`` is a partitioned table (always False on SQLite)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = %s::regclass)",
            [table],
        )
        return cursor.fetchone()[0]


def locked(*statements: str) -> None:
    """Run ``statements`` in one transaction that waits at most LOCK_TIMEOUT for a lock;
    try again (LOCK_TRIES in all) while a lock is what it waited for."""

    def steps(cursor) -> None:
        for statement in statements:
            cursor.execute(statement)

    locked_steps(steps)


def locked_steps(steps: Callable[[Any], T]) -> T:
    """Return ``steps(cursor)`` run in one transaction that waits at most LOCK_TIMEOUT for
    a lock; try again from the start (LOCK_TRIES in all) while a lock is what it waited
    for."""
    for attempt in range(1, LOCK_TRIES + 1):
        try:
            with database.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '%s'" % LOCK_TIMEOUT)
                return steps(cursor)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03" or attempt == LOCK_TRIES:
                raise
            logger.warning("partition maintenance waited for a lock, trying again: %s", exc)
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")  # the last try returns or raises


@contextlib.contextmanager
def converting(table: str, check: str, condition: str) -> Iterator[None]:
    """Give ``table`` the valid CHECK ``check`` of ``condition`` (validated_check) for the
    conversion in the block, which attaches the table as the partition of the rows the
    CHECK bounds; if the validation or the block fails, the CHECK goes again: left on a
    table that stays one table, it would refuse every row past its bound some day."""
    try:
        validated_check(table, check, condition)
        yield
    except BaseException:
        drop = "ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s" % (table, check)
        try:
            locked(drop)
        except Exception:  # the lock the conversion could not have either: say so
            logger.error("the conversion's CHECK is left: run %s;", drop)
        raise


def foreign_keys(source: str) -> list[str]:
    """Return the statements that give another table (TABLE_PLACEHOLDER, as
    copied_indexes() names it) the foreign keys of ``source``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype = 'f' ORDER BY conname",
            [source],
        )
        definitions = [row[0] for row in cursor.fetchall()]
    return [
        "ALTER TABLE %s ADD CONSTRAINT %s_fk%d %s"
        % (TABLE_PLACEHOLDER, TABLE_PLACEHOLDER, number, definition)
        for number, definition in enumerate(definitions, start=1)
    ]


def in_place_of(parent: str, before: str, check: str, key: str, bound: str) -> list[str]:
    """Return the statements, run in one transaction, that rename the table ``parent`` to
    ``before``, make a table partitioned by range of ``key`` in its place with its columns,
    defaults and CHECK constraints but ``check``, and attach ``before`` as the partition
    of the keys below ``bound`` (an SQL literal), which ``check`` says of all its rows,
    validated: no row is read."""
    return [
        "ALTER TABLE %s RENAME TO %s" % (parent, before),
        "CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        " PARTITION BY RANGE (%s)" % (parent, before, key),
        "ALTER TABLE %s DROP CONSTRAINT %s" % (parent, check),
        "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (MINVALUE) TO (%s)"
        % (parent, before, bound),
    ]


def put_back(parent: str, before: str, check: str) -> None:
    """Put the partitioned table ``parent`` back as one table, its rows kept: the table
    in_place_of() made of it.

    In one transaction: ``before`` is detached and freed of ``check``, every other
    partition's rows are copied into it, ``parent`` is dropped with its partitions, and
    ``before`` is renamed to ``parent`` (the ids' sequence goes on, owned by its id
    column). It locks ``parent`` while the rows move: an operator's step, not a deploy's.
    """
    sequence = id_sequence(parent)[0]
    locked(
        "SET CONSTRAINTS ALL IMMEDIATE",
        *(["ALTER SEQUENCE %s OWNED BY %s.id" % (sequence, before)] if sequence else []),
        "ALTER TABLE %s DETACH PARTITION %s" % (parent, before),
        "ALTER TABLE %s DROP CONSTRAINT %s" % (before, check),
        "INSERT INTO %s SELECT * FROM %s" % (before, parent),
        "DROP TABLE %s" % parent,
        "ALTER TABLE %s RENAME TO %s" % (before, parent),
    )
    logger.info("partitioned table put back as one table=%s", parent)


def next_id(table: str) -> int:
    """Return the id the next row of ``table`` gets from its sequence (or a later one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value + is_called::int FROM %s" % id_sequence(table)[0])
        return cursor.fetchone()[0]


def ids_past(table: str, bound: int) -> str:
    """Return the statement that moves ``table``'s ids on to ``bound`` if they are below."""
    sequence = id_sequence(table)[0]
    return "SELECT setval('%s', %d) FROM %s WHERE last_value < %d" % (
        sequence,
        bound - 1,
        sequence,
        bound - 1,
    )


def id_ranges_ahead(
    overflow: str, key: str, *, made: list[IdRange], floor: int, next_id: int, width: int
) -> list[tuple[int, int]]:
    """Return (first, end) of the ranges of ``width`` ids to make ahead of ``next_id``,
    HISTORY_PARTITIONS_AHEAD of the width past the next one's.

    They start where the last one ``made`` ends (``floor`` if none), or, if that is less
    than a width past the next id (maintenance fell behind), a width past it, and past the
    keys in the ``overflow`` partition: those in between go to the overflow."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(max(%s) + 1, 0) FROM %s" % (key, overflow))
        past_overflow = cursor.fetchone()[0]
    start = max(made[-1].end if made else floor, next_id + width, past_overflow)
    end = next_id + (app_settings.HISTORY_PARTITIONS_AHEAD + 1) * width
    return [(first, first + width) for first in range(start, end, width)]


def drop_partition(
    parent: str,
    partition: str,
    *,
    needed: Callable[[], bool],
    before: Callable[[Any], None] | None = None,
) -> bool:
    """Drop ``partition`` of ``parent``; return False if it was gone already or
    ``needed()`` says it is needed now.

    One transaction takes ``parent``'s lock (at most LOCK_TIMEOUT of waiting, tried again
    from the start), so that nothing is written to it meanwhile, asks ``needed()`` again,
    runs ``before(cursor)`` (what refers to its rows) and drops the table."""

    def steps(cursor) -> bool:
        cursor.execute("SELECT to_regclass(%s)", [partition])
        if cursor.fetchone()[0] is None:
            return False
        # The partitioned table first, as every statement on it locks it before a partition.
        cursor.execute("LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE" % parent)
        if needed():
            return False
        if before is not None:
            before(cursor)
        cursor.execute("DROP TABLE %s" % partition)
        return True

    dropped = locked_steps(steps)
    if dropped:
        logger.info("partition dropped name=%s", partition)
    return dropped


def attach_id_range(parent: str, partition: IdRange) -> str:
    """Return the statement that attaches ``partition`` to ``parent`` for its ids."""
    return "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)" % (
        parent,
        partition.name,
        partition.first,
        partition.end,
    )


def make_id_ranges(
    parent: str,
    key: str,
    overflow: tuple[str, str],
    ranges: list[IdRange],
    make: Callable[[str], list[str]],
) -> list[IdRange]:
    """Make ``ranges``, consecutive partitions of ``parent`` by ``key``, as tables of their
    own with the statements ``make(name)`` (indexed while empty), each then attached
    (SHARE UPDATE EXCLUSIVE on ``parent``: writers go on); return those made.

    Attaching would also read the whole overflow partition, ``overflow`` = (its name, a
    CHECK's name), with its lock held: a CHECK that keeps the ranges out of it, validated
    first without blocking its writes, spares that read, and goes afterwards. A row of
    those ranges written into the overflow meanwhile fails it: the ranges wait for the
    next run.
    """
    table, check = overflow
    made: list[IdRange] = []
    try:
        validated_check(
            table, check, "%s < %d OR %s >= %d" % (key, ranges[0].first, key, ranges[-1].end)
        )
        for partition in ranges:
            attach = attach_id_range(parent, partition)
            if make_and_attach(parent, partition.name, make(partition.name), attach):
                logger.info("partition made name=%s", partition.name)
                made.append(partition)
    except IntegrityError:
        logger.warning("partitions not made: rows written past the partitions table=%s", parent)
    finally:
        locked("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s" % (table, check))
    return made


def make_and_attach(parent: str, table: str, make: list[str], attach: str) -> bool:
    """Make ``table`` with the statements ``make`` and attach it to ``parent`` with
    ``attach``, in one transaction (see locked_steps); return False, making nothing, if
    another maintenance run attached it meanwhile. Runs making ``parent``'s partitions take
    turns (an advisory lock until commit); a table of that name left unattached (a try cut
    short) is dropped first."""

    def steps(cursor) -> bool:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", ["scheduler_app.partitions:" + parent]
        )
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(%s)),"
            " to_regclass(%s) IS NOT NULL",
            [table, table],
        )
        attached, exists = cursor.fetchone()
        if attached:
            return False
        if exists:
            cursor.execute("DROP TABLE %s" % table)
        for statement in (*make, attach):
            cursor.execute(statement)
        return True

    return locked_steps(steps)


def validated_check(table: str, name: str, condition: str) -> None:
    """Give ``table`` a valid CHECK ``name`` of ``condition`` (in place of one so named):
    added unvalidated in a short locked transaction, then validated, which reads the table
    without blocking its writes. A partition that a CHECK keeps out of a range is attached
    to it without a read of its rows under the lock (PostgreSQL proves it from the CHECK)."""
    locked(
        "ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s" % (table, name),
        "ALTER TABLE %s ADD CONSTRAINT %s CHECK (%s) NOT VALID" % (table, name, condition),
    )
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE %s VALIDATE CONSTRAINT %s" % (table, name))


def id_sequence(table: str) -> tuple[str | None, bool]:
    """Return (the sequence ``table``'s id column owns, if any; whether it is an identity
    column)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_serial_sequence(%s, 'id'), attidentity <> '' FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attname = 'id'",
            [table, table],
        )
        return cursor.fetchone()


def ids_owned_by(parent: str, partition: str, sequence: str, *, identity: bool) -> list[str]:
    """Return the statements, run once ``partition`` (the table as migrate made it) is
    attached to ``parent``, after which ids come from a sequence ``parent``'s id column
    owns, at ``sequence``'s value, named as migrate names an identity column's.

    Django resets a table's sequence (loaddata, sqlsequencereset, flush) through
    pg_get_serial_sequence() of its id column; the table as migrate made it draws ids
    from an identity sequence, which no other table's column can own. So, on the
    partition's identity column: a new sequence at the identity's value becomes the
    default of both tables, the identity (and its sequence) goes, and the new sequence
    takes the name. A plain sequence (a table put back as one) is just re-owned.
    """
    if not identity:
        return ["ALTER SEQUENCE %s OWNED BY %s.id" % (sequence, parent)]
    name = parent + "_id_seq"
    new = name + "_new"
    return [
        "CREATE SEQUENCE %s AS bigint" % new,
        "SELECT setval('%s', last_value, is_called) FROM %s" % (new, sequence),
        "ALTER TABLE ONLY %s ALTER COLUMN id SET DEFAULT nextval('%s'::regclass)" % (parent, new),
        "ALTER TABLE %s ALTER COLUMN id DROP IDENTITY" % partition,
        "ALTER TABLE %s ALTER COLUMN id SET DEFAULT nextval('%s'::regclass)" % (partition, new),
        "ALTER SEQUENCE %s RENAME TO %s" % (new, name),
        "ALTER SEQUENCE %s OWNED BY %s.id" % (name, parent),
    ]


def copied_indexes(source: str, *, prefixes: tuple[str, ...], skip=frozenset()) -> list[str]:
    """Return the statements that make the indexes of ``source`` but those named in
    ``skip`` on another table, which they name TABLE_PLACEHOLDER: each index named as
    CREATE TABLE ... LIKE names it, the table's name and what the source's says after
    the first of ``prefixes`` it starts with."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid), pg_get_constraintdef(con.oid)"
            " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid"
            " AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u')"
            " WHERE i.indrelid = %s::regclass ORDER BY c.relname",
            [source],
        )
        rows = cursor.fetchall()
    indexes = []
    for name, definition, constraint in rows:
        if name in skip:
            continue
        suffix = next(
            (name.removeprefix(prefix) for prefix in prefixes if name.startswith(prefix)), name
        )
        own = "%s_%s" % (TABLE_PLACEHOLDER, suffix)
        if constraint:  # the primary key, or a unique constraint
            statement = "ALTER TABLE %s ADD CONSTRAINT %s %s" % (TABLE_PLACEHOLDER, own, constraint)
        else:  # CREATE [UNIQUE] INDEX name ON schema.table USING ...
            head, _, using = definition.partition(" USING ")
            statement = "%s INDEX %s ON %s USING %s" % (
                head.split(" INDEX ")[0],
                own,
                TABLE_PLACEHOLDER,
                using,
            )
        indexes.append(statement)
    return indexes


def partition_like(
    table: str, before: str, check: str, copied: list[str], options: str = ""
) -> list[str]:
    """Return the statements that make ``table``, an empty partition: ``before``'s columns
    and CHECK constraints but its bound ``check``, stored WITH ``options`` (if any), and
    ``copied`` (from copied_indexes() or foreign_keys())."""
    return [
        "CREATE TABLE %s (LIKE %s INCLUDING CONSTRAINTS)%s"
        % (table, before, " WITH (%s)" % options if options else ""),
        "ALTER TABLE %s DROP CONSTRAINT %s" % (table, check),
        *on_table(copied, table),
    ]


def on_table(statements: list[str], table: str) -> list[str]:
    """Return ``statements`` (from copied_indexes()) for ``table``."""
    return [statement.replace(TABLE_PLACEHOLDER, table) for statement in statements]


def estimated_rows(tables: list[str]) -> int:
    """Return how many rows ``tables`` hold, from PostgreSQL's statistics of each
    (``pg_class.reltuples``, which autovacuum keeps: exact after a VACUUM that read every
    page, an estimate after an ANALYZE), counted for one that has none yet (never
    vacuumed nor analyzed). Retention's audit figure for what a drop removes: it does
    not read the rows, so a drop costs the same whatever it holds."""
    rows = 0
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
            estimate = cursor.fetchone()[0]
            if estimate < 0:
                cursor.execute("SELECT count(*) FROM %s" % table)
                estimate = cursor.fetchone()[0]
            rows += round(estimate)
    return rows
