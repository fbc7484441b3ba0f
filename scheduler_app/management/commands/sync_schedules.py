"""manage.py sync_schedules: write SCHEDULER_APP['SCHEDULES'] to the database; --prune
also disables the schedules from code that are no longer declared."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduler_app.conf import app_settings
from scheduler_app.exceptions import ValidationError
from scheduler_app.management.database import database_ready
from scheduler_app.schedules.declared import prune_declared_schedules, sync_declared_schedules


class Command(BaseCommand):
    help = (
        "Create or update the schedules declared in SCHEDULER_APP['SCHEDULES'] "
        "(workers do it at start). Never disables one unless --prune is given."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--prune",
            action="store_true",
            help="Also disable schedules from code that SCHEDULES no longer declares "
            "(their history is kept). Run it once every worker runs this version.",
        )

    def handle(self, *args: Any, prune: bool, **options: Any) -> None:
        database_ready()
        try:
            stored = sync_declared_schedules()
        except ValidationError as exc:
            raise CommandError(exc.message) from exc
        version = app_settings.SCHEDULES_VERSION
        self.stdout.write(
            "Synced %s declared schedule(s) at SCHEDULES_VERSION %s." % (len(stored), version)
        )
        if prune:
            pruned = prune_declared_schedules()
            self.stdout.write(
                "Pruned %s schedule(s) no longer declared%s"
                % (len(pruned), ": %s." % ", ".join(sorted(pruned)) if pruned else ".")
            )
