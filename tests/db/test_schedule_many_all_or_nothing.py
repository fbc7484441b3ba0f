"""schedule_many() writes all of a call or nothing, inside or outside the caller's transaction."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError

from scheduler_app.models import Job
from scheduler_app.scheduling import JobRequest, schedule_many

NOOP = "tests.noop"


def ghost_user():
    """Return a user with a primary key that no row has (deleted since it was read)."""
    user = get_user_model().objects.create(username="ghost")
    ghost = get_user_model()(pk=user.pk, username="ghost")
    user.delete()
    return ghost


@pytest.mark.django_db(transaction=True)
def test_schedule_many_outside_a_transaction_with_a_deleted_owner_writes_nothing():
    items = [{"n": 1}, {"n": 2}, JobRequest(payload={"n": 3}, unique_key="k", owner=ghost_user())]

    with pytest.raises(IntegrityError):
        schedule_many(NOOP, items)

    assert not Job.objects.exists()
