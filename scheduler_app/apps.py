import importlib.util

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler_app import (
            checks,  # noqa: F401  (registers the system checks)
            cursors,
            database_clock,
            db,
            registry,
            retention,  # noqa: F401  (registers the prune task)
            scheduling,
        )
        from scheduler_app.feedback import anymail
        from scheduler_app.models import SyncCursor
        from scheduler_app.sends import dispatch  # noqa: F401  (registers the send tasks)

        # What the modules below the models call back (scheduler_app.hooks), now that
        # the models are loaded.
        database_clock.now_sql.connect(db.now_sql)
        cursors.saved_value.connect(SyncCursor.objects.saved_value)
        registry.schedule_job.connect(scheduling.schedule)
        anymail.connect()

        if _tasks_framework_installed():
            # Registers the runner task of SchedulerBackend's jobs on every worker.
            from scheduler_app import tasks_backend  # noqa: F401

        # Every installed app's tasks.py registers its @task functions.
        autodiscover_modules("tasks")


def _tasks_framework_installed() -> bool:
    """Return True if django.tasks (Django 6) or the django_tasks backport can be imported."""
    return any(importlib.util.find_spec(name) for name in ("django.tasks", "django_tasks"))
