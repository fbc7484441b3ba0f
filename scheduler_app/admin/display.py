"""Small display helpers shared by the admin modules."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.translation import ngettext

from scheduler_app.admin.base import SchedulerModelAdmin
from scheduler_app.controls import PausedScopes, paused_scopes


class JobReportAdmin(SchedulerModelAdmin):
    """A read-only page about jobs (its changelist_view draws it): anyone who may view jobs."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("scheduler_app.view_job")

    def check_view_permission(self, request: HttpRequest) -> None:
        """Raise PermissionDenied unless the user may see this page."""
        if not self.has_view_permission(request):
            raise PermissionDenied


def seconds(delta: dt.timedelta | None) -> str:
    """Return a duration as '1.2 s', '3 min 4 s' or '-' ."""
    if delta is None:
        return "-"
    total = delta.total_seconds()
    if abs(total) < 60:
        return "%.1f s" % total
    minutes, secs = divmod(int(total), 60)
    if abs(minutes) < 60:
        return "%d min %d s" % (minutes, secs)
    return "%d h %d min" % divmod(minutes, 60)


def utc(moment: dt.datetime | None) -> str:
    """Return a moment as '2026-03-01 09:00:00 UTC', or '-'."""
    if moment is None:
        return "-"
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def report_counts(request: HttpRequest, modeladmin, counts: dict[str, int], labels: dict) -> None:  # type: ignore[no-untyped-def]
    """Send one admin message per outcome: success for what changed, warning for the rest."""
    for outcome, count in counts.items():
        if not count:
            continue
        singular, plural, level = labels[outcome]
        modeladmin.message_user(
            request, ngettext(singular, plural, count) % {"count": count}, level=level
        )


def paused_banner(request: HttpRequest, paused: PausedScopes | None = None) -> None:
    """Warn on a list page when kill switches are on."""
    paused = paused or paused_scopes()
    parts = []
    if paused.everything:
        parts.append("EVERYTHING")
    if paused.queues:
        parts.append("queues: %s" % ", ".join(sorted(paused.queues)))
    if paused.tasks:
        parts.append("tasks: %s" % ", ".join(sorted(paused.tasks)))
    if parts:
        messages.warning(request, "Paused by kill switch: %s." % "; ".join(parts))
