"""Bounces, complaints and unsubscribes feed one suppression list: anymail's signal, the webhook."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json

import django
import pytest
from anymail.signals import AnymailTrackingEvent, tracking
from django.core import mail
from django.db import connection
from django.test import override_settings

from scheduler_app import clock
from scheduler_app.alerts import evaluate
from scheduler_app.clock import frozen_clock
from scheduler_app.exceptions import UnsuppressibleAddress
from scheduler_app.feedback.suppressions import suppress
from scheduler_app.models import Alert, FeedbackEvent, Recipient, SendBatch, Suppression
from scheduler_app.sends.dry_run import dry_run
from tests.sends.helpers import recipient, run_lane_now
from tests.settings import SCHEDULER_APP

SECRET = SCHEDULER_APP["FEEDBACK_WEBHOOK_SECRET"]
T0 = dt.datetime(2027, 3, 1, 12, 0, tzinfo=dt.UTC)

# Django 6.1 deprecates EMAIL_BACKEND in favour of MAILERS.
ANYMAIL_TEST_BACKEND = (
    {"MAILERS": {"default": {"BACKEND": "anymail.backends.test.EmailBackend"}}}
    if django.VERSION >= (6, 1)
    else {"EMAIL_BACKEND": "anymail.backends.test.EmailBackend"}
)


def anymail_event(event_type: str, **fields) -> None:
    """Send anymail's tracking signal as its webhook views do, for a made-up ESP."""
    event = AnymailTrackingEvent(event_type=event_type, esp_event={}, **fields)
    tracking.send(sender=object, event=event, esp_name="TestESP")


#: A valid address of 310 characters whose lower-case form has 610 (U+0130 becomes two).
DOTTED_CAPITAL_I = "a@" + ".".join(["\u0130" * 60] * 5) + ".com"


def post_webhook(client, events, *, secret: str = SECRET):
    return post_signed(client, json.dumps({"events": events}).encode(), secret=secret)


def post_signed(client, body: bytes, *, secret: str = SECRET):
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return client.post(
        "/mail/feedback/",
        body,
        content_type="application/json",
        headers={"X-Scheduler-Signature": signature},
    )


@pytest.fixture
def sent_batch(customer, make_batch):
    """A batch sent through the email provider to ann, bob and cy."""
    for name in ("ann", "bob", "cy"):
        customer("%s@example.com" % name, name.title())
    batch = make_batch(provider="email")
    run_lane_now(batch)
    return batch


@pytest.mark.django_db
def test_anymail_bounce_complaint_and_unsubscribe_events_suppress_and_tie_back(sent_batch):
    keys = {m.to[0]: m.metadata["scheduler_key"] for m in mail.outbox}

    anymail_event(
        "bounced",
        event_id="ev-1",
        recipient="ann@example.com",
        metadata={"scheduler_key": keys["ann@example.com"]},
        reject_reason="bounced",
        description="550 mailbox unknown",
    )
    anymail_event("complained", event_id="ev-2", recipient="bob@example.com")
    anymail_event(
        "unsubscribed",
        event_id="ev-3",
        recipient="cy@example.com",
        metadata={"scheduler_key": keys["cy@example.com"]},
    )
    anymail_event("delivered", event_id="ev-4", recipient="cy@example.com")  # ignored

    rows = {s.address: (s.reason, s.source, s.scope) for s in Suppression.objects.all()}
    assert rows == {
        "ann@example.com": ("hard_bounce", "anymail", ""),
        "bob@example.com": ("complaint", "anymail", ""),
        "cy@example.com": ("unsubscribed", "anymail", "tests.customers"),
    }
    ann = FeedbackEvent.objects.get(event_id="anymail:TestESP:ev-1")
    assert (ann.batch_id, ann.recipient_id) == (
        sent_batch.pk,
        recipient(sent_batch, "ann@example.com").pk,
    )
    assert "550 mailbox unknown" in ann.detail
    # bob's event carried no key: not tied to a batch, still suppressed for all mail.
    assert FeedbackEvent.objects.get(event_id="anymail:TestESP:ev-2").batch_id is None


