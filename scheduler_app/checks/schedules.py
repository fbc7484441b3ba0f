"""Declared schedules: SCHEDULER_APP['SCHEDULES'] (E020) and SCHEDULES_VERSION (E006)."""

from __future__ import annotations

import math
from typing import Any

from django.core.checks import Error, Tags, register

from scheduler_app.conf import app_settings, is_integer
from scheduler_app.exceptions import ValidationError
from scheduler_app.schedules.declared import declared_schedules


@register(Tags.compatibility)
def check_declared_schedules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """SCHEDULER_APP['SCHEDULES'] declares valid schedules of registered tasks (E020)."""
    try:
        declared_schedules()
    except ValidationError as exc:
        return [Error(exc.message, id="scheduler_app.E020")]
    return []


@register(Tags.compatibility)
def check_schedules_version(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """SCHEDULES_VERSION is an integer from 0 (E006)."""
    # The upper bound (Schedule.declared_version is an integer column) is E007's.
    if not is_integer(app_settings.SCHEDULES_VERSION, 0, math.inf):
        return [
            Error(
                "SCHEDULER_APP['SCHEDULES_VERSION'] must be an integer, at least 0.",
                id="scheduler_app.E006",
            )
        ]
    return []
