"""The operations overview: open alerts, live workers, queues, and lateness charts per task."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from scheduler_app import clock, stats
from scheduler_app.admin.charts import bar_chart
from scheduler_app.admin.display import JobReportAdmin
from scheduler_app.conf import app_settings
from scheduler_app.lateness import hourly_p95
from scheduler_app.models import Alert, Control, Job, OperationsOverview, SendBatch
from scheduler_app.sends.batches import batch_progress

#: Hours of lateness the charts show.
CHART_HOURS = 24
#: Most open alerts listed (the alerts page has them all).
MAX_ALERTS = 50
#: The window of the drain rate (jobs finished per second), in seconds.
DRAIN_WINDOW = 60


@admin.register(OperationsOverview)
class OperationsOverviewAdmin(JobReportAdmin):
    change_list_template = "admin/scheduler_app/overview.html"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        self.check_view_permission(request)
        now = clock.now()
        context = {
            **self.admin_site.each_context(request),
            "title": "Operations overview",
            "opts": self.model._meta,
            "now": now,
            "paused": paused_now(),
            "send_rate": round(
                sum(batch_progress(b)["rate"] for b in SendBatch.objects.filter(status="sending")),
                2,
            ),
            "drain_rate": round(
                Job.objects.filter(
                    finished_at__gte=now - dt.timedelta(seconds=DRAIN_WINDOW)
                ).count()
                / DRAIN_WINDOW,
                2,
            ),
            "alerts": Alert.objects.open().order_by("-opened_at")[:MAX_ALERTS],
            "alert_count": Alert.objects.open().count(),
            "workers": stats.live_workers().order_by("worker_id"),
            "lost_after": app_settings.WORKER_LOST_AFTER,
            "queues": [(depth, depth.oldest_due_age(now)) for depth in stats.queue_depths(now)],
            "charts": lateness_charts(now),
            "chart_hours": CHART_HOURS,
        }
        return TemplateResponse(request, self.change_list_template, context)


def paused_now() -> list[tuple[str, str, Any]]:
    """Return what is paused now, everything first: (what, reason, since)."""
    rank = {Control.Scope.GLOBAL: 0, Control.Scope.QUEUE: 1, Control.Scope.TASK: 2}
    switches = sorted(Control.objects.filter(paused=True), key=lambda c: (rank[c.scope], c.target))
    batches = SendBatch.objects.filter(status=SendBatch.Status.PAUSED).order_by("name")
    return [
        *(
            (
                "Everything"
                if c.scope == Control.Scope.GLOBAL
                else "%s %s" % ("Queue" if c.scope == Control.Scope.QUEUE else "Task", c.target),
                c.reason,
                c.changed_at,
            )
            for c in switches
        ),
        *(("Send batch %s" % b.name, b.status_reason, b.status_changed_at) for b in batches),
    ]


def lateness_charts(now: dt.datetime) -> list[tuple[str, float, Any]]:
    """Return (task, worst hourly p95, SVG chart) per task that ran in the last CHART_HOURS."""
    start = now - dt.timedelta(hours=CHART_HOURS)
    labels = [
        "%s-%s UTC"
        % (
            (start + dt.timedelta(hours=h)).strftime("%H:%M"),
            (start + dt.timedelta(hours=h + 1)).strftime("%H:%M"),
        )
        for h in range(CHART_HOURS)
    ]
    return [
        (task, max(v for v in values if v is not None), bar_chart(values, labels=labels))
        for task, values in hourly_p95(now, hours=CHART_HOURS).items()
    ]
