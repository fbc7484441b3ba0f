"""List filters whose choices come from the code, not from the rows.

Django's filter on a plain field offers ``SELECT DISTINCT`` of that column, which
reads the whole table on every page load when the history is long. These offer
the values the code knows instead: registered task names, configured queues.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduler_app.conf import app_settings
from scheduler_app.registry import all_tasks


class KnownValuesFilter(admin.SimpleListFilter):
    """Filter on the exact value of the field ``parameter_name``, offering known_values().

    A value the code no longer knows (the old jobs of a renamed task) still filters
    when given in the URL (``?task_name=...``, as the alerts link), and is offered
    while selected.
    """

    def known_values(self) -> Iterable[str]:
        """Return the values to offer."""
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = set(self.known_values())
        if self.value():
            values.add(self.value())
        return [(value, value) for value in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        return queryset.filter(**{self.parameter_name: self.value()})


class TaskNameFilter(KnownValuesFilter):
    title = "task name"
    parameter_name = "task_name"

    def known_values(self) -> Iterable[str]:
        return all_tasks()


class QueueFilter(KnownValuesFilter):
    title = "queue"
    parameter_name = "queue"

    def known_values(self) -> Iterable[str]:
        return app_settings.QUEUES
