"""Fail closed at send time: a recipient whose message cannot render fails, the rest go out."""

from __future__ import annotations

import pytest

from scheduler_app.models import Recipient, SendBatch
from tests.helpers import running_worker, wait_until
from tests.sends.helpers import recipient, run_lane_now
from tests.testapp.models import ProviderCall

EMPTY_FIRST_NAME = (
    "Variable 'first_name' is empty for this recipient (in the text body); "
    'add a |default:"..." if that is expected.'
)


@pytest.fixture
def audience(customer):
    """A named customer, one whose optional fields are all empty, and an injected ``{{``."""
    customer("ann@example.com", "Ann", tz="Europe/London", plan="pro")
    customer("blank@example.com")  # first name and time zone empty, default plan
    customer("oops@example.com", "{{ oops }}")


def marker_states(batch: SendBatch) -> dict[str, tuple[str, str]]:
    return {
        r.address: (r.status, r.last_error)
        for r in Recipient.objects.filter(batch=batch, is_seed=False)
    }


def bodies() -> dict[str, str]:
    return dict(ProviderCall.objects.values_list("address", "body"))


@pytest.mark.django_db
def test_an_empty_greeting_fails_that_recipient_and_the_others_are_sent(audience, make_batch):
    batch = make_batch(text_template="Hi {{ first_name }}")

    run = run_lane_now(batch)

    assert run.counts == {"sent": 1, "failed": 2}
    assert marker_states(batch) == {
        "ann@example.com": ("sent", ""),
        "blank@example.com": ("failed", EMPTY_FIRST_NAME),
        "oops@example.com": ("failed", "The text body still contains template syntax '{{'."),
    }
    assert bodies() == {"ann@example.com": "Hi Ann"}
    batch.refresh_from_db()
    assert (batch.status, batch.total, batch.sent, batch.failed, batch.skipped) == (
        "completed",
        3,
        1,
        2,
        0,
    )
    assert batch.remaining == 0


@pytest.mark.django_db
def test_an_explicit_default_greets_the_recipient_with_empty_fields(audience, make_batch):
    batch = make_batch(text_template="Hi {{ first_name|default:'there' }}")

    run_lane_now(batch)

    assert bodies() == {"ann@example.com": "Hi Ann", "blank@example.com": "Hi there"}
    assert recipient(batch, "blank@example.com").status == "sent"
    assert recipient(batch, "oops@example.com").last_error == (
        "The text body still contains template syntax '{{'."
    )


@pytest.mark.django_db
def test_a_variable_missing_from_the_data_fails_only_the_recipients_who_need_it(
    audience, make_batch
):
    batch = make_batch(
        text_template="{% if plan == 'pro' %}Code {{ discount }}. {% endif %}"
        "Hi {{ first_name|default:'there' }}"
    )

    run_lane_now(batch)

    assert marker_states(batch)["ann@example.com"] == (
        "failed",
        "Variable 'discount' is missing from the recipient's data.",
    )
    assert bodies() == {"blank@example.com": "Hi there"}


@pytest.mark.django_db
def test_a_variable_missing_for_everyone_sends_nothing(audience, make_batch):
    batch = make_batch(subject_template="For {{ last_name }}")

    run_lane_now(batch)

    assert set(marker_states(batch).values()) == {
        ("failed", "Variable 'last_name' is missing from the recipient's data.")
    }
    assert ProviderCall.objects.count() == 0


@pytest.mark.django_db
def test_a_filter_failing_on_one_recipients_data_fails_only_that_recipient(customer, make_batch):
    customer("ann@example.com", "10")
    customer("bob@example.com", "n/a")
    batch = make_batch(text_template="Even: {{ first_name|divisibleby:2 }}")

    run_lane_now(batch)

    assert marker_states(batch) == {
        "ann@example.com": ("sent", ""),
        "bob@example.com": (
            "failed",
            "Rendering the text body failed: ValueError: "
            "invalid literal for int() with base 10: 'n/a'",
        ),
    }


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_fails_closed_per_recipient(audience, make_batch):
    """The same through runworker's loop: schedule, lanes, markers, completed."""
    from scheduler_app.sends.batches import schedule_batch

    batch = make_batch(status=SendBatch.Status.DRAFT, text_template="Hi {{ first_name }}")
    schedule_batch(
        batch,
        relax=(
            "audience_within_limit",
            "dry_run_clean",
            "seed_sent",
            "schedule_unambiguous",
            "no_other_large_batch",
        ),
    )

    with running_worker():
        wait_until(
            lambda: SendBatch.objects.filter(pk=batch.pk, status="completed").exists(),
            message="the batch to complete",
        )

    assert marker_states(batch) == {
        "ann@example.com": ("sent", ""),
        "blank@example.com": ("failed", EMPTY_FIRST_NAME),
        "oops@example.com": ("failed", "The text body still contains template syntax '{{'."),
    }
    assert list(ProviderCall.objects.values_list("idempotency_key", "body")) == [
        ("%s:%s" % (batch.pk, recipient(batch, "ann@example.com").recipient_key), "Hi Ann")
    ]
