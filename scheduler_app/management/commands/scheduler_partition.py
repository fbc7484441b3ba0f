"""manage.py scheduler_partition: put finished jobs in time partitions (PostgreSQL)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduler_app import partitions
from scheduler_app.conf import app_settings
from scheduler_app.management.database import database_ready


class Command(BaseCommand):
    help = (
        "Partition the job table so that retention drops finished jobs a partition at a "
        "time (PostgreSQL; workers may run meanwhile), and make the partitions ahead "
        "(HISTORY_PARTITIONS_AHEAD). Run again, it makes only missing partitions."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be done; change nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        database_ready()
        try:
            converted = partitions.is_partitioned()
            if options["dry_run"]:
                self._describe(converted)
                return
            started = time.monotonic()
            made = partitions.convert()
        except partitions.NotSupported as exc:
            raise CommandError(str(exc)) from exc
        if not converted:
            self.stdout.write("The job table is partitioned; its rows are in %s." % partitions.HOT)
        for partition in made:
            self.stdout.write("made %s (%s to %s)" % self._shown(partition))
        self.stdout.write(
            "%s history partitions, %s made, in %.1f s."
            % (len(partitions.history_partitions()), len(made), time.monotonic() - started)
        )

    def _describe(self, converted: bool) -> None:
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
            return
        existing = partitions.history_partitions()
        self.stdout.write("The job table is partitioned: %s history partitions." % len(existing))
        for partition in existing:
            self.stdout.write("  %s (%s to %s)" % self._shown(partition))

    @staticmethod
    def _shown(partition: partitions.Partition) -> tuple[str, str, str]:
        return (
            partition.name,
            partition.start.isoformat(timespec="minutes"),
            partition.end.isoformat(timespec="minutes"),
        )
