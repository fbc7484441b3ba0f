"""The prune runs (read-only): the audit of retention, what each run deleted or why it refused."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from scheduler_app.admin.base import SchedulerModelAdmin
from scheduler_app.models import PruneRun


@admin.register(PruneRun)
class PruneRunAdmin(SchedulerModelAdmin):
    empty_text = (
        "No prune runs yet: each run of the scheduler-prune schedule (or the scheduler_prune "
        "command) records one."
    )
    list_display = ["id", "started_at", "source", "outcome", "total", "reference_time", "detail"]
    list_filter = ["outcome", "source"]
    date_hierarchy = "started_at"

    @admin.display(description="rows")
    def total(self, obj: PruneRun) -> int:
        return obj.total

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PruneRun | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: PruneRun | None = None) -> bool:
        return False
