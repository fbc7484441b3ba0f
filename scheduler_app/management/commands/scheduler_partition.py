"""manage.py scheduler_partition: put finished jobs and schedule occurrences in time
partitions, job attempts in partitions of ranges of jobs, and recipients in partitions of
ranges of batches (PostgreSQL)."""

from __future__ import annotations

import argparse
import datetime as dt
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduler_app import (
    attempt_partitions,
    clock,
    occurrence_partitions,
    partitions,
    recipient_partitions,
)
from scheduler_app.bounds import positive_int
from scheduler_app.conf import app_settings
from scheduler_app.db.postgresql.partitioning import IdRange
from scheduler_app.management.database import database_ready
from scheduler_app.retention import cutoffs_for


class Command(BaseCommand):
    help = (
        "Partition the job table so that retention drops finished jobs a partition at a "
        "time, the recipient table so that it drops finished batches' recipients a "
        "partition at a time, the job attempt table so that it drops pruned jobs' attempts "
        "a partition at a time, and the schedule occurrence table so that it drops old "
        "occurrences a partition at a time (PostgreSQL; workers may run meanwhile), and make the "
        "partitions ahead (HISTORY_PARTITIONS_AHEAD). Run again, it makes only missing "
        "partitions. "
        "--move-history then moves the jobs that finished before into partitions too."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be done; change nothing."
        )
        parser.add_argument(
            "--move-history",
            action="store_true",
            help="Also move the finished jobs left in the hot partition (those within "
            "RETENTION_JOBS_DAYS; retention deletes older ones) into partitions, in batches.",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int("PRUNE_BATCH_SIZE"),
            metavar="N",
            help="Jobs one --move-history transaction moves. Default: PRUNE_BATCH_SIZE.",
        )
        parser.add_argument(
            "--max-rows",
            type=positive_int("PRUNE_MAX_ROWS"),
            metavar="N",
            help="The breaker: --move-history refuses if more jobs than this would move. "
            "Default: PRUNE_MAX_ROWS.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        database_ready()
        try:
            converted = partitions.is_partitioned()
            recipients_converted = recipient_partitions.is_partitioned()
            occurrences_converted = occurrence_partitions.is_partitioned()
            attempts_converted = attempt_partitions.is_partitioned()
            if options["dry_run"]:
                self._describe(converted, options)
                self._describe_recipients(recipients_converted)
                self._describe_occurrences(occurrences_converted)
                self._describe_attempts(attempts_converted)
                return
            started = time.monotonic()
            made = partitions.convert()
            recipients_made = recipient_partitions.convert()
            occurrences_made = occurrence_partitions.convert()
            attempts_made = attempt_partitions.convert()
        except (
            partitions.NotSupported,
            recipient_partitions.NotSupported,
            occurrence_partitions.NotSupported,
            attempt_partitions.NotSupported,
        ) as exc:
            raise CommandError(str(exc)) from exc
        if not converted:
            self.stdout.write("The job table is partitioned; its rows are in %s." % partitions.HOT)
        if not recipients_converted:
            self.stdout.write(
                "The recipient table is partitioned; its rows are in %s."
                % recipient_partitions.BEFORE
            )
        if not occurrences_converted:
            self.stdout.write(
                "The schedule occurrence table is partitioned; its rows are in %s."
                % occurrence_partitions.BEFORE
            )
        if not attempts_converted:
            self.stdout.write(
                "The job attempt table is partitioned; its rows are in %s."
                % attempt_partitions.BEFORE
            )
        for partition in recipients_made:
            self.stdout.write("made %s" % self._ids_shown(partition, "batches"))
        for partition in attempts_made:
            self.stdout.write("made %s" % self._ids_shown(partition, "jobs"))
        for partition in occurrences_made:
            self.stdout.write("made %s (%s to %s)" % self._shown(partition))
        for partition in made:
            self.stdout.write("made %s (%s to %s)" % self._shown(partition))
        self.stdout.write(
            "%s history partitions, %s made, in %.1f s."
            % (len(partitions.history_partitions()), len(made), time.monotonic() - started)
        )
        if options["move_history"]:
            self._move(options)

    def _move(self, options: dict[str, Any]) -> None:
        since = self._since()
        total, max_rows = self._left_behind(options, partitions.HOT)
        if total > max_rows:
            raise CommandError(
                "Refused: more than %s finished jobs would move (--max-rows, default "
                "PRUNE_MAX_ROWS); nothing moved. Check with --dry-run, then raise --max-rows."
                % max_rows
            )
        batch_size = options["batch_size"] or app_settings.PRUNE_BATCH_SIZE
        moved, started, shown = 0, time.monotonic(), time.monotonic()
        for count in partitions.move_history(since, batch_size=batch_size):
            moved += count
            if time.monotonic() - shown >= 5:
                shown = time.monotonic()
                self.stdout.write(
                    "moved %s of %s finished jobs (%.0f jobs/s)"
                    % (moved, total, moved / (shown - started))
                )
        elapsed = time.monotonic() - started
        self.stdout.write(
            "moved %s finished jobs into partitions in %.1f s (%.0f jobs/s)."
            % (moved, elapsed, moved / elapsed if elapsed else 0)
        )

    @staticmethod
    def _since() -> dt.datetime | None:
        """Return retention's cutoff for jobs now (None: they are kept)."""
        return cutoffs_for(clock.now()).get("jobs")

    def _left_behind(self, options: dict[str, Any], table: str) -> tuple[int, int]:
        """Return (jobs --move-history would move, counted up to one past the breaker;
        the breaker)."""
        max_rows = options["max_rows"] or app_settings.PRUNE_MAX_ROWS
        return partitions.history_to_move(self._since(), limit=max_rows + 1, table=table), max_rows

    def _describe_recipients(self, converted: bool) -> None:
        if not converted:
            ahead = (
                "make %s partitions for the batches to come"
                % (app_settings.HISTORY_PARTITIONS_AHEAD + 1)
                if app_settings.RETENTION_BATCHES_DAYS is not None
                else "make none ahead (RETENTION_BATCHES_DAYS is None: batches are kept)"
            )
            self.stdout.write(
                "Would partition the recipient table (its rows stay, in %s) and %s."
                % (recipient_partitions.BEFORE, ahead)
            )
            return
        existing = recipient_partitions.range_partitions()
        self.stdout.write(
            "The recipient table is partitioned: %s partitions of batches." % len(existing)
        )
        for partition in existing:
            self.stdout.write("  %s" % self._ids_shown(partition, "batches"))

    def _describe_attempts(self, converted: bool) -> None:
        if not converted:
            ahead = (
                "make %s partitions for the jobs to come"
                % (app_settings.HISTORY_PARTITIONS_AHEAD + 1)
                if app_settings.RETENTION_JOBS_DAYS is not None
                else "make none ahead (RETENTION_JOBS_DAYS is None: jobs are kept)"
            )
            self.stdout.write(
                "Would partition the job attempt table (its rows stay, in %s) and %s."
                % (attempt_partitions.BEFORE, ahead)
            )
            return
        existing = attempt_partitions.range_partitions()
        self.stdout.write(
            "The job attempt table is partitioned: %s partitions of jobs." % len(existing)
        )
        for partition in existing:
            self.stdout.write("  %s" % self._ids_shown(partition, "jobs"))

    def _describe_occurrences(self, converted: bool) -> None:
        if not converted:
            ahead = (
                "make partitions of %s days up to %s ahead"
                % (
                    app_settings.OCCURRENCE_PARTITION_DAYS,
                    app_settings.HISTORY_PARTITIONS_AHEAD,
                )
                if app_settings.RETENTION_OCCURRENCES_DAYS is not None
                else "make none ahead (RETENTION_OCCURRENCES_DAYS is None: occurrences are kept)"
            )
            self.stdout.write(
                "Would partition the schedule occurrence table (its rows stay, in %s) and %s."
                % (occurrence_partitions.BEFORE, ahead)
            )
            return
        existing = occurrence_partitions.range_partitions()
        self.stdout.write(
            "The schedule occurrence table is partitioned: %s partitions." % len(existing)
        )
        for partition in existing:
            self.stdout.write("  %s (%s to %s)" % self._shown(partition))

    def _describe(self, converted: bool, options: dict[str, Any]) -> None:
        if not converted:
            self.stdout.write(
                "Would partition the job table (its rows stay, in %s) and make %s history "
                "partitions of %s minutes."
                % (
                    partitions.HOT,
                    app_settings.HISTORY_PARTITIONS_AHEAD + 1,
                    app_settings.HISTORY_PARTITION_MINUTES,
                )
            )
        else:
            existing = partitions.history_partitions()
            self.stdout.write(
                "The job table is partitioned: %s history partitions." % len(existing)
            )
            for partition in existing:
                self.stdout.write("  %s (%s to %s)" % self._shown(partition))
        if options["move_history"]:
            count, max_rows = self._left_behind(
                options, partitions.HOT if converted else partitions.JOB
            )
            self.stdout.write(
                "--move-history would move %s finished jobs into partitions."
                % (count if count <= max_rows else "more than %s (refused: --max-rows)" % max_rows)
            )

    @staticmethod
    def _ids_shown(partition: IdRange, what: str) -> str:
        return "%s (%s %s to %s)" % (partition.name, what, partition.first, partition.end - 1)

    @staticmethod
    def _shown(partition: partitions.Partition) -> tuple[str, str, str]:
        return (
            partition.name,
            partition.start.isoformat(timespec="minutes"),
            partition.end.isoformat(timespec="minutes"),
        )