@pytest.mark.django_db
def test_an_event_is_tied_back_by_the_provider_message_id(sent_batch):
    ann = recipient(sent_batch, "ann@example.com")

    anymail_event("complained", event_id="ev-9", message_id=ann.provider_message_id.strip("<>"))

    event = FeedbackEvent.objects.get()
    assert (event.recipient_id, event.batch_id, event.address) == (
        ann.pk,
        sent_batch.pk,
        "ann@example.com",
    )
    assert Suppression.objects.get().address == "ann@example.com"


@pytest.mark.django_db
@pytest.mark.parametrize("message_id", ["<>", "< >", "<<>>"])
def test_an_empty_message_id_ties_the_event_to_no_recipient(sent_batch, message_id):
    """ "<>" (the null sender of a bounce, say) is no message id: it must not match the
    recipients that have none (not sent yet, failed, skipped)."""
    bob = recipient(sent_batch, "bob@example.com")
    Recipient.objects.filter(pk=bob.pk).update(status="failed", provider_message_id="")

    anymail_event("bounced", event_id="ev-10", message_id=message_id, recipient="zed@example.com")

    event = FeedbackEvent.objects.get()
    assert (event.recipient_id, event.batch_id) == (None, None)


@pytest.mark.django_db
def test_the_same_event_twice_changes_nothing(sent_batch):
    for _ in range(2):
        anymail_event("bounced", event_id="ev-1", recipient="ann@example.com")
    assert FeedbackEvent.objects.count() == 1
    assert Suppression.objects.count() == 1


@pytest.mark.django_db
def test_soft_bounces_suppress_only_after_the_limit_within_the_window():
    with frozen_clock(T0) as clock_:
        for n in range(2):
            anymail_event(
                "deferred", event_id="old-%s" % n, recipient="ann@example.com", timestamp=T0
            )
        clock_.advance(dt.timedelta(days=8))  # those two are outside the 7-day window now
        later = clock.now()
        for n in range(2):
            anymail_event(
                "deferred", event_id="new-%s" % n, recipient="ann@example.com", timestamp=later
            )
        assert not Suppression.objects.exists()

        anymail_event("deferred", event_id="new-2", recipient="ANN@example.com", timestamp=later)

    row = Suppression.objects.get()
    assert (row.address, row.reason) == ("ann@example.com", "soft_bounces")


@pytest.mark.django_db
def test_an_esp_reporting_each_retry_of_one_delayed_message_counts_one_soft_bounce(
    customer, make_batch
):
    """Greylisting: the ESP reports a deferral per retry of the same message; that message
    is one soft bounce, and three messages deferred are three."""
    customer("ann@example.com", "Ann")
    batches = [make_batch(name="News %s" % n, provider="email") for n in range(3)]
    for batch in batches:
        run_lane_now(batch)
    keys = ["%s:%s" % (b.pk, recipient(b, "ann@example.com").recipient_key) for b in batches]

    for retry in range(4):
        anymail_event(
            "deferred",
            event_id="first-%s" % retry,
            recipient="ann@example.com",
            metadata={"scheduler_key": keys[0]},
        )
    assert not Suppression.objects.exists()

    for n in (1, 2):
        anymail_event(
            "deferred",
            event_id="other-%s" % n,
            recipient="ann@example.com",
            metadata={"scheduler_key": keys[n]},
        )
    row = Suppression.objects.get()
    assert (row.reason, row.detail) == ("soft_bounces", "3 soft bounces within 604800.0s")


@pytest.mark.django_db
def test_each_retry_of_one_delayed_single_message_counts_one_soft_bounce():
    """A single message has no recipient row: its reports count once by its message id
    (with or without angle brackets), and another message or a report naming none counts."""
    for retry in range(3):
        anymail_event(
            "deferred",
            event_id="reset-%s" % retry,
            recipient="ann@example.com",
            message_id="<reset-1@example.com>" if retry else "reset-1@example.com",
        )
    assert not Suppression.objects.exists()
    assert set(FeedbackEvent.objects.values_list("message", flat=True)) == {"reset-1@example.com"}

    anymail_event(
        "deferred", event_id="other", recipient="ann@example.com", message_id="<other@example.com>"
    )
    assert not Suppression.objects.exists()
    anymail_event("deferred", event_id="unnamed", recipient="ann@example.com")

    row = Suppression.objects.get()
    assert (row.reason, row.detail) == ("soft_bounces", "3 soft bounces within 604800.0s")


