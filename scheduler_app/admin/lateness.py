"""The lateness overview: how late jobs start, per task, and what is overdue now."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from scheduler_app import clock
from scheduler_app.admin.display import JobReportAdmin
from scheduler_app.lateness import lateness_by_task
from scheduler_app.models import Job, LatenessOverview

DEFAULT_OVERDUE_SECONDS = 60
#: 100 years; a much larger threshold would reach back before year 1.
MAX_OVERDUE_SECONDS = 36525 * 24 * 3600


@admin.register(LatenessOverview)
class LatenessOverviewAdmin(JobReportAdmin):
    change_list_template = "admin/scheduler_app/lateness.html"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        self.check_view_permission(request)
        now = clock.now()
        status = 200
        try:
            threshold = max(int(request.GET.get("overdue", DEFAULT_OVERDUE_SECONDS)), 0)
        except ValueError:
            threshold = DEFAULT_OVERDUE_SECONDS
        if threshold > MAX_OVERDUE_SECONDS:
            messages.error(
                request,
                "overdue must be a number of seconds from 0 to %s (100 years); got %s."
                % (MAX_OVERDUE_SECONDS, request.GET["overdue"]),
            )
            threshold, status = DEFAULT_OVERDUE_SECONDS, 400
        due = Job.objects.due(now)
        overdue = due.filter(run_at__lt=now - dt.timedelta(seconds=threshold))
        context = {
            **self.admin_site.each_context(request),
            "title": "Lateness overview",
            "opts": self.model._meta,
            "windows": [
                ("Last hour", lateness_by_task(now - dt.timedelta(hours=1), now)),
                ("Last day", lateness_by_task(now - dt.timedelta(days=1), now)),
            ],
            "threshold": threshold,
            "overdue_count": overdue.count(),
            "overdue": overdue.order_by("run_at")[:50],
            "oldest": due.order_by("run_at").first(),
            "now": now,
        }
        return TemplateResponse(request, self.change_list_template, context, status=status)
