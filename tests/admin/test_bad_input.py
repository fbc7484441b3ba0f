"""Bad input on the admin pages: a 400, a redirect with a message or a form error, never a 500."""

from __future__ import annotations

import pytest

from scheduler_app import schedule
from scheduler_app.models import Schedule
from tests.admin.conftest import changelist, get, messages_of

pytestmark = pytest.mark.django_db

URL = "/admin/scheduler_app/latenessoverview/"


@pytest.mark.parametrize("given", ["99999999999999999999", "3155760001"])
def test_overdue_threshold_too_large_answers_400_with_a_message(admin, given):
    response = admin.get(URL, {"overdue": given})

    assert response.status_code == 400
    assert messages_of(response) == [
        (
            "error",
            "overdue must be a number of seconds from 0 to 3155760000 (100 years); got %s." % given,
        )
    ]
    assert response.context["threshold"] == 60


def test_largest_overdue_threshold_is_accepted(admin):
    response = admin.get(URL, {"overdue": "3155760000"})

    assert response.status_code == 200
    assert response.context["threshold"] == 3155760000


def test_schedule_payload_with_a_nul_is_a_form_error_not_a_500(admin):
    response = admin.post(
        "/admin/scheduler_app/schedule/add/",
        {
            "name": "nul",
            "task_name": "tests.noop",
            "payload": '{"to": "a\\u0000"}',
            "queue": "",
            "enabled": "on",
            "kind": "cron",
            "cron": "0 3 * * *",
            "timezone": "UTC",
            "overlap_policy": "skip",
            "misfire_policy": "run_once",
            "misfire_grace": "00:01:00",
            "jitter": "0",
            "occurrences-TOTAL_FORMS": "0",
            "occurrences-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "payload": [
            "The payload contains a NUL character (\\x00), which the database cannot store."
        ]
    }
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("model", "parameter"),
    [
        ("job", "task_name"),
        ("job", "queue"),
        ("job", "status"),
        ("scheduleoccurrence", "outcome"),
        ("recipient", "status"),
        ("prunerun", "source"),
    ],
)
def test_a_list_filter_value_with_a_nul_shows_the_list_unfiltered_with_a_message(
    admin, model, parameter
):
    """No stored text holds a NUL (PostgreSQL refuses it, mid-render: a 500)."""
    schedule("tests.record", {}, delay=3600)

    response = get(admin, changelist(model), {parameter: "tests.record\x00", "o": "1"})

    assert (response.status_code, response["Location"]) == (302, changelist(model))
    assert messages_of(response) == [
        (
            "error",
            "A filter in the address held a NUL character, which no stored text can hold: "
            "the list is shown without filters.",
        )
    ]
    assert get(admin, changelist(model)).status_code == 200


@pytest.mark.parametrize(
    ("model", "field"), [("suppression", "created_at"), ("prunerun", "started_at")]
)
@pytest.mark.parametrize(
    "drill",
    [
        {"year": "9999"},
        {"year": "9999", "month": "12"},
        {"year": "9999", "month": "12", "day": "31"},
    ],
)
def test_a_date_drill_down_to_the_end_of_9999_shows_the_list_unfiltered_with_a_message(
    admin, model, field, drill
):
    """Django bounds the period picked by the start of the next one: in year 10000, a 500."""
    query = {"%s__%s" % (field, part): value for part, value in drill.items()}

    response = get(admin, changelist(model), query)

    assert (response.status_code, response["Location"]) == (302, changelist(model))
    assert messages_of(response) == [
        (
            "error",
            "The date filter picks the end of the year 9999, the last a date can have: "
            "the list is shown without filters.",
        )
    ]
    assert get(admin, changelist(model)).status_code == 200


def test_a_date_drill_down_to_an_earlier_month_of_9999_is_shown(admin):
    response = get(
        admin, changelist("suppression"), {"created_at__year": "9999", "created_at__month": "11"}
    )

    assert response.status_code == 200
    assert messages_of(response) == []
