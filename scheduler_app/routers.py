"""SchedulerRouter: scheduler_app's tables on the database SCHEDULER_APP['DATABASE'] names.

Add it to DATABASE_ROUTERS (before a router that would send every model elsewhere, such
as a primary/replica one) when DATABASE is not "default"::

    DATABASE_ROUTERS = ["scheduler_app.routers.SchedulerRouter", ...]

Reads and writes of scheduler_app's models go to that database, and ``migrate`` creates
them there only; on that database it creates nothing else unless it is "default". A
relation between one of scheduler_app's models and another app's is allowed only when
both live on the same database: Django has no foreign keys across databases (check
scheduler_app.E122 names the fields a setting would split).
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, router

from scheduler_app.database import alias

APP_LABEL = "scheduler_app"


def is_scheduler_model(model: Any) -> bool:
    """Return whether ``model`` (a class or an instance) is one of scheduler_app's."""
    return model._meta.app_label == APP_LABEL


class SchedulerRouter:
    """Route scheduler_app's models to SCHEDULER_APP['DATABASE']; no opinion on the others."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return alias() if is_scheduler_model(model) else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return alias() if is_scheduler_model(model) else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        ours = [is_scheduler_model(obj) for obj in (obj1, obj2)]
        if all(ours):
            return True
        if not any(ours):
            return None
        other = obj2 if ours[0] else obj1
        if router.db_for_write(type(other)) != alias():
            return False
        return None  # on the same database: whatever the other routers (or Django) say

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label == APP_LABEL:
            return db == alias()
        if db == alias() and db != DEFAULT_DB_ALIAS:
            return False  # the scheduler's own database holds its tables only
        return None
