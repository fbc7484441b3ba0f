"""Tasks: the defaults @task gives them (DEFAULT_MAX_ATTEMPTS E004, DEFAULT_TIMEOUT E008),
and each registered task's queue (E010)."""

from __future__ import annotations

import math
from typing import Any

from django.core.checks import Error, Tags, register

from scheduler_app.conf import app_settings, is_integer
from scheduler_app.registry import all_tasks
from scheduler_app.targets import as_duration


@register(Tags.compatibility)
def check_task_defaults(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """DEFAULT_MAX_ATTEMPTS (E004) and DEFAULT_TIMEOUT (E008), by the rules registry uses."""
    errors = []
    if not is_integer(app_settings.DEFAULT_MAX_ATTEMPTS, 1, math.inf):  # E007: the most
        errors.append(
            Error(
                "SCHEDULER_APP['DEFAULT_MAX_ATTEMPTS'] must be an integer, at least 1.",
                id="scheduler_app.E004",
            )
        )
    timeout = app_settings.DEFAULT_TIMEOUT
    try:
        as_duration(timeout, "DEFAULT_TIMEOUT")
    except ValueError as exc:
        errors.append(
            Error(
                "SCHEDULER_APP['DEFAULT_TIMEOUT'] must be None or a positive number of seconds: "
                "%s; got %r." % (exc, timeout),
                id="scheduler_app.E008",
            )
        )
    return errors


@register(Tags.compatibility)
def check_task_queues(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    queues = app_settings.QUEUES
    if not isinstance(queues, list | tuple):
        return []
    return [
        Error(
            "Task %r uses queue %r, which SCHEDULER_APP['QUEUES'] does not list."
            % (name, spec.queue),
            id="scheduler_app.E010",
        )
        for name, spec in sorted(all_tasks().items())
        if spec.queue not in queues
    ]
