"""An audience's context cannot take the recipient's own names (key, address, timezone, to).

Refused when the AudienceQuery is built, so the dry-run, scheduling (which
needs a clean dry-run) and the freeze at send time all fail the same way,
before anything is rendered or sent.
"""

from __future__ import annotations

import pytest

from scheduler_app import clock
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.audience import AudienceQuery, audience, get_audience
from scheduler_app.sends.dry_run import dry_run
from scheduler_app.sends.start import freeze_audience
from tests.testapp.models import Customer


def reserved(name: str) -> str:
    return (
        "Context name %r is reserved: key, address, timezone and to are the recipient's own; "
        "give the context field another name, e.g. 'customer_%s'." % (name, name)
    )


@audience("tests.context-named")
def context_named(params):
    """Customers with one context field under the name params['name']."""
    return AudienceQuery(
        queryset=Customer.objects.all(),
        key="id",
        address="email",
        timezone="tz",
        context={params["name"]: "first_name"},
    )


@pytest.mark.parametrize("name", ["key", "address", "timezone", "to"])
def test_a_reserved_context_name_is_refused_when_the_query_is_built(name):
    with pytest.raises(ValidationError) as caught:
        AudienceQuery(
            queryset=Customer.objects.all(), key="id", address="email", context={name: "plan"}
        )

    assert caught.value.message == reserved(name)


def test_get_audience_names_the_audience_with_the_reason():
    with pytest.raises(ValidationError) as caught:
        get_audience("tests.context-named", {"name": "address"})

    assert caught.value.message == "Audience 'tests.context-named': %s" % reserved("address")


@pytest.mark.django_db
def test_dry_run_and_freeze_fail_the_same_way_and_freeze_nothing(
    customer, make_batch, settings, tmp_path
):
    settings.MEDIA_ROOT = str(tmp_path)
    customer("ann@example.com", "Ann")
    batch = make_batch(
        status=SendBatch.Status.DRAFT,
        audience="tests.context-named",
        audience_params={"name": "address"},
    )
    expected = "Audience 'tests.context-named': %s" % reserved("address")

    with pytest.raises(ValidationError) as at_dry_run:
        dry_run(batch)
    with pytest.raises(ValidationError) as at_freeze:
        freeze_audience(batch, now=clock.now())

    assert at_dry_run.value.message == at_freeze.value.message == expected
    assert not Recipient.objects.filter(batch=batch).exists()
    batch.refresh_from_db()
    assert (batch.dry_run_at, batch.frozen_at) == (None, None)


def test_names_that_merely_contain_a_reserved_word_are_fine():
    query = AudienceQuery(
        queryset=Customer.objects.all(),
        key="id",
        address="email",
        context={"postal_address": "plan", "api_key": "plan", "to_do": "plan"},
    )

    assert list(query.context) == ["postal_address", "api_key", "to_do"]
