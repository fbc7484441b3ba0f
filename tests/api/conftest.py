"""Fixtures for the REST API tests: users, their tokens and jobs, and an APIClient per user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.cache import cache
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler_app import schedule
from scheduler_app.models import Job

TASK = "tests.record"


@pytest.fixture(autouse=True)
def _fresh_throttle_history():
    """Throttling counts requests in the default cache: start and end each test with none."""
    cache.clear()
    yield
    cache.clear()


def client_for(user: Any | None) -> APIClient:
    """Return an APIClient authenticated with ``user``'s token (anonymous for None)."""
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION="Token %s" % token.key)
    return client


@pytest.fixture
def ada(db):
    return get_user_model().objects.create_user("ada", password="pw-ada")


@pytest.fixture
def bob(db):
    return get_user_model().objects.create_user("bob", password="pw-bob")


@pytest.fixture
def operator(db):
    """Staff with scheduler_app.change_job: may see and cancel every job."""
    user = get_user_model().objects.create_user("operator", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="scheduler_app", codename="change_job")
    )
    return user


@pytest.fixture
def staff_without_permission(db):
    return get_user_model().objects.create_user("intern", is_staff=True)


@pytest.fixture
def api(ada) -> APIClient:
    """Ada's client."""
    return client_for(ada)


@pytest.fixture
def make_job() -> Callable[..., Job]:
    """Return a function that schedules a tests.record job (options as schedule())."""

    def make(owner: Any = None, **options: Any) -> Job:
        if not {"at", "delay", "undo_window"} & options.keys():
            options["delay"] = 3600
        return schedule(TASK, options.pop("payload", {}), owner=owner, **options)

    return make
