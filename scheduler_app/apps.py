from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler_app import (
            checks,  # noqa: F401  (registers the system checks)
            retention,  # noqa: F401  (registers the prune task)
        )
        from scheduler_app.sends import dispatch  # noqa: F401  (registers the send tasks)

        # Every installed app's tasks.py registers its @task functions.
        autodiscover_modules("tasks")
