"""The Celery executor's settings (E060-E064), checked without importing Celery or the app."""

from __future__ import annotations

import re
from typing import Any

from django.core.checks import Error, Tags, register

from scheduler_app.conf import app_settings, is_number

CELERY_APP_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")

#: Most jobs one message may carry: its arguments stay a small message.
MAX_JOBS_PER_MESSAGE = 10_000


@register(Tags.compatibility)
def check_celery_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Check the Celery executor's settings without importing Celery or the app."""
    errors = []
    app = app_settings.CELERY_APP
    if app is not None and not (isinstance(app, str) and CELERY_APP_PATH.fullmatch(app)):
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_APP'] must be None or the dotted path to a Celery app "
                "instance, such as 'proj.celery.app', not %r." % (app,),
                id="scheduler_app.E060",
            )
        )
    prefix = app_settings.CELERY_QUEUE_PREFIX
    if not isinstance(prefix, str) or len(prefix) > 100:
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_QUEUE_PREFIX'] must be a string of at most 100 characters.",
                id="scheduler_app.E061",
            )
        )
    in_flight = app_settings.CELERY_MAX_IN_FLIGHT
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_MAX_IN_FLIGHT'] must be a positive integer.",
                id="scheduler_app.E062",
            )
        )
    wait = app_settings.CELERY_MAX_BROKER_WAIT
    # Not NaN or infinity either: a lost message would never be published again.
    if not is_number(wait) or wait <= 0:
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_MAX_BROKER_WAIT'] must be a positive, finite number of "
                "seconds.",
                id="scheduler_app.E063",
            )
        )
    per_message = app_settings.CELERY_JOBS_PER_MESSAGE
    if (
        isinstance(per_message, bool)
        or not isinstance(per_message, int)
        or not 1 <= per_message <= MAX_JOBS_PER_MESSAGE
    ):
        errors.append(
            Error(
                "SCHEDULER_APP['CELERY_JOBS_PER_MESSAGE'] must be an integer from 1 to %s."
                % MAX_JOBS_PER_MESSAGE,
                id="scheduler_app.E064",
            )
        )
    return errors
