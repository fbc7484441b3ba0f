"""Live workers (read-only): who runs, where, serving which queues, last seen when."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from scheduler_app.admin.base import SchedulerModelAdmin
from scheduler_app.models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(SchedulerModelAdmin):
    empty_text = "No workers seen yet: each runworker process writes its row here when it starts."
    # The worker id is host:pid:suffix, so host and pid are no columns of their own (host
    # is a filter, both are on the worker's page): the list fits 1280 px.
    list_display = [
        "worker_id",
        "status",
        "version",
        "queues_display",
        "concurrency",
        "running",
        "started_at",
        "last_seen_at",
    ]
    list_filter = ["status", "host"]
    search_fields = ["worker_id", "host"]

    @admin.display(description="queues")
    def queues_display(self, worker: WorkerHeartbeat) -> str:
        return ", ".join(worker.queues or [])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: WorkerHeartbeat | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: WorkerHeartbeat | None = None
    ) -> bool:
        return False
