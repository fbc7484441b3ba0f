"""Seed sends: the real message through the real provider to the seed list, recorded once."""

from __future__ import annotations

import pytest

from scheduler_app import controls
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import ControlEvent, Recipient, SendBatch
from scheduler_app.sends.batches import BatchStateError, seed_send
from scheduler_app.sends.checklist import run_checklist
from scheduler_app.sends.content import fingerprint
from tests.sends.helpers import run_lane_now
from tests.testapp.models import ProviderBehaviour, ProviderCall

SEEDS = ["qa@example.com", "boss@example.com"]


@pytest.fixture
def batch(make_batch, customer):
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    return make_batch(
        status=SendBatch.Status.DRAFT,
        subject_template="News for {{ first_name }}",
        seed_list=SEEDS,
        seed_context={"first_name": "Seedy"},
    )


def seed_item(batch: SendBatch) -> tuple[bool, str]:
    batch.refresh_from_db()
    item = next(i for i in run_checklist(batch) if i.name == "seed_sent")
    return item.ok, item.detail


@pytest.mark.django_db
def test_a_seed_send_goes_through_the_provider_and_is_recorded_as_seed_markers(batch):
    markers = seed_send(batch)

    digest = fingerprint(batch)[:12]
    keys = ["seed:%s:%s" % (digest, address) for address in SEEDS]
    assert [(m.recipient_key, m.address, m.is_seed, m.status) for m in markers] == [
        (key, address, True, "sent") for key, address in zip(keys, SEEDS, strict=True)
    ]
    assert list(ProviderCall.objects.values_list("idempotency_key", "address", "subject")) == [
        ("%s:%s" % (batch.pk, key), address, "News for Seedy")
        for key, address in zip(keys, SEEDS, strict=True)
    ]
    stored = Recipient.objects.get(recipient_key=keys[0])
    assert (stored.status, stored.attempts, stored.provider_message_id) == (
        "sent",
        1,
        "fake-%s:%s" % (batch.pk, keys[0]),
    )
    assert stored.sent_at is not None
    batch.refresh_from_db()
    assert (batch.total, batch.sent, batch.failed, batch.skipped) == (None, 0, 0, 0)
    assert batch.seed_fingerprint == fingerprint(batch)
    assert list(ControlEvent.objects.values_list("target", "action")) == [(str(batch.pk), "seed")]


@pytest.mark.django_db
def test_repeating_a_seed_send_does_not_send_again(batch):
    seed_send(batch)
    again = seed_send(batch)

    assert [m.status for m in again] == ["sent", "sent"]
    assert ProviderCall.objects.count() == 2
    assert Recipient.objects.filter(is_seed=True).count() == 2


@pytest.mark.django_db
def test_seeds_are_not_part_of_the_send_or_its_totals(batch):
    seed_send(batch)
    SendBatch.objects.filter(pk=batch.pk).update(status=SendBatch.Status.SCHEDULED)

    run = run_lane_now(batch)

    assert run.counts == {"sent": 2}
    batch.refresh_from_db()
    assert (batch.status, batch.total, batch.sent, batch.remaining) == ("completed", 2, 2, 0)
    assert sorted(ProviderCall.objects.values_list("address", flat=True)) == sorted(
        [*SEEDS, "ann@example.com", "bob@example.com"]
    )


@pytest.mark.django_db
def test_the_seed_item_passes_only_for_the_current_template(batch):
    assert seed_item(batch) == (False, "No seed send of the current template and audience.")
    seed_send(batch)
    assert seed_item(batch) == (True, "A seed send of the current template happened.")

    batch.text_template = "Hi {{ first_name|default:'there' }}, the summer news is here."
    batch.save()
    assert seed_item(batch) == (False, "No seed send of the current template and audience.")

    seed_send(batch)  # new content: new seed markers, sent again
    assert ProviderCall.objects.count() == 4
    assert seed_item(batch) == (True, "A seed send of the current template happened.")


@pytest.mark.django_db
def test_a_seed_that_cannot_render_fails_and_the_item_stays_failing(batch):
    batch.seed_context = {}
    batch.save()

    markers = seed_send(batch)

    assert {(m.status, m.last_error) for m in markers} == {
        ("failed", "Variable 'first_name' is missing from the recipient's data.")
    }
    assert ProviderCall.objects.count() == 0
    assert seed_item(batch)[0] is False


@pytest.mark.django_db
def test_a_seed_send_needs_a_seed_list(batch):
    batch.seed_list = []
    with pytest.raises(ValidationError) as caught:
        seed_send(batch)
    assert caught.value.message == "The batch has no seed list."


@pytest.mark.django_db
def test_a_seed_send_waits_behind_the_kill_switch(batch):
    """Everything paused means no message leaves, seeds included (they went out before)."""
    controls.pause("global", reason="incident")
    with pytest.raises(BatchStateError) as caught:
        seed_send(batch)
    assert caught.value.message == "Sends are paused by a kill switch; resume them to seed send."
    assert ProviderCall.objects.count() == 0
    assert not Recipient.objects.filter(batch=batch).exists()


@pytest.mark.django_db
def test_a_seed_that_failed_transiently_is_sent_when_the_seed_send_is_repeated(batch):
    ProviderBehaviour.objects.create(address="boss@example.com", answer="transient", times=1)
    first = seed_send(batch)
    assert [m.status for m in first] == ["sent", "failed"]
    assert seed_item(batch)[0] is False

    again = seed_send(batch)

    assert [m.status for m in again] == ["sent", "sent"]
    assert seed_item(batch) == (True, "A seed send of the current template happened.")
