"""The frozen context keeps its types, so the dry-run renders exactly what the send will.

The freeze copies the audience's context into Recipient.context as JSON in
the database; JSON has no dates. The freeze records each field's type on
the batch, and thaw_context() turns the frozen JSON back into dates,
datetimes, decimals, times, UUIDs and booleans. The dry-run goes through the
same JSON and the same thaw, so ``{{ renews_on|date:"j F Y" }}`` renders the
same in both, on both databases.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest
from django.core.files.storage import default_storage
from django.db.models import TextField
from django.db.models.functions import Cast

from scheduler_app import clock
from scheduler_app.models import Recipient, SendBatch
from scheduler_app.sends.audience import thaw_context
from scheduler_app.sends.content import compile_template
from scheduler_app.sends.dry_run import dry_run
from scheduler_app.sends.start import freeze_audience
from tests.sends.helpers import run_lane_now
from tests.testapp.models import Customer, ProviderCall

TYPED = {
    "renews_on": dt.date(2026, 3, 1),
    "paid_at": dt.datetime(2026, 2, 1, 9, 30, 15, 123456, tzinfo=dt.UTC),
    "balance": decimal.Decimal("12.50"),
    "call_at": dt.time(10, 30),
    "token": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "vip": True,
}
SUBJECT = "Renews on {{ renews_on|date:'j F Y' }}"
TEXT = (
    "Hi {{ first_name }}, your balance is {{ balance }} (paid {{ paid_at|date:'Y-m-d H:i:s.u' }}"
    ", call at {{ call_at|time:'H:i' }}, ref {{ token.hex }}, vip: {{ vip|yesno }})."
)
RENDERED_TEXT = (
    "Hi Ann, your balance is 12.50 (paid 2026-02-01 09:30:15.123456, call at 10:30, "
    "ref 12345678123456781234567812345678, vip: yes)."
)


@pytest.fixture
def typed_batch(make_batch):
    Customer.objects.create(email="ann@example.com", first_name="Ann", **TYPED)
    return make_batch(
        audience="tests.typed-customers", subject_template=SUBJECT, text_template=TEXT
    )


def frozen_context_as_text(batch: SendBatch) -> str:
    """Return the frozen context as the claim statement returns it (JSON text)."""
    return (
        Recipient.objects.filter(batch=batch)
        .values_list(Cast("context", TextField()), flat=True)
        .get()
    )


@pytest.mark.django_db
def test_the_freeze_records_the_context_types_and_thaw_gives_the_values_back(typed_batch):
    freeze_audience(typed_batch, now=clock.now())

    typed_batch.refresh_from_db()
    assert typed_batch.context_types == {
        "renews_on": "date",
        "paid_at": "datetime",
        "balance": "decimal:2",
        "call_at": "time",
        "token": "uuid",
        "vip": "bool",
    }
    as_text = frozen_context_as_text(typed_batch)
    as_dict = Recipient.objects.get(batch=typed_batch).context
    for raw in (as_text, as_dict):
        thawed = thaw_context(typed_batch.context_types, raw)
        assert thawed == {"first_name": "Ann", **TYPED}
        assert {name: type(value) for name, value in thawed.items()} == {
            "first_name": str,
            **{name: type(value) for name, value in TYPED.items()},
        }
        assert str(thawed["balance"]) == "12.50"


@pytest.mark.django_db(transaction=True)
def test_a_frozen_datetime_thaws_to_the_same_instant_whatever_the_database_time_zone(
    database_time_zone, typed_batch
):
    """On SQLite the freeze copies a datetime as stored, in the database's TIME_ZONE."""
    freeze_audience(typed_batch, now=clock.now())

    typed_batch.refresh_from_db()
    thawed = thaw_context(typed_batch.context_types, frozen_context_as_text(typed_batch))

    assert thawed["paid_at"] == TYPED["paid_at"]


@pytest.mark.django_db
def test_a_null_stays_none_and_a_batch_frozen_without_types_is_left_as_it_was(make_batch):
    Customer.objects.create(email="bob@example.com", first_name="Bob")
    batch = make_batch(audience="tests.typed-customers")
    freeze_audience(batch, now=clock.now())
    batch.refresh_from_db()

    thawed = thaw_context(batch.context_types, frozen_context_as_text(batch))

    assert thawed == {
        "first_name": "Bob",
        "renews_on": None,
        "paid_at": None,
        "balance": None,
        "call_at": None,
        "token": None,
        "vip": False,
    }
    assert thaw_context({}, '{"renews_on": "2026-03-01"}') == {"renews_on": "2026-03-01"}


@pytest.mark.django_db
def test_the_dry_run_and_the_frozen_row_render_date_filters_the_same(
    typed_batch, settings, tmp_path
):
    settings.MEDIA_ROOT = str(tmp_path)

    report = dry_run(typed_batch)
    freeze_audience(typed_batch, now=clock.now())
    typed_batch.refresh_from_db()
    frozen = thaw_context(typed_batch.context_types, frozen_context_as_text(typed_batch))
    message = compile_template(typed_batch).render("ann@example.com", frozen)

    assert (message.subject, message.text) == ("Renews on 1 March 2026", RENDERED_TEXT)
    assert report.summary["problems"] == 0
    with default_storage.open(report.path) as handle:
        last_line = handle.read().decode().splitlines()[-1]
    assert last_line.split("\t")[2:] == ["Renews on 1 March 2026", str(len(RENDERED_TEXT)), "ok"]


@pytest.mark.django_db
def test_a_real_send_renders_date_filters_from_the_frozen_row(typed_batch):
    run_lane_now(typed_batch)

    call = ProviderCall.objects.get()
    assert (call.subject, call.body) == ("Renews on 1 March 2026", RENDERED_TEXT)
