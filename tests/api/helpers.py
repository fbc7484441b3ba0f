"""Helpers of the send batch API tests: batches in any state, permissions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission

from scheduler_app import clock
from scheduler_app.models import SendBatch


def make_batch(owner: Any, *, status: str = SendBatch.Status.SCHEDULED, **fields: Any) -> SendBatch:
    """Create a batch of the "tests.customers" audience in ``status``, written as is.

    ``started=True`` marks it as having started sending (as a lane does).
    """
    started = fields.pop(
        "started", status in (SendBatch.Status.SENDING, SendBatch.Status.COMPLETED)
    )
    values: dict[str, Any] = {
        "name": "Spring news",
        "subject_template": "News for you",
        "text_template": "Hi {{ first_name|default:'there' }}.",
        "audience": "tests.customers",
        "expected_max_audience": 100,
        "provider": "fake",
        "rate_limit_key": "fake",
        "status": status,
        "owner": owner,
        "started_at": clock.now() if started else None,
        **fields,
    }
    return SendBatch.objects.create(**values)


def grant(user: Any, codename: str) -> Any:
    """Give ``user`` the scheduler_app permission ``codename``; return the user, reloaded."""
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="scheduler_app", codename=codename)
    )
    return type(user).objects.get(pk=user.pk)  # a fresh user: no cached permissions
