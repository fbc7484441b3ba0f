"""Django's Tasks framework: each TASKS backend that is a SchedulerBackend, against
SCHEDULER_APP['QUEUES'] (E070-E072)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.utils.module_loading import import_string

from scheduler_app.conf import app_settings


@register(Tags.compatibility)
def check_tasks_backends(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Check each TASKS backend that is a SchedulerBackend against SCHEDULER_APP['QUEUES']."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return []
    errors = []
    for alias, params in configured.items():
        if isinstance(params, dict) and _is_scheduler_backend(params.get("BACKEND")):
            errors.extend(_check_tasks_backend(alias, params))
    return errors


def _is_scheduler_backend(path: Any) -> bool:
    if not isinstance(path, str):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # the tasks framework reports a backend it cannot import
    # Imported here: scheduler_app.tasks_backend needs django.tasks or django_tasks, which a
    # project that does not use it may lack; it can import when a backend path names it.
    from scheduler_app.tasks_backend import SchedulerBackend

    return isinstance(backend, type) and issubclass(backend, SchedulerBackend)


def _check_tasks_backend(alias: str, params: dict[str, Any]) -> list[Error]:
    # Django's default when QUEUES is left out.
    queues = params.get("QUEUES", ["default"])
    if isinstance(queues, str) or not isinstance(queues, list | tuple | set | frozenset):
        return [
            Error(
                "TASKS[%r]['QUEUES'] must be a list of queue names." % alias,
                id="scheduler_app.E071",
            )
        ]
    if not queues:
        return [
            Error(
                "TASKS[%r]['QUEUES'] is empty, which lets Tasks name any queue." % alias,
                hint="List the queues of SCHEDULER_APP['QUEUES'] that Tasks may use.",
                id="scheduler_app.E071",
            )
        ]
    listed = app_settings.QUEUES
    # Of any other type, E002 reports SCHEDULER_APP['QUEUES'], as check_task_queues leaves it.
    errors = [
        Error(
            "TASKS[%r] lists queue %r, which SCHEDULER_APP['QUEUES'] does not list."
            % (alias, queue),
            hint="SCHEDULER_APP['QUEUES'] is the authority: add the queue there, or drop it here.",
            id="scheduler_app.E070",
        )
        for queue in sorted(queues, key=str)
        if isinstance(listed, list | tuple) and queue not in listed
    ]
    if params.get("OPTIONS"):
        errors.append(
            Error(
                "TASKS[%r]['OPTIONS'] is set, but SchedulerBackend takes no options." % alias,
                hint="Set attempts and timeouts in SCHEDULER_APP (DEFAULT_MAX_ATTEMPTS, "
                "DEFAULT_TIMEOUT).",
                id="scheduler_app.E072",
            )
        )
    return errors
