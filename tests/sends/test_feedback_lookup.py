"""A provider's bounce is tied back to its recipient through an index, however many
recipients past sends left (issue #14: cost stays flat as history grows); the freeze
writes nothing to that index."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.feedback.suppressions import Feedback, record_event
from scheduler_app.models import Recipient, SendBatch
from tests.helpers import indexes_covering

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

#: The message index, or a recipient partition's copy of it (scheduler_app.recipient_partitions).
MESSAGE_INDEX = re.compile(r"\bscheduler(_app)?_recipient(_\w+)?_message\b")


def message_index_in(names) -> bool:
    return any(MESSAGE_INDEX.fullmatch(name) for name in names)


def sent(batch: SendBatch, n: int) -> Recipient:
    return Recipient(
        batch=batch,
        recipient_key=str(n),
        address="customer%d@example.com" % n,
        status=Recipient.Status.SENT,
        attempts=1,
        provider_message_id="0100018c-%08d@email.example.com" % n,
    )


def test_a_bounce_by_message_id_reads_the_message_index(make_batch):
    batch = make_batch(status=SendBatch.Status.COMPLETED)
    Recipient.objects.bulk_create(sent(batch, n) for n in range(3000))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % Recipient._meta.db_table)

    with CaptureQueriesContext(connection) as queries:
        event = record_event(
            Feedback(
                event_id="esp-1",
                kind="hard_bounce",
                source="anymail",
                message_id="0100018c-00001234@email.example.com",
            )
        )

    assert event.recipient.recipient_key == "1234"
    (lookup,) = [q["sql"] for q in queries if '"provider_message_id" IN' in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + lookup)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert MESSAGE_INDEX.search(plan), plan


def test_only_a_recipient_with_a_message_id_is_in_the_message_index(make_batch):
    batch = make_batch()
    frozen = Recipient.objects.create(batch=batch, recipient_key="a", address="a@example.com")
    marked = Recipient.objects.create(
        batch=batch, recipient_key="b", address="b@example.com", status=Recipient.Status.SENT,
        provider_message_id="<b@example.com>",
    )  # fmt: skip

    assert not message_index_in(indexes_covering(Recipient._meta.db_table, frozen.pk))
    assert message_index_in(indexes_covering(Recipient._meta.db_table, marked.pk))
