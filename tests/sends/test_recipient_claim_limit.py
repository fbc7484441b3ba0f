"""A recipient claim takes at most its limit, whatever the planner believes of the table.

With statistics from a time the table was empty (a new install, a table emptied by
retention, before autovacuum analyses it again), PostgreSQL joined the claimed rows to
the table the other way round: the table outside, the locking subquery inside, run
again for each outer row. Each new run skipped the rows the statement had already
updated and locked the next ones, so one lane's claim took every due recipient of the
batch. The locking query now runs once, as a materialized CTE.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from scheduler_app.db import backend
from scheduler_app.models import Recipient
from tests.db.test_claim_limits import analyse_while_empty

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


def test_a_recipient_claim_takes_at_most_its_limit_with_the_statistics_of_an_empty_table(
    customer, make_batch
):
    for n in range(5):
        customer("c%s@example.com" % n, "C")
    batch = make_batch()
    # Rows a retention prune deleted: pages on disk, no live row, then an ANALYZE.
    past = [
        Recipient(batch=batch, recipient_key="old%s" % n, address="x@example.com")
        for n in range(300)
    ]
    Recipient.objects.bulk_create(past)
    Recipient.objects.filter(batch=batch).delete()
    analyse_while_empty(Recipient._meta.db_table)
    Recipient.objects.bulk_create(
        Recipient(
            batch=batch,
            recipient_key=str(n),
            address="c%s@example.com" % n,
            next_attempt_at=timezone.now() - dt.timedelta(minutes=1),
        )
        for n in range(5)
    )

    claimed = backend().claim_recipients(
        batch_id=batch.pk, claim="lane", limit=2, claim_for=dt.timedelta(seconds=30)
    )

    assert len(claimed) == 2
    assert Recipient.objects.filter(batch=batch, claimed_by="lane").count() == 2
