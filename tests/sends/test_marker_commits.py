"""How a lane's marker statements commit on PostgreSQL: synchronously unless told otherwise."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler_app.models import SendBatch
from scheduler_app.sends.rendering import Message
from tests.sends.helpers import run_lane_now
from tests.sends.test_crashes import scripted  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def show(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW %s" % name)
        return cursor.fetchone()[0]


@pytest.fixture
def two(customer, make_batch, scripted):  # noqa: F811
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    return make_batch(provider="scripted")


def seen_during_calls(scripted) -> list[str]:  # noqa: F811
    seen: list[str] = []

    def look(message: Message, key: str) -> None:
        seen.append(show("synchronous_commit"))

    scripted.on_call = look
    return seen


def test_markers_commit_synchronously_by_default(two, scripted):  # noqa: F811
    seen = seen_during_calls(scripted)

    run_lane_now(two)

    assert seen == ["on", "on"]
    two.refresh_from_db()
    assert (two.status, two.sent) == (SendBatch.Status.COMPLETED, 2)


def test_a_lane_can_commit_its_markers_without_waiting_for_the_wal_flush(
    two,
    scripted,  # noqa: F811
    settings,
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_MARKER_SYNCHRONOUS_COMMIT": False}
    seen = seen_during_calls(scripted)

    run_lane_now(two)

    assert seen == ["off", "off"]
    # Only the lane's own statements: the connection is as it was afterwards.
    assert show("synchronous_commit") == "on"
    two.refresh_from_db()
    assert (two.status, two.sent) == (SendBatch.Status.COMPLETED, 2)
