"""A lane's claim and its charge of the attempt rewrite a recipient in place (a HOT update:
no new index entries), because a frozen audience leaves room on its pages (issue #14).

Each recipient row is updated three times in a send: the chunk's claim, the charge of
the attempt, the marker. The first two change no indexed column, so PostgreSQL can keep
the new version on the same page and add nothing to the table's four indexes, but only
if the page has room. With the default fillfactor of 100 the freeze packs the pages full,
and every claim and charge wrote a new row version elsewhere plus four index entries.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction

from scheduler_app.db import backend
from scheduler_app.models import SendBatch
from scheduler_app.sends.dispatch import start_sending
from tests.testapp.models import Customer

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

AUDIENCE = 400
CLAIM = "lane-1"
CLAIM_FOR = dt.timedelta(minutes=1)


def hot_updates_in(statement) -> tuple[int, int]:
    """Run ``statement`` in a transaction of its own; return (rows updated, HOT of them)."""
    counts = (
        "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
        "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
    )
    table = ["scheduler_app_recipient"] * 2
    with transaction.atomic(), connection.cursor() as cursor:
        # Counts not yet reported to the statistics may include earlier transactions'.
        cursor.execute(counts, table)
        updated_before, hot_before = cursor.fetchone()
        result = statement()
        cursor.execute(counts, table)
        updated, hot = cursor.fetchone()
    assert updated - updated_before == len(result)
    return updated - updated_before, hot - hot_before


def test_claiming_and_charging_recipients_of_a_frozen_audience_are_hot_updates(make_batch):
    Customer.objects.bulk_create(
        Customer(email="c%03d@example.com" % i, first_name="C%s" % i) for i in range(AUDIENCE)
    )
    batch = make_batch(expected_max_audience=AUDIENCE)
    assert start_sending(batch.pk).status == SendBatch.Status.SENDING  # the freeze commits

    claimed, hot_claims = hot_updates_in(
        lambda: backend().claim_recipients(
            batch_id=batch.pk, claim=CLAIM, limit=AUDIENCE, claim_for=CLAIM_FOR
        )
    )
    begun, hot_begins = hot_updates_in(
        lambda: backend().begin_recipients(
            recipient_ids=list(batch.recipients.values_list("pk", flat=True)),
            claim=CLAIM,
            claim_for=CLAIM_FOR,
        )
    )

    assert claimed == begun == AUDIENCE
    # A row or two at the end of a page may not fit; the pages are not packed full.
    assert hot_claims >= 0.8 * AUDIENCE
    assert hot_begins >= 0.8 * AUDIENCE
