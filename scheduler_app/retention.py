"""Retention: delete what is finished and old, in small batches, behind a breaker, audited.

``prune(reference_time)`` removes, for each kind with a RETENTION_*_DAYS
setting, rows in a terminal state older than ``reference_time`` minus that
many days: finished jobs (with their attempts), schedule occurrences whose
job finished, control events, finished batches (their recipients first, then
the batch with its lanes' progress), resolved alerts, stopped or lost workers'
heartbeats, dry-run report files; and it blanks the template context of
recipients of batches that finished. Nothing pending, running, scheduled,
sending or paused is ever selected: each kind names the terminal states it
may take, never the ones it must spare.

The reference time is the prune job's scheduled_for, so a run that starts
late (or again, after a crash) deletes exactly what its occurrence meant to.
Rows go in batches of PRUNE_BATCH_SIZE, each its own short transaction that
locks only the rows it deletes (SKIP LOCKED), so workers keep claiming. If
more than PRUNE_MAX_ROWS rows qualify, the run deletes nothing, records a
refusal and opens a ``prune_refused`` alert. Every run leaves a PruneRun row
and a log line.

With partitioned job history (PostgreSQL, scheduler_app.partitions), finished jobs
go with the history partitions all of whose finish times are before the cutoff,
each dropped whole (counted as ``jobs_in_partitions``, outside the breaker, which
counts rows deleted one by one); what is left in the hot and overflow partitions is
deleted row by row as above, and the hot partition's jobs that ended outside the
worker's finish within the retention move into history (``jobs_moved_to_history``).
With partitioned recipients (scheduler_app.recipient_partitions), the partitions of
ranges of batches all of whose batches with recipients finished before the cutoff are
dropped whole (``recipients_in_partitions``); the recipients of finished batches in the
before and overflow partitions are deleted row by row. With partitioned occurrences
(scheduler_app.occurrence_partitions), the partitions of intervals before the cutoff none
of whose occurrences has an unfinished job are dropped whole
(``occurrences_in_partitions``); the old occurrences of the before and overflow
partitions are deleted row by row. With partitioned attempts
(scheduler_app.attempt_partitions), the partitions of ranges of jobs all of whose jobs are
gone are dropped whole (``attempts_in_partitions``). Each real run first makes the partitions ahead.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from django.core.files.storage import default_storage
from django.db.models import Exists, OuterRef, Q, QuerySet

from scheduler_app import (
    attempt_partitions,
    clock,
    database,
    occurrence_partitions,
    partitions,
    recipient_partitions,
)
from scheduler_app.alerts.links import admin_link
from scheduler_app.alerts.memory import remember_pruned
from scheduler_app.alerts.store import open_alert
from scheduler_app.conf import app_settings
from scheduler_app.database import connection
from scheduler_app.db.postgresql.partitioning import estimated_rows
from scheduler_app.exceptions import PruneRefused
from scheduler_app.models import (
    Alert,
    ControlEvent,
    Job,
    PruneRun,
    Recipient,
    ScheduleOccurrence,
    SendBatch,
    WorkerHeartbeat,
)
from scheduler_app.registry import JobContext, task
from scheduler_app.sends.dry_run import REPORT_DIR

logger = logging.getLogger("scheduler_app.retention")

PRUNE_TASK = "scheduler_app.prune"
#: The built-in schedule's name (SCHEDULER_APP['PRUNE_SCHEDULE'] sets its cron).
PRUNE_SCHEDULE_NAME = "scheduler-prune"
#: A dry-run report's file name (the storage may add a suffix to make it unique).
REPORT_NAME = re.compile(r"batch-(?P<batch>\d+)-(?P<at>\d{8}T\d{6}Z)(_\w+)?\.txt")

FINISHED_BATCH = (SendBatch.Status.COMPLETED, SendBatch.Status.CANCELLED, SendBatch.Status.FAILED)
GONE_WORKER = (WorkerHeartbeat.Status.STOPPED, WorkerHeartbeat.Status.LOST)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kind:
    """One kind of thing the pruner removes: which rows qualify, and what is done to them."""

    name: str
    setting: str
    #: cutoff -> the rows that qualify (only terminal states, older than the cutoff).
    candidates: Callable[[dt.datetime], QuerySet]
    #: primary keys -> rows removed (deleted, or blanked).
    apply: Callable[[list[Any]], int]
    #: (cutoff, limit) -> rows removed: one statement per batch on PostgreSQL, instead of
    #: selecting the keys and letting the ORM cascade (several times slower per row).
    on_postgresql: Callable[[dt.datetime, int], int] | None = None
    #: (cutoff, limit) -> rows that qualify on PostgreSQL, when they are not candidates'.
    count_on_postgresql: Callable[[dt.datetime, int], int] | None = None
    #: cutoff -> the rows counted as qualifying, where more become candidates while the
    #: run goes than are when it counts (a batch does once its recipients have gone).
    counted: Callable[[dt.datetime], QuerySet] | None = None
    #: cutoff -> None, once the run has removed what it could: record what is done.
    afterwards: Callable[[dt.datetime], None] | None = None

    @property
    def days(self) -> float | None:
        return getattr(app_settings, self.setting)


def finished_jobs(cutoff: dt.datetime) -> QuerySet:
    """Return jobs that succeeded, failed or were cancelled before ``cutoff``."""
    return Job.objects.filter(status__in=Job.FINISHED, finished_at__lt=cutoff)


def finished_batches(cutoff: dt.datetime) -> QuerySet:
    """Return batches that completed, were cancelled or failed before ``cutoff``."""
    return SendBatch.objects.filter(
        Q(status=SendBatch.Status.COMPLETED, finished_at__lt=cutoff)
        | Q(
            status__in=(SendBatch.Status.CANCELLED, SendBatch.Status.FAILED),
            status_changed_at__lt=cutoff,
        )
    )


def _old_occurrences(cutoff: dt.datetime) -> QuerySet:
    # An occurrence whose job is unfinished stays: the overlap policy looks for it.
    old = ScheduleOccurrence.objects.filter(occurrence_at__lt=cutoff).filter(
        Q(job=None) | Q(job__status__in=Job.FINISHED)
    )
    # Those of a partition of an interval go with it, whole, once none of them stays.
    for partition in occurrence_partitions.range_partitions_before(cutoff):
        old = old.exclude(occurrence_at__gte=partition.start, occurrence_at__lt=partition.end)
    return old


def _recipients_of_finished_batches(cutoff: dt.datetime) -> QuerySet:
    return Recipient.objects.filter(batch__in=finished_batches(cutoff).values("pk"))


def _emptied_batches(cutoff: dt.datetime) -> QuerySet:
    # A batch goes once its recipients have (the kind before, in the same run): one
    # transaction never deletes a batch of a million recipients.
    return finished_batches(cutoff).exclude(Exists(Recipient.objects.filter(batch=OuterRef("pk"))))


def _batches_with_contexts(cutoff: dt.datetime) -> QuerySet:
    return finished_batches(cutoff).filter(contexts_blanked_at=None)


def _contexts_to_blank(cutoff: dt.datetime) -> QuerySet:
    # Recipients stay (their sent markers): a batch whose contexts were all blanked is
    # skipped, so a run reads only the recipients it may still blank.
    return Recipient.objects.filter(batch__in=_batches_with_contexts(cutoff).values("pk")).exclude(
        context={}
    )


def _mark_blanked_batches(cutoff: dt.datetime) -> None:
    """Record the batches none of whose recipients has a context left to blank.

    The candidates are locked first and looked at by the next statement, whose snapshot
    is taken with the locks held: a seed send adds its recipient with the batch locked
    (sends.batches.seed_send), so its seed is seen here, or clears the mark afterwards.
    """
    left = Recipient.objects.filter(batch=OuterRef("pk")).exclude(context={})
    with database.atomic():
        locked = list(
            _batches_with_contexts(cutoff).select_for_update().values_list("pk", flat=True)
        )
        SendBatch.objects.filter(pk__in=locked, contexts_blanked_at=None).exclude(
            Exists(left)
        ).update(contexts_blanked_at=clock.now())


def _delete(model: Any) -> Callable[[list[Any]], int]:
    def delete(pks: list[Any]) -> int:
        return model.objects.filter(pk__in=pks).delete()[1].get(model._meta.label, 0)

    return delete


def _table_by_table(tables: tuple[str, ...], remove: Callable[[str, int], int], limit: int) -> int:
    """Return the rows ``remove(table, limit left)`` removed from ``tables`` in turn, up
    to ``limit`` in all."""
    removed = 0
    for table in tables:
        removed += remove(table, limit - removed)
        if removed == limit:
            break
    return removed


def _prune_jobs_on_postgresql(cutoff: dt.datetime, limit: int) -> int:
    from scheduler_app.db.postgresql import prune_finished_jobs

    return _table_by_table(
        _job_tables(),
        lambda table, left: prune_finished_jobs(cutoff=cutoff, limit=left, table=table),
        limit,
    )


def _count_jobs_on_postgresql(cutoff: dt.datetime, limit: int) -> int:
    from scheduler_app.db.postgresql import count_finished_jobs

    return sum(
        count_finished_jobs(cutoff=cutoff, limit=limit, table=table) for table in _job_tables()
    )


def _prune_recipients_on_postgresql(cutoff: dt.datetime, limit: int) -> int:
    from scheduler_app.db.postgresql import prune_recipients

    return _table_by_table(
        recipient_partitions.row_by_row_tables(),
        lambda table, left: prune_recipients(
            batches=finished_batches(cutoff), limit=left, table=table
        ),
        limit,
    )


def _count_recipients_on_postgresql(cutoff: dt.datetime, limit: int) -> int:
    from scheduler_app.db.postgresql import count_recipients

    return sum(
        count_recipients(batches=finished_batches(cutoff), limit=limit, table=table)
        for table in recipient_partitions.row_by_row_tables()
    )


def _job_tables() -> tuple[str, ...]:
    """Return the tables whose finished jobs are deleted row by row: the job table, or,
    with partitioned history, its hot and overflow partitions."""
    if partitions.is_partitioned():
        return (partitions.HOT, partitions.OVERFLOW)
    return (Job._meta.db_table,)


def _blank_contexts(pks: list[Any]) -> int:
    return Recipient.objects.filter(pk__in=pks).update(context={})


KINDS = (
    Kind(
        name="jobs",
        setting="RETENTION_JOBS_DAYS",
        candidates=finished_jobs,
        apply=_delete(Job),  # their attempts go with them (ON DELETE CASCADE)
        on_postgresql=_prune_jobs_on_postgresql,
        count_on_postgresql=_count_jobs_on_postgresql,
    ),
    Kind(
        name="occurrences",
        setting="RETENTION_OCCURRENCES_DAYS",
        candidates=_old_occurrences,
        apply=_delete(ScheduleOccurrence),
    ),
    Kind(
        name="control_events",
        setting="RETENTION_CONTROL_EVENTS_DAYS",
        candidates=lambda cutoff: ControlEvent.objects.filter(at__lt=cutoff),
        apply=_delete(ControlEvent),
    ),
    Kind(
        name="recipients",
        setting="RETENTION_BATCHES_DAYS",
        candidates=_recipients_of_finished_batches,
        apply=_delete(Recipient),  # their feedback events keep the address, unlinked
        on_postgresql=_prune_recipients_on_postgresql,
        count_on_postgresql=_count_recipients_on_postgresql,
    ),
    Kind(
        name="batches",
        setting="RETENTION_BATCHES_DAYS",
        candidates=_emptied_batches,
        counted=finished_batches,
        apply=_delete(SendBatch),  # with their lanes' progress; feedback is unlinked
    ),
    Kind(
        name="recipient_contexts",
        setting="RETENTION_RECIPIENT_CONTEXT_DAYS",
        candidates=_contexts_to_blank,
        apply=_blank_contexts,
        afterwards=_mark_blanked_batches,
    ),
    Kind(
        name="workers",
        setting="RETENTION_WORKERS_DAYS",
        candidates=lambda cutoff: WorkerHeartbeat.objects.filter(
            status__in=GONE_WORKER, last_seen_at__lt=cutoff
        ),
        apply=_delete(WorkerHeartbeat),
    ),
    Kind(
        name="alerts",
        setting="RETENTION_ALERTS_DAYS",
        candidates=lambda cutoff: Alert.objects.filter(resolved_at__lt=cutoff),
        apply=_delete(Alert),
    ),
)
REPORTS = "dry_run_reports"
SETTINGS = {kind.name: kind.setting for kind in KINDS} | {REPORTS: "RETENTION_DRY_RUN_REPORTS_DAYS"}
#: The count of the finished jobs that went with whole history partitions.
PARTITIONED_JOBS = "jobs_in_partitions"
#: The count of the recipients of finished batches that went with whole partitions.
PARTITIONED_RECIPIENTS = "recipients_in_partitions"
#: The count of the old occurrences that went with whole partitions.
PARTITIONED_OCCURRENCES = "occurrences_in_partitions"
#: The count of the attempts of pruned jobs that went with whole partitions.
PARTITIONED_ATTEMPTS = "attempts_in_partitions"
#: The count of the finished jobs a run moved from the hot partition into history
#: partitions (those that ended outside the worker's finish): moved, not removed.
MOVED_JOBS = "jobs_moved_to_history"


def prune(
    reference_time: dt.datetime,
    *,
    dry_run: bool = False,
    max_rows: int | None = None,
    source: str = "command",
) -> PruneRun:
    """Prune what each kind's retention lets go, as of ``reference_time``; return the audit row.

    ``dry_run`` counts what would go and deletes nothing. ``max_rows``
    (default PRUNE_MAX_ROWS) is the breaker: more qualifying rows than that
    and the run deletes nothing, is recorded as refused and opens an alert.
    """
    max_rows = app_settings.PRUNE_MAX_ROWS if max_rows is None else max_rows
    run = PruneRun.objects.create(
        reference_time=reference_time,
        source=source,
        outcome=PruneRun.Outcome.DRY_RUN if dry_run else PruneRun.Outcome.PRUNED,
        max_rows=max_rows,
        started_at=clock.now(),
    )
    cutoffs = cutoffs_for(reference_time)
    try:
        history = History.read(cutoffs, make_ahead=not dry_run)
        whole = [
            read
            for of in PARTITIONED_KINDS
            if (read := WholePartitions.read(of, cutoffs, make_ahead=not dry_run)) is not None
        ]
        # Counted up to one past the breaker: the count costs at most max_rows index entries.
        counts = qualifying(cutoffs, limit=max_rows + 1, history=history, whole=whole)
        if dry_run:
            _finish(run, PruneRun.Outcome.DRY_RUN, counts, "")
        elif rows_one_by_one(counts) > max_rows:
            _refuse(run, counts)
        else:
            done = _remove(cutoffs, counts, max_rows, history, whole)
            _finish(run, PruneRun.Outcome.PRUNED, done, "")
    except Exception as exc:
        _finish(run, PruneRun.Outcome.FAILED, run.counts, "%s: %s" % (type(exc).__name__, exc))
        raise
    return run


def cutoffs_for(reference_time: dt.datetime) -> dict[str, dt.datetime]:
    """Return kind -> cutoff for the kinds whose retention is set (None keeps forever)."""
    cutoffs = {}
    for name, setting in SETTINGS.items():
        days = getattr(app_settings, setting)
        if days is not None:
            cutoffs[name] = reference_time - dt.timedelta(days=days)
    return cutoffs


@dataclasses.dataclass(frozen=True)
class History:
    """A run's work on partitioned job history (scheduler_app.partitions)."""

    #: The history partitions all of whose interval is before the jobs' cutoff, dropped
    #: whole (none while jobs are kept forever).
    expired: list[partitions.Partition]
    #: The hot partition's ended jobs that finished from then on move into the history
    #: partitions of their finish times: those past the jobs' cutoff are deleted, and none
    #: moves to a time before the oldest partition (which would make one for each
    #: interval back to it: ``scheduler_partition --move-history`` is for that history).
    move_since: dt.datetime

    @classmethod
    def read(cls, cutoffs: dict[str, dt.datetime], *, make_ahead: bool) -> History | None:
        """Return the run's work on the history, None if the job table is not partitioned;
        with ``make_ahead``, make the partitions ahead first (partitions.ensure_partitions)."""
        if connection.vendor != "postgresql" or not partitions.is_partitioned():
            return None
        history = partitions.history_partitions()
        if make_ahead:
            history += partitions.ensure_partitions(existing=history)
        cutoff = cutoffs.get("jobs")
        oldest = min((partition.start for partition in history), default=clock.now())
        return cls(
            expired=[p for p in history if cutoff is not None and p.end <= cutoff],
            move_since=oldest if cutoff is None else max(cutoff, oldest),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionedKind:
    """A kind whose table may be partitioned so that its rows go a partition at a time
    (recipients: scheduler_app.recipient_partitions; occurrences:
    scheduler_app.occurrence_partitions; attempts: scheduler_app.attempt_partitions)."""

    #: The kind whose cutoff applies, and the count of the rows its dropped partitions held.
    kind: str
    count: str
    is_partitioned: Callable[[], bool]
    ensure_partitions: Callable[[], Any]
    #: cutoff -> the partitions retention may drop.
    expired: Callable[[dt.datetime], list]
    #: (partition, cutoff) -> whether it was dropped (each is checked again as it goes).
    drop: Callable[[Any, dt.datetime], bool]


@dataclasses.dataclass(frozen=True)
class WholePartitions:
    """A run's partitions of one PartitionedKind to drop whole."""

    of: PartitionedKind
    #: The partitions retention may drop (none while the kind is kept forever), with the
    #: rows each holds, from the statistics (partitioning.estimated_rows).
    expired: dict[Any, int]

    @classmethod
    def read(
        cls, of: PartitionedKind, cutoffs: dict[str, dt.datetime], *, make_ahead: bool
    ) -> WholePartitions | None:
        """Return the run's partitions of ``of`` to drop, None if its table is not
        partitioned; with ``make_ahead``, make the partitions ahead first."""
        if connection.vendor != "postgresql" or not of.is_partitioned():
            return None
        if make_ahead:
            of.ensure_partitions()
        cutoff = cutoffs.get(of.kind)
        if cutoff is None:
            return cls(of, {})
        return cls(of, {p: estimated_rows([p.name]) for p in of.expired(cutoff)})

    def drop(self, cutoff: dt.datetime) -> int:
        """Drop the expired partitions (one that no longer qualifies stays); return the rows
        they held, from the statistics."""
        return sum(rows for p, rows in self.expired.items() if self.of.drop(p, cutoff))


PARTITIONED_KINDS = (
    # A partition of attempts goes once its jobs have (at a run after theirs).
    PartitionedKind(
        kind="jobs",
        count=PARTITIONED_ATTEMPTS,
        is_partitioned=attempt_partitions.is_partitioned,
        ensure_partitions=attempt_partitions.ensure_partitions,
        expired=lambda cutoff: attempt_partitions.expired(),
        drop=lambda partition, cutoff: attempt_partitions.drop(partition),
    ),
    PartitionedKind(
        kind="recipients",
        count=PARTITIONED_RECIPIENTS,
        is_partitioned=recipient_partitions.is_partitioned,
        ensure_partitions=recipient_partitions.ensure_partitions,
        expired=lambda cutoff: recipient_partitions.expired(finished_batches(cutoff)),
        drop=lambda partition, cutoff: recipient_partitions.drop(
            partition, finished_batches(cutoff)
        ),
    ),
    PartitionedKind(
        kind="occurrences",
        count=PARTITIONED_OCCURRENCES,
        is_partitioned=occurrence_partitions.is_partitioned,
        ensure_partitions=occurrence_partitions.ensure_partitions,
        expired=occurrence_partitions.expired,
        drop=lambda partition, cutoff: occurrence_partitions.drop(partition),
    ),
)


def qualifying(
    cutoffs: dict[str, dt.datetime],
    *,
    limit: int,
    history: History | None = None,
    whole: Sequence[WholePartitions] = (),
) -> dict[str, int]:
    """Return kind -> rows (or files) that qualify, each counted up to ``limit``; with
    ``history`` (the job table is partitioned), the jobs of the expired partitions as
    PARTITIONED_JOBS, from the statistics (partitioning.estimated_rows), and the ended
    jobs of the hot partition that would move into history as MOVED_JOBS; for each of
    ``whole`` (a partitioned table of recipients, occurrences or attempts), the rows of its
    expired partitions as its count (PARTITIONED_RECIPIENTS, PARTITIONED_OCCURRENCES,
    PARTITIONED_ATTEMPTS)."""
    counts = {}
    for kind in KINDS:
        if kind.name not in cutoffs:
            continue
        if kind.count_on_postgresql is not None and connection.vendor == "postgresql":
            counts[kind.name] = kind.count_on_postgresql(cutoffs[kind.name], limit)
        else:
            rows = (kind.counted or kind.candidates)(cutoffs[kind.name])
            counts[kind.name] = rows.order_by()[:limit].count()
    if history is not None:
        if "jobs" in cutoffs:
            counts[PARTITIONED_JOBS] = estimated_rows([p.name for p in history.expired])
        counts[MOVED_JOBS] = partitions.history_to_move(history.move_since, limit=limit)
    for read in whole:
        if read.of.kind in cutoffs:
            counts[read.of.count] = sum(read.expired.values())
    if REPORTS in cutoffs:
        counts[REPORTS] = len(_old_reports(cutoffs[REPORTS])[:limit])
    return counts


def _remove(
    cutoffs: dict[str, dt.datetime],
    counts: dict[str, int],
    budget: int,
    history: History | None,
    whole: list[WholePartitions],
) -> dict:
    if (
        counts.get("jobs")
        or counts.get("occurrences")
        or (history and history.expired)
        # Whatever the statistics say they hold.
        or any(read.expired for read in whole if read.of.count == PARTITIONED_OCCURRENCES)
    ):
        # Before anything goes: the absent and suspicious-success rules still need it.
        remember_pruned(cutoffs.get("jobs"), cutoffs.get("occurrences"))
    done: dict[str, int] = {}
    if history is not None and "jobs" in cutoffs:
        for partition in history.expired:
            partitions.drop(partition)
        # Counted by qualifying() for the same cutoff: the drops read no rows.
        done[PARTITIONED_JOBS] = counts[PARTITIONED_JOBS]
    for read in whole:
        if read.of.kind in cutoffs:
            done[read.of.count] = read.drop(cutoffs[read.of.kind])
    for kind in KINDS:
        if kind.name in cutoffs:
            left = budget - rows_one_by_one(done)
            # None qualified when counted: no batch to look for (rows whose time is past
            # the cutoff and that commit later go next run).
            done[kind.name] = _remove_rows(
                kind, cutoffs[kind.name], left if counts[kind.name] else 0
            )
    if history is not None:
        done[MOVED_JOBS] = _move_to_history(history.move_since, counts[MOVED_JOBS], budget)
    if REPORTS in cutoffs:
        done[REPORTS] = _remove_reports(cutoffs[REPORTS], budget - rows_one_by_one(done))
    return done


#: The counts of rows that go with whole partitions, or are moved: outside the breaker.
NOT_ONE_BY_ONE = (
    PARTITIONED_JOBS,
    MOVED_JOBS,
    PARTITIONED_RECIPIENTS,
    PARTITIONED_OCCURRENCES,
    PARTITIONED_ATTEMPTS,
)


def rows_one_by_one(counts: dict[str, int]) -> int:
    """Return the rows (and files) of ``counts`` removed one by one: what the breaker
    counts, all but the rows that go with whole partitions and the jobs moved
    (NOT_ONE_BY_ONE)."""
    return sum(counts.values()) - sum(counts.get(name, 0) for name in NOT_ONE_BY_ONE)


def _move_to_history(since: dt.datetime, counted: int, limit: int) -> int:
    """Move up to ``limit`` ended jobs of the hot partition that finished at or after
    ``since`` into the partitions of their finish times, where retention drops them
    whole; return how many. They ended outside the worker's finish (cancelled before
    they ran, failed by the lease rescue, a finish of a worker of a release before).
    Nothing is looked for if ``counted`` is 0."""
    if not counted:
        return 0
    size = app_settings.PRUNE_BATCH_SIZE
    moved = sum(partitions.move_history(since, batch_size=size, limit=limit))
    if moved:
        logger.info("moved ended jobs into history partitions jobs=%s", moved)
    return moved


def _remove_rows(kind: Kind, cutoff: dt.datetime, budget: int) -> int:
    """Remove ``kind``'s qualifying rows in batches, each in its own transaction."""
    removed = 0
    size = app_settings.PRUNE_BATCH_SIZE
    while removed < budget:
        with database.atomic():
            pruned = _remove_batch(kind, cutoff, min(size, budget - removed))
        if not pruned:
            break
        logger.debug("pruned a batch kind=%s rows=%s", kind.name, pruned)
        removed += pruned
    if removed:
        logger.info("pruned kind=%s rows=%s cutoff=%s", kind.name, removed, cutoff.isoformat())
    if kind.afterwards is not None:
        kind.afterwards(cutoff)
    return removed


def _remove_batch(kind: Kind, cutoff: dt.datetime, limit: int) -> int:
    if kind.on_postgresql is not None and connection.vendor == "postgresql":
        return kind.on_postgresql(cutoff, limit)
    # FOR UPDATE re-checks the terminal state on the locked row; SKIP LOCKED leaves a
    # row some worker holds (e.g. a retry being scheduled) for the next run.
    pks = list(
        kind.candidates(cutoff)
        .order_by()
        .select_for_update(skip_locked=True, of=("self",))
        .values_list("pk", flat=True)[:limit]
    )
    return kind.apply(pks) if pks else 0


def _old_reports(cutoff: dt.datetime) -> list[str]:
    """Return dry-run report paths written before ``cutoff``, except a live batch's latest."""
    try:
        _, names = default_storage.listdir(REPORT_DIR)
    except FileNotFoundError:
        return []
    old = {}
    for name in sorted(names):
        match = REPORT_NAME.fullmatch(name)
        if match is None:
            continue  # not ours: leave it
        written = dt.datetime.strptime(match["at"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
        if written < cutoff:
            old["%s/%s" % (REPORT_DIR, name)] = int(match["batch"])
    kept = set(
        SendBatch.objects.filter(dry_run_report__in=list(old))
        .exclude(status__in=FINISHED_BATCH)
        .values_list("dry_run_report", flat=True)
    )
    return [path for path in old if path not in kept]


def _remove_reports(cutoff: dt.datetime, budget: int) -> int:
    paths = _old_reports(cutoff)[:budget]
    for path in paths:
        default_storage.delete(path)
    SendBatch.objects.filter(status__in=FINISHED_BATCH, dry_run_report__in=paths).update(
        dry_run_report=""
    )
    if paths:
        logger.info("pruned kind=%s files=%s cutoff=%s", REPORTS, len(paths), cutoff.isoformat())
    return len(paths)


def _finish(run: PruneRun, outcome: str, counts: dict[str, int], detail: str) -> None:
    run.outcome, run.counts, run.detail, run.finished_at = outcome, counts, detail, clock.now()
    run.save(update_fields=["outcome", "counts", "detail", "finished_at"])
    logger.info(
        "prune run=%s outcome=%s source=%s reference=%s total=%s counts=%s%s",
        run.pk,
        outcome,
        run.source,
        run.reference_time.isoformat(),
        run.total,
        ",".join("%s:%s" % item for item in sorted(counts.items())),
        " detail=%s" % detail if detail else "",
    )


def _refuse(run: PruneRun, counts: dict[str, int]) -> None:
    detail = "more than PRUNE_MAX_ROWS (%s) rows qualify (%s): nothing deleted." % (
        run.max_rows,
        ", ".join("%s %s" % (count, name) for name, count in sorted(counts.items()) if count),
    )
    _finish(run, PruneRun.Outcome.REFUSED, counts, detail)
    logger.error("prune refused run=%s %s", run.pk, detail)
    open_alert(**refusal_finding(run))


def refusal_finding(run: PruneRun | None = None) -> dict[str, Any] | None:
    """Return the alert fields for a refused prune, if the latest real run refused."""
    if run is None:
        run = PruneRun.objects.exclude(outcome=PruneRun.Outcome.DRY_RUN).first()
        if run is None or run.outcome != PruneRun.Outcome.REFUSED:
            return None
    return {
        "kind": Alert.Kind.PRUNE_REFUSED,
        "subject": "retention",
        "summary": "Prune refused: %s Check the counts (scheduler_prune --dry-run), then "
        "raise PRUNE_MAX_ROWS or run scheduler_prune --max-rows N." % run.detail,
        "numbers": {"counts": run.counts, "max_rows": run.max_rows},
        "admin_url": admin_link("scheduler_app_prunerun_change", run.pk),
    }


@task(name=PRUNE_TASK, max_attempts=1)
def prune_task(job: JobContext) -> dict[str, Any]:
    """The built-in schedule's task: prune as of the occurrence's scheduled time."""
    if app_settings.PRUNE_SCHEDULE is None:
        logger.info("prune skipped: PRUNE_SCHEDULE is None job=%s", job.job_id)
        return {"skipped": "PRUNE_SCHEDULE is None"}
    run = prune(job.scheduled_for, source="job:%s" % job.job_id)
    if run.outcome == PruneRun.Outcome.REFUSED:
        raise PruneRefused(run.detail)
    return {"run": run.pk, "counts": run.counts}


def builtin_schedule() -> dict[str, dict[str, Any]]:
    """Return the built-in prune schedule's declaration, or {} when PRUNE_SCHEDULE is None."""
    cron = app_settings.PRUNE_SCHEDULE
    if cron is None:
        return {}
    return {PRUNE_SCHEDULE_NAME: {"task": PRUNE_TASK, "cron": cron, "timezone": "UTC"}}
