"""Fixtures for send tests: customers and batches of the "tests.customers" audience."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler_app import clock
from scheduler_app.models import SendBatch
from tests.testapp.models import Customer


@pytest.fixture
def customer() -> Callable[..., Customer]:
    """Return a function that creates one Customer (address, first name, zone, plan)."""

    def create(email: str, first_name: str = "", *, tz: str = "", plan: str = "free") -> Customer:
        return Customer.objects.create(email=email, first_name=first_name, tz=tz, plan=plan)

    return create


@pytest.fixture
def make_batch() -> Callable[..., SendBatch]:
    """Return a function that creates a SendBatch of the "tests.customers" audience.

    Scheduled (ready for a lane) unless ``status`` says otherwise, through the
    fake provider, with a template every named customer renders cleanly.
    """

    def create(**fields: Any) -> SendBatch:
        values: dict[str, Any] = {
            "name": "Spring news",
            "subject_template": "News for you",
            "text_template": "Hi {{ first_name|default:'there' }}, here is the spring news.",
            "audience": "tests.customers",
            "expected_max_audience": 100,
            "provider": "fake",
            "rate_limit_key": "fake",
            "status": SendBatch.Status.SCHEDULED,
            "scheduled_at": clock.now(),
            "timezone": "Europe/Paris",
            **fields,
        }
        return SendBatch.objects.create(**values)

    return create
