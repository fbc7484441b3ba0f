"""manage.py scheduler_prune: delete finished, old rows now (the built-in schedule: daily)."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduler_app import clock
from scheduler_app.bounds import positive_int
from scheduler_app.conf import app_settings
from scheduler_app.management.database import database_ready
from scheduler_app.models import PruneRun
from scheduler_app.retention import (
    MOVED_JOBS,
    PARTITIONED_JOBS,
    PARTITIONED_RECIPIENTS,
    SETTINGS,
    cutoffs_for,
    prune,
)


class Command(BaseCommand):
    help = (
        "Delete finished jobs, occurrences, events, alerts and heartbeats older than their "
        "RETENTION_*_DAYS, blank finished batches' recipient contexts, delete old dry-run "
        "reports. Exits 1 if the breaker (PRUNE_MAX_ROWS) refused."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Print what would go; delete nothing."
        )
        parser.add_argument(
            "--max-rows",
            type=positive_int("PRUNE_MAX_ROWS"),
            metavar="N",
            help="The breaker for this run. Default: PRUNE_MAX_ROWS.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        database_ready()
        now = clock.now()
        run = prune(now, dry_run=options["dry_run"], max_rows=options["max_rows"])
        cutoffs = cutoffs_for(now)
        verb = "would remove" if run.outcome == PruneRun.Outcome.DRY_RUN else "removed"
        if run.outcome == PruneRun.Outcome.REFUSED:
            verb = "qualify (nothing removed)"
        for name, setting in SETTINGS.items():
            if name not in cutoffs:
                self.stdout.write("%-20s kept: %s is None" % (name, setting))
                continue
            self.stdout.write(
                "%-20s %s %s (older than %s, %s days)"
                % (
                    name,
                    verb,
                    run.counts.get(name, 0),
                    cutoffs[name].isoformat(timespec="seconds"),
                    getattr(app_settings, setting),
                )
            )
        moving = "would move" if run.outcome == PruneRun.Outcome.DRY_RUN else "moved"
        for name, done, what in (
            (PARTITIONED_JOBS, verb, "in history partitions past the cutoff, dropped whole"),
            (MOVED_JOBS, moving, "ended jobs of the hot partition into history partitions"),
            (
                PARTITIONED_RECIPIENTS,
                verb,
                "of finished batches in partitions past the cutoff, dropped whole",
            ),
        ):
            if name in run.counts:
                self.stdout.write("%-20s %s %s (%s)" % (name, done, run.counts[name], what))
        if run.outcome == PruneRun.Outcome.REFUSED:
            raise CommandError("Refused: %s (prune run %s)" % (run.detail, run.pk))
        self.stdout.write("prune run %s: %s, %s rows" % (run.pk, run.outcome, run.total))