@pytest.mark.django_db
def test_a_worker_of_the_previous_release_still_records_feedback_events():
    """Migration 0030 is additive: an insert without the new column gets ''."""
    columns = "event_id, kind, source, address, detail, occurred_at, recorded_at"
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO %s (%s) VALUES (%%s, %%s, %%s, %%s, %%s, %%s, %%s)"
            % (FeedbackEvent._meta.db_table, columns),
            ["old", "soft_bounce", "anymail", "ann@example.com", "", T0, T0],
        )

    assert FeedbackEvent.objects.get().message == ""


@pytest.mark.django_db
def test_the_webhook_records_signed_events_and_counts_duplicates(client, sent_batch):
    bob = recipient(sent_batch, "bob@example.com")
    events = [
        {"id": "w1", "type": "hard_bounce", "address": "ann@example.com"},
        {"id": "w2", "type": "complaint", "key": "%s:%s" % (sent_batch.pk, bob.recipient_key)},
    ]

    first = post_webhook(client, events)
    again = post_webhook(client, events)

    assert (first.status_code, first.json()) == (
        200,
        {"recorded": 2, "duplicates": 0, "unmatched": []},
    )
    assert again.json() == {"recorded": 0, "duplicates": 2, "unmatched": []}
    assert FeedbackEvent.objects.get(event_id="webhook:w2").recipient_id == bob.pk
    assert set(Suppression.objects.values_list("address", "reason")) == {
        ("ann@example.com", "hard_bounce"),
        ("bob@example.com", "complaint"),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("offset", ["+16:00", "+23:59", "-18:00"])
def test_an_offset_past_postgresqls_range_is_stored_as_the_same_instant(client, offset):
    """ISO 8601 allows offsets to +-23:59; PostgreSQL refused past +-15:59 (a 500, and the
    events after it in the body lost until the source retried)."""
    when = "2026-11-01T10:00:00" + offset
    events = [
        {"id": "o1", "type": "hard_bounce", "address": "o1@example.com", "occurred_at": when},
        {"id": "o2", "type": "hard_bounce", "address": "o2@example.com"},
    ]

    response = post_webhook(client, events)

    assert (response.status_code, response.json()["recorded"]) == (200, 2)
    stored = FeedbackEvent.objects.get(event_id="webhook:o1").occurred_at
    assert stored == dt.datetime.fromisoformat(when)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([{"id": "1", "type": "opened", "address": "a@example.com"}], "has type 'opened'"),
        ([{"type": "complaint", "address": "a@example.com"}], 'needs an "id"'),
        ([{"id": "1", "type": "complaint"}], "needs an address, a message_id or a key"),
        ([{"id": "1", "type": "complaint", "address": "x" * 400}], "is not an email address"),
        ([{"id": 1, "type": "complaint", "address": "a@x.com"}], "'id' must be a string"),
        ([{"id": "1", "type": "complaint", "address": "a\x00@b.c"}], "without NUL"),
        # Valid JSON (a \ud800 escape) that no database can store.
        ([{"id": "1\ud800", "type": "complaint", "address": "a@x.com"}], "lone surrogates"),
        (
            [{"id": "1", "type": "complaint", "address": "a@x.com", "detail": "550 \ud800"}],
            "lone surrogates",
        ),
        ([{"id": "1", "type": "complaint", "address": "a@ex\ud800.com"}], "lone surrogates"),
        # 310 characters; lower-cased, each U+0130 becomes two: 610.
        (
            [{"id": "1", "type": "complaint", "address": DOTTED_CAPITAL_I}],
            "is longer than 320 characters once lower-cased",
        ),
        (
            [{"id": "1", "type": "complaint", "address": "a@x.com", "occurred_at": "yesterday"}],
            "ISO 8601",
        ),
        (
            [
                {
                    "id": "1",
                    "type": "complaint",
                    "address": "a@x.com",
                    "occurred_at": "2027-13-45T00:00:00Z",
                }
            ],
            "Event '1': occurred_at must be ISO 8601",
        ),
        (
            [
                {
                    "id": "1",
                    "type": "complaint",
                    "address": "a@x.com",
                    "occurred_at": "0001-01-01T00:00:00+05:00",
                }
            ],
            "Event '1': occurred_at must lie between 1970 and a day from now.",
        ),
        (
            [
                {
                    "id": "1",
                    "type": "soft_bounce",
                    "address": "a@x.com",
                    "occurred_at": "0001-01-01T00:00:00Z",
                }
            ],
            "Event '1': occurred_at must lie between 1970 and a day from now.",
        ),
        (
            [
                {
                    "id": "1",
                    "type": "complaint",
                    "address": "a@x.com",
                    "occurred_at": "9999-12-31T23:59:59-05:00",
                }
            ],
            "Event '1': occurred_at must lie between 1970 and a day from now.",
        ),
        ([], "at least one event"),
    ],
)
def test_bad_webhook_input_gets_a_400_that_says_what_is_wrong(client, body, message):
    response = post_webhook(client, body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
    assert not FeedbackEvent.objects.exists()


@pytest.mark.django_db
def test_an_event_that_ties_back_to_nobody_is_reported_unmatched_not_as_a_duplicate(client):
    response = post_webhook(client, [{"id": "w9", "type": "complaint", "key": "999:gone"}])

    assert response.status_code == 200
    body = response.json()
    assert (body["recorded"], body["duplicates"]) == (0, 0)
    assert [u["id"] for u in body["unmatched"]] == ["webhook:w9"]
    assert not FeedbackEvent.objects.exists()


@pytest.mark.django_db
def test_a_body_nested_too_deeply_is_a_400_not_a_server_error(client):
    response = post_signed(client, b"[" * 100_000 + b"]" * 100_000)

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "The body is not JSON: it is nested too deeply."


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_is_a_413_that_says_so(client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    events = [{"id": "1", "type": "complaint", "address": "a@x.com", "detail": "x" * 2000}]

    response = post_webhook(client, events)

    assert response.status_code == 413
    assert response.json()["error"] == {
        "code": "too_large",
        "message": "The body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE (1000 bytes): "
        "send fewer events per request.",
    }
    assert not FeedbackEvent.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["\u00b2:ann", "9" * 30 + ":ann"])
def test_a_key_whose_batch_part_is_no_batch_id_is_reported_unmatched(client, key):
    """A superscript digit, or a number past any id, names no batch: unmatched, not a 500."""
    response = post_webhook(client, [{"id": "w1", "type": "complaint", "key": key}])

    assert response.status_code == 200
    assert [u["id"] for u in response.json()["unmatched"]] == ["webhook:w1"]
    assert not FeedbackEvent.objects.exists()


@pytest.mark.django_db
def test_a_bounce_for_the_ascii_form_of_an_idn_address_stops_the_next_batch(
    client, customer, make_batch
):
    """Django's mail sends ann@bücher.example as ann@xn--bcher-kva.example, the form an ESP
    reports back: the list takes both spellings for one address."""
    customer("ann@bücher.example", "Ann")
    customer("bob@example.com", "Bob")
    bounce = {"id": "b1", "type": "hard_bounce", "address": "Ann@XN--BCHER-KVA.example"}
    assert post_webhook(client, [bounce]).json()["recorded"] == 1

    batch = make_batch()
    run_lane_now(batch)

    ann = recipient(batch, "ann@bücher.example")
    assert (ann.status, ann.last_error) == ("skipped", "suppressed: hard bounce (all mail)")
    assert Suppression.objects.get().address == "ann@xn--bcher-kva.example"


@pytest.mark.django_db
def test_a_long_source_event_id_is_stored_hashed_and_still_deduplicated(client):
    long_id = "e" * 400
    for _ in range(2):
        post_webhook(client, [{"id": long_id, "type": "complaint", "address": "a@example.com"}])
    event = FeedbackEvent.objects.get()
    assert event.event_id.startswith("webhook:sha256:")


@pytest.mark.django_db
def test_a_webhook_without_a_valid_signature_is_refused(client):
    events = [{"id": "w1", "type": "complaint", "address": "ann@example.com"}]
    assert post_webhook(client, events, secret="not-the-secret-at-all").status_code == 403
    unsigned = client.post(
        "/mail/feedback/", json.dumps({"events": events}), content_type="application/json"
    )
    assert unsigned.status_code == 403
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_complaint_spike_pauses_the_sending_batch(customer, make_batch):
    with override_settings(
        SCHEDULER_APP={**SCHEDULER_APP, "FEEDBACK_MIN_SENT": 10, "COMPLAINT_RATE_LIMIT": 0.1}
    ):
        for n in range(20):
            customer("c%s@example.com" % n)
        batch = make_batch(provider="email", expected_max_audience=100)
        run_lane_now(batch)
        SendBatch.objects.filter(pk=batch.pk).update(status=SendBatch.Status.SENDING)
        keys = {m.to[0]: m.metadata["scheduler_key"] for m in mail.outbox}

        for n in range(2):  # 2 of 20 is 10%: at the limit, not past it
            address = "c%s@example.com" % n
            anymail_event(
                "complained",
                event_id="c%s" % n,
                recipient=address,
                metadata={"scheduler_key": keys[address]},
            )
        batch.refresh_from_db()
        assert batch.status == "sending"

        anymail_event(
            "complained",
            event_id="c2",
            recipient="c2@example.com",
            metadata={"scheduler_key": keys["c2@example.com"]},
        )

        batch.refresh_from_db()
        assert batch.status == "paused"
        assert batch.status_reason == (
            "complaint rate 15.00% (3 of 20 sent) passed its limit of 10.00%"
        )
        evaluate()

        # An operator resumes it: the complaints before do not pause it again, a new spike does.
        from scheduler_app.sends.batches import resume_batch

        assert resume_batch(batch.pk)
        SendBatch.objects.filter(pk=batch.pk).update(status=SendBatch.Status.SENDING)
        anymail_event("complained", event_id="c2", recipient="c2@example.com")  # a duplicate
        anymail_event(
            "complained",
            event_id="c3",
            recipient="c3@example.com",
            metadata={"scheduler_key": keys["c3@example.com"]},
        )
        batch.refresh_from_db()
        assert batch.status == "sending"
        for n in (4, 5):
            address = "c%s@example.com" % n
            anymail_event(
                "complained",
                event_id="c%s" % n,
                recipient=address,
                metadata={"scheduler_key": keys[address]},
            )
        batch.refresh_from_db()
        assert (batch.status, batch.status_reason) == (
            "paused",
            "complaint rate 15.00% (3 of 20 sent) passed its limit of 10.00%",
        )

    alert = Alert.objects.get(kind="send_feedback")
    assert alert.subject == "batch:%s" % batch.pk
    assert alert.numbers["count"] == 3
    assert "complaint rate 15.00%" in alert.summary


@pytest.mark.django_db
def test_the_dry_run_shows_who_would_be_skipped_and_why(customer, make_batch, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    Suppression.objects.create(
        address="bob@example.com", scope="tests.customers", reason="unsubscribed", source="link"
    )
    batch = make_batch(status=SendBatch.Status.DRAFT)

    report = dry_run(batch)

    assert report.summary["suppressed"] == 1
    text = (tmp_path / report.path).read_text()
    bob_line = next(line for line in text.splitlines() if "\tbob@example.com\t" in line)
    assert bob_line.endswith("suppressed: unsubscribed (tests.customers): skipped at send time")


@pytest.mark.django_db
@override_settings(**ANYMAIL_TEST_BACKEND)
def test_with_anymail_the_esps_message_id_is_stored_and_ties_events_back(customer, make_batch):
    customer("ann@example.com", "Ann")
    batch = make_batch(provider="email")
    from scheduler_app.sends.providers import reset_providers

    reset_providers()  # the email provider keeps a connection to the configured backend
    try:
        run_lane_now(batch)
    finally:
        reset_providers()

    ann = recipient(batch, "ann@example.com")
    assert ann.provider_message_id == str(mail.outbox[0].anymail_status.message_id)
    anymail_event("complained", event_id="esp-1", message_id=ann.provider_message_id)
    assert FeedbackEvent.objects.get().recipient_id == ann.pk


@pytest.mark.django_db
@pytest.mark.parametrize(
    "recipient", ["ann\x00@example.com", "ann@ex\ud800ample.com", DOTTED_CAPITAL_I, "not-mail"]
)
def test_an_anymail_event_for_an_address_the_list_cannot_hold_is_logged_and_dropped(
    recipient, caplog
):
    """Raising would fail anymail's webhook view (a 500), and the ESP would send the whole
    batch of events again."""
    anymail_event("bounced", event_id="ev-bad", recipient=recipient)

    assert not FeedbackEvent.objects.exists()
    assert not Suppression.objects.exists()
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "anymail event dropped esp=TestESP event=ev-bad: its recipient %r is not an address "
        "the list can hold" % recipient
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"description": "550 mailbox \ud800 unknown"}, id="surrogate-in-detail"),
        pytest.param({"mta_response": "550 \x00 unknown"}, id="nul-in-detail"),
        pytest.param({"event_id": "ev\x00"}, id="nul-in-event-id"),
        pytest.param({"event_id": "ev\ud800"}, id="surrogate-in-event-id"),
        pytest.param({"message_id": "<a\x00b@example.com>"}, id="nul-in-message-id"),
        pytest.param({"metadata": {"scheduler_key": "1:a\x00"}}, id="nul-in-metadata-key"),
        pytest.param({"metadata": {"scheduler_key": "1:a\ud800"}}, id="surrogate-in-key"),
    ],
)
def test_an_anymail_bounce_with_text_a_database_cannot_store_is_still_recorded(fields):
    """Raising would fail anymail's webhook view (a 500): the ESP would send the whole POST
    again and again, and the bounces after this one in it would never be recorded."""
    anymail_event("bounced", **{"event_id": "ev-1", "recipient": "ann@example.com", **fields})

    event = FeedbackEvent.objects.get()
    assert (event.address, event.recipient_id) == ("ann@example.com", None)
    assert Suppression.objects.get().reason == "hard_bounce"


