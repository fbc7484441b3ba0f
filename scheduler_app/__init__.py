"""scheduler_app: scheduled jobs and bulk sends that cannot be unsent.

The public API is importable from here once Django is set up::

    from scheduler_app import task, schedule, cancel
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CancelOutcome",
    "JobContext",
    "JobRequest",
    "RetryLater",
    "RetryPolicy",
    "cancel",
    "cancel_by_key",
    "schedule",
    "schedule_many",
    "task",
]

_LAZY = {
    "CancelOutcome": "scheduler_app.cancellation",
    "cancel": "scheduler_app.cancellation",
    "cancel_by_key": "scheduler_app.cancellation",
    "JobContext": "scheduler_app.registry",
    "task": "scheduler_app.registry",
    "JobRequest": "scheduler_app.scheduling",
    "schedule": "scheduler_app.scheduling",
    "schedule_many": "scheduler_app.scheduling",
    "RetryLater": "scheduler_app.exceptions",
    "RetryPolicy": "scheduler_app.retry",
}


def __getattr__(name: str) -> Any:
    # Lazy so that importing the package (e.g. from INSTALLED_APPS) never
    # touches models before the app registry is ready.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError("module 'scheduler_app' has no attribute %r" % name)
