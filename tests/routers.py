"""A project's router for the separate-database tests (tests/separate_database): the
user model, and the apps whose tables relate to it, live beside scheduler_app's tables,
because scheduler_app's models have foreign keys to the user model (check
scheduler_app.E122). The business tables (tests.testapp) and sessions stay on "default"."""

from __future__ import annotations

from typing import Any

from scheduler_app.database import alias

WITH_THE_SCHEDULER = frozenset({"auth", "contenttypes", "admin", "authtoken"})


class UsersWithTheScheduler:
    """Route the user model's app and its relations to SCHEDULER_APP['DATABASE']."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return alias() if model._meta.app_label in WITH_THE_SCHEDULER else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return alias() if model._meta.app_label in WITH_THE_SCHEDULER else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db == alias() if app_label in WITH_THE_SCHEDULER else None
