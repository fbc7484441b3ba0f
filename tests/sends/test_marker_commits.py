"""How a lane's marker statements commit on PostgreSQL: synchronously unless told otherwise."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction

from scheduler_app.db import backend
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


def test_the_per_recipient_marker_statement_is_prepared_once_and_planned_once(
    customer,
    make_batch,
    scripted,  # noqa: F811
):
    """Django connects with prepare_threshold=None (nothing prepared, prepare=True
    included): the lane lifts it for its statement, which then runs a generic plan
    instead of being parsed and planned for each recipient."""
    for n in range(8):
        customer("c%s@example.com" % n, "C%s" % n)
    batch = make_batch(provider="scripted")

    run_lane_now(batch)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements "
            "WHERE statement LIKE %s",
            ["%WITH marked AS (%begun AS (%counted AS (%"],
        )
        generic, custom = cursor.fetchone()
    # Eight recipients: the first begins with no marker (a statement of its own), the
    # other seven run one statement, planned for the first five runs and then generic.
    assert (generic, custom) == (2, 6)
    batch.refresh_from_db()
    assert (batch.status, batch.sent) == (SendBatch.Status.COMPLETED, 8)


@pytest.fixture
def transaction_pooled(monkeypatch):
    """Declare the default database behind a transaction pooler (Django's
    DISABLE_SERVER_SIDE_CURSORS), on a new connection; the connection is closed after."""
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    connection.close()
    yield
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_a_lane_leaves_the_session_alone(
    two,
    scripted,  # noqa: F811
    settings,
    transaction_pooled,
):
    """The session serves other clients between the lane's transactions: no session SET,
    no prepared statement. Each lane statement sets synchronous_commit for its own
    transaction (SET LOCAL), seen here in a transaction around one of them."""
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_MARKER_SYNCHRONOUS_COMMIT": False}
    seen = seen_during_calls(scripted)

    run_lane_now(two)

    assert seen == ["on", "on"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone()[0] == 0
    two.refresh_from_db()
    assert (two.status, two.sent) == (SendBatch.Status.COMPLETED, 2)

    with backend().lane_session(synchronous_commit=False), transaction.atomic():
        backend().claim_recipients(
            batch_id=two.pk, claim="test", limit=1, claim_for=dt.timedelta(seconds=1)
        )
        assert show("synchronous_commit") == "off"
    assert show("synchronous_commit") == "on"


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_a_lane_sets_what_it_wants_whatever_the_session_holds(
    two, transaction_pooled
):
    """A server session may keep a synchronous_commit that another client SET on it: the
    lane sets the one it wants on each of its transactions, even where it is the server's
    default. It compared with the value one session held, once, and then trusted sessions
    it had never looked at."""
    try:
        with backend().lane_session(synchronous_commit=True):
            # The lane's next transaction lands on a server session another client left
            # with synchronous_commit off (here: the same session, SET since the lane began).
            with connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit TO off")
            with transaction.atomic():
                backend().claim_recipients(
                    batch_id=two.pk, claim="test", limit=1, claim_for=dt.timedelta(seconds=1)
                )
                assert show("synchronous_commit") == "on"
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")
