"""A lane's claim of a chunk and an idempotent provider's charge of a group rewrite each
recipient in place (a HOT update: no new index entries), because a frozen audience leaves
room on its pages (issue #14).

A send updates each recipient row at least three times: the chunk's claim, the charge of
the attempt, the marker (and a claim extension now and then). The claim and the charge
change no indexed column, so PostgreSQL can keep the new version on the same page and
add nothing to the table's indexes, but only if the page has room. With the default
fillfactor of 100 the freeze packed the pages full: claims and group charges wrote their
row versions on other pages, with four new index entries each. (A charge made one
recipient at a time, with the previous recipient's marker, was mostly HOT already: the
marker moves the previous row off the page and leaves room.)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from scheduler_app.db import backend
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.start import start_sending
from tests.helpers import wait_until
from tests.testapp.models import Customer

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

AUDIENCE = 400
CLAIM = "lane-1"
CLAIM_FOR = dt.timedelta(minutes=1)
#: The claim makes a row longer (its claim and expiry), so a row or two per page may not
#: fit beside the others' new versions: most, not all, updates are HOT.
MOSTLY = 0.8 * AUDIENCE


def updates_in(statement: Callable[[], object]) -> tuple[int, int]:
    """Run ``statement`` in a transaction of its own; return (rows it updated, HOT of them)."""
    counts = (
        "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
        "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
    )
    table = [Recipient._meta.db_table] * 2
    with transaction.atomic(), connection.cursor() as cursor:
        # Counts not yet reported to the statistics may include earlier transactions'.
        cursor.execute(counts, table)
        updated_before, hot_before = cursor.fetchone()
        statement()
        cursor.execute(counts, table)
        updated, hot = cursor.fetchone()
    return updated - updated_before, hot - hot_before


def others_see_old_rows() -> bool:
    """Whether another session of this database holds a snapshot (an autoanalyze, a
    connection left in a transaction): the row versions it may still see cannot be pruned
    from their pages, so their room is not free yet."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL)"
        )
        return cursor.fetchone()[0]


@pytest.fixture
def no_autovacuum_on_recipients():
    """Keep autovacuum off the recipient table while the test runs: the claim updates
    enough rows to start an autoanalyze, whose snapshot, taken between the wait for other
    snapshots and the charge, would keep the claim's old row versions on their pages."""
    table = Recipient._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE %s SET (autovacuum_enabled = false)" % table)
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE %s RESET (autovacuum_enabled)" % table)


@pytest.mark.plain_job_table  # the recipient table's own storage and statistics
@pytest.mark.usefixtures("no_autovacuum_on_recipients")
def test_a_chunk_claim_and_a_group_charge_are_hot_updates(make_batch):
    Customer.objects.bulk_create(
        Customer(email="c%03d@example.com" % i, first_name="C%s" % i) for i in range(AUDIENCE)
    )
    batch = make_batch(expected_max_audience=AUDIENCE)
    assert start_sending(batch.pk).status == SendBatch.Status.SENDING  # the freeze commits
    rows: list[tuple] = []

    claimed, hot_claims = updates_in(
        lambda: rows.extend(
            backend().claim_recipients(
                batch_id=batch.pk, claim=CLAIM, limit=AUDIENCE, claim_for=CLAIM_FOR
            )
        )
    )
    # The charge fits where the claim's old versions were, once they are pruned. A page is
    # pruned when read, but only as far as this backend's last computed horizon allows,
    # which can lag behind (27 of 400 charges were HOT, on and off): VACUUM prunes them all
    # once no snapshot can see them.
    wait_until(lambda: not others_see_old_rows(), message="other snapshots in the database to end")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (INDEX_CLEANUP OFF) %s" % Recipient._meta.db_table)
    charged, hot_charges = updates_in(
        lambda: backend().begin_recipients(
            recipient_ids=[row[0] for row in rows],
            batch_id=batch.pk,
            claim=CLAIM,
            claim_for=CLAIM_FOR,
        )
    )

    assert claimed == charged == len(rows) == AUDIENCE
    assert hot_claims >= MOSTLY
    assert hot_charges >= MOSTLY
