"""Django's tasks framework: ``django.tasks`` on Django 6, the ``django-tasks`` backport on 5.2.

scheduler_app.tasks_backend and projects' code that must run on both import
the framework's names from here. Importing this module raises ImportError
when neither is installed.
"""

from __future__ import annotations

try:
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:
    try:
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, task, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            TASK_MAX_PRIORITY,
            TASK_MIN_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:
        raise ImportError(
            "scheduler_app's django.tasks backend needs Django 6, or on Django 5.2 the "
            "django-tasks backport: pip install 'django-scheduler-app[tasks]'."
        ) from exc

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