@pytest.mark.django_db
def test_an_anymail_detail_keeps_its_text_without_what_a_database_cannot_store():
    anymail_event(
        "bounced",
        event_id="ev-1",
        recipient="ann@example.com",
        reject_reason="bounced",
        description="550 mailbox \ud800 unknown",
        mta_response="550 \x00unknown",
    )

    assert FeedbackEvent.objects.get().detail == "bounced 550 mailbox ? unknown 550 unknown"


@pytest.mark.django_db
@pytest.mark.parametrize("event_id", ["ev\x00", "ev\ud800"])
def test_an_anymail_event_id_a_database_cannot_store_is_stored_hashed_and_still_deduplicated(
    event_id,
):
    for _ in range(2):
        anymail_event("bounced", event_id=event_id, recipient="ann@example.com")

    digest = hashlib.sha256(event_id.encode(errors="surrogatepass")).hexdigest()
    assert list(FeedbackEvent.objects.values_list("event_id", flat=True)) == [
        "anymail:TestESP:sha256:%s" % digest
    ]


@pytest.mark.django_db
def test_an_anymail_message_id_or_key_a_database_cannot_store_ties_back_to_nobody(sent_batch):
    """Cleaned of what cannot be stored, an id could tie the event to someone else."""
    anymail_event(
        "complained",
        event_id="ev-1",
        message_id="<a\x00b@example.com>",
        metadata={"scheduler_key": "%s:ann\x00" % sent_batch.pk},
    )

    assert not FeedbackEvent.objects.exists()


