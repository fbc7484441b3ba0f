"""Alerts: what is wrong now (and was), acknowledged by whom."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from scheduler_app.admin.base import SchedulerModelAdmin
from scheduler_app.admin.display import report_counts
from scheduler_app.alerts.store import acknowledge
from scheduler_app.models import Alert


class OpenFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [
            ("open", "open"),
            ("unacknowledged", "open, unacknowledged"),
            ("resolved", "resolved"),
        ]

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        if self.value() == "open":
            return queryset.open()
        if self.value() == "unacknowledged":
            return queryset.unacknowledged()
        if self.value() == "resolved":
            return queryset.exclude(resolved_at=None)
        return queryset


@admin.register(Alert)
class AlertAdmin(SchedulerModelAdmin):
    empty_text = (
        "No alerts: the alert rules open one when a task is late, overdue, absent or "
        "suspiciously successful."
    )
    list_display = [
        "kind",
        "subject",
        "summary",
        "opened_at",
        "last_seen_at",
        "resolved_at",
        "acknowledged_at",
        "link",
    ]
    list_filter = [OpenFilter, "kind"]
    search_fields = ["subject", "summary"]
    actions = ["acknowledge_alerts"]
    readonly_fields = [
        "kind",
        "subject",
        "summary",
        "numbers",
        "link",
        "opened_at",
        "last_seen_at",
        "last_notified_at",
        "notifications",
        "resolved_at",
        "acknowledged_at",
        "acknowledged_by",
    ]
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Alert | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Alert | None = None) -> bool:
        # Nothing on an alert is editable: its page is a view page. The changelist keeps
        # the change permission for the acknowledge action.
        return obj is None and super().has_change_permission(request)

    @admin.display(description="look at")
    def link(self, alert: Alert) -> str:
        return format_html('<a href="{}">open</a>', alert.admin_url) if alert.admin_url else "-"

    @admin.action(description="Acknowledge selected alerts", permissions=["change"])
    def acknowledge_alerts(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        done = acknowledge(ids, by=request.user)
        report_counts(
            request,
            self,
            {"done": done, "skipped": len(ids) - done},
            {
                "done": (
                    "%(count)d alert acknowledged.",
                    "%(count)d alerts acknowledged.",
                    messages.SUCCESS,
                ),
                "skipped": (
                    "%(count)d alert was resolved or acknowledged already.",
                    "%(count)d alerts were resolved or acknowledged already.",
                    messages.INFO,
                ),
            },
        )