@pytest.mark.django_db
def test_a_webhook_event_for_a_recipient_too_long_once_lower_cased_is_listed_unmatched(
    client, customer, make_batch, caplog
):
    """Tied back by its key to an address whose lower-case form does not fit the list."""
    customer(DOTTED_CAPITAL_I, "Ann")
    batch = make_batch()
    run_lane_now(batch)
    key = recipient(batch, DOTTED_CAPITAL_I).idempotency_key

    response = post_webhook(client, [{"id": "w1", "type": "complaint", "key": key}])

    assert response.status_code == 200
    assert response.json() == {
        "recorded": 0,
        "duplicates": 0,
        "unmatched": [
            {
                "id": "webhook:w1",
                "message": "This address cannot be unsubscribed automatically: in lower case it "
                "is too long to list.",
            }
        ],
    }
    assert not FeedbackEvent.objects.exists()
    assert not Suppression.objects.exists()
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "feedback event refused event=webhook:w1: its address is longer than 320 characters "
        "once lower-cased",
        "feedback event unmatched event=webhook:w1",
    ]


@pytest.mark.django_db
def test_suppressing_an_address_too_long_once_lower_cased_is_refused():
    with pytest.raises(UnsuppressibleAddress):
        suppress(DOTTED_CAPITAL_I, reason="complaint", source="admin")

    assert not Suppression.objects.exists()
