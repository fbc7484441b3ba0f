"""GET jobs/ and jobs/{id}/: the caller's jobs, filters, pages; every bad input a 400 or 404."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from rest_framework.test import APIClient

from scheduler_app.clock import frozen_clock
from scheduler_app.models import Job
from tests.api.conftest import TASK

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
NOT_FOUND = {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def ids(response) -> list[int]:
    return [job["id"] for job in response.json()["results"]]


def invalid(field: str, message: str) -> dict:
    return {
        "error": {
            "code": "invalid",
            "message": "%s: %s" % (field, message),
            "fields": {field: [message]},
        }
    }


def test_list_shows_the_callers_jobs_newest_first_in_full(api, ada, make_job):
    with frozen_clock(T0):
        first = make_job(ada, payload={"to": "x@example.com"}, undo_window=30)
        second = make_job(ada, queue="emails", priority=3)

    response = api.get("/api/jobs/")

    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    assert ids(response) == [second.pk, first.pk]
    assert body["results"][1] == {
        "id": first.pk,
        "task": TASK,
        "queue": "default",
        "status": "pending",
        "payload": {"to": "x@example.com"},
        "payload_version": 1,
        "priority": 0,
        "owner": ada.pk,
        "created_at": iso(T0),
        "scheduled_for": iso(first.scheduled_for),
        "run_at": iso(first.run_at),
        "undo_deadline": iso(T0 + dt.timedelta(seconds=30)),
        "started_at": None,
        "finished_at": None,
        "cancelled_at": None,
        "attempts": 0,
        "max_attempts": 5,
    }
    assert body["results"][0]["queue"] == "emails"
    assert body["results"][0]["priority"] == 3
    assert body["results"][0]["undo_deadline"] is None


def test_list_and_retrieve_take_two_queries(api, ada, make_job, django_assert_num_queries):
    job = make_job(ada)
    # One to authenticate the token, one for the data.
    with django_assert_num_queries(2):
        assert api.get("/api/jobs/").status_code == 200
    with django_assert_num_queries(2):
        assert api.get("/api/jobs/%s/" % job.pk).status_code == 200


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=pending", ["pending", "noop"]),
        ("status=cancelled", ["cancelled"]),
        ("status=pending&status=cancelled", ["pending", "cancelled", "noop"]),
        ("task=tests.noop", ["noop"]),
        ("task=tests.noop&status=cancelled", []),
    ],
)
def test_list_filters_by_status_and_task(api, ada, make_job, query, expected):
    jobs = {
        "pending": make_job(ada),
        "cancelled": make_job(ada),
        "noop": make_job(ada),
    }
    Job.objects.filter(pk=jobs["cancelled"].pk).update(status=Job.Status.CANCELLED)
    Job.objects.filter(pk=jobs["noop"].pk).update(task_name="tests.noop")

    response = api.get("/api/jobs/?" + query)

    assert response.status_code == 200
    assert sorted(ids(response)) == sorted(jobs[name].pk for name in expected)


def test_list_filters_by_creation_and_scheduled_time(api, ada, make_job):
    made = {}
    for hours in (0, 1, 2):
        with frozen_clock(T0 + dt.timedelta(hours=hours)):
            made[hours] = make_job(ada, at=T0 + dt.timedelta(days=hours))

    def listed(query):
        response = api.get("/api/jobs/", query)
        assert response.status_code == 200, response.json()
        return sorted(ids(response))

    assert listed({"created_after": "2030-01-01T13:00:00Z"}) == [made[1].pk, made[2].pk]
    assert listed({"created_before": "2030-01-01T13:00:00Z"}) == [made[0].pk]
    # No offset means UTC; an offset is honoured.
    assert listed(
        {"created_after": "2030-01-01T12:30", "created_before": "2030-01-01T15:30+02:00"}
    ) == [made[1].pk]
    assert listed({"scheduled_after": "2030-01-02T00:00:00Z"}) == [made[1].pk, made[2].pk]
    assert listed({"scheduled_before": "2030-01-02T12:00:00Z"}) == [made[0].pk]
    assert listed(
        {"scheduled_after": "2030-01-01T12:00:00Z", "scheduled_before": "2030-01-03T12:00:00Z"}
    ) == [made[0].pk, made[1].pk]
    # Times UTC cannot hold are the earliest and latest there are (not a 400).
    everything = sorted(job.pk for job in made.values())
    assert listed({"created_after": "0001-01-01T00:00:00+05:00"}) == everything
    assert listed({"scheduled_before": "9999-12-31T23:00:00-05:00"}) == everything


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York"])
def test_a_filter_time_without_an_offset_is_utc_whatever_the_project_time_zone(
    settings, api, ada, make_job, zone
):
    """As the schema says; DRF alone reads it in TIME_ZONE, and at the calendar's edges that
    overflowed (a 500)."""
    settings.TIME_ZONE = zone
    with frozen_clock(T0):
        job = make_job(ada, at=T0 + dt.timedelta(hours=1))

    def listed(query):
        response = api.get("/api/jobs/", query)
        assert response.status_code == 200, response.content
        return ids(response)

    assert listed({"created_after": "2030-01-01T12:30"}) == []
    assert listed({"created_before": "2030-01-01T12:30"}) == [job.pk]
    assert listed({"scheduled_after": "2030-01-01T12:30"}) == [job.pk]
    assert listed({"created_after": "0001-01-01T00:00:00"}) == [job.pk]
    assert listed({"scheduled_before": "9999-12-31T23:00:00"}) == [job.pk]
    assert listed({"scheduled_before": "9999-12-31T23:00:00Z"}) == [job.pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "query",
    [
        "scheduled_before=9999-12-31T23:00:00-05:00",
        "scheduled_before=9999-12-31T23:30:00Z",
        "created_after=0001-01-01T00:00:00%2B05:00",
        "created_after=0001-01-01T00:30:00Z",
    ],
)
def test_the_earliest_and_latest_times_filter_whatever_the_database_time_zone(
    database_time_zone, api, ada, make_job, query
):
    """On SQLite, Django writes a time in the database's TIME_ZONE: the edges must fit
    there too (9999-12-31 23:30 UTC is past the last time Paris can hold)."""
    job = make_job(ada)

    response = api.get("/api/jobs/?" + query)

    assert response.status_code == 200, response.content
    assert ids(response) == [job.pk]


@pytest.mark.parametrize(
    "query",
    [
        "created_after=2030-01-02T00:00:00Z&created_before=2030-01-01T00:00:00Z",
        "scheduled_after=2030-01-01T00:00:00Z&scheduled_before=2030-01-01T00:00:00Z",
        "created_after=1999-01-01T00:00:00Z&created_before=1999-01-01T00:00:00Z",
        # Times UTC cannot hold: before or after every job.
        "created_before=0001-01-01T00:00:00%2B05:00",
        "created_after=9999-12-31T23:00:00-05:00",
    ],
)
def test_list_with_an_empty_time_range_is_an_empty_page(api, ada, make_job, query):
    """The schema allows any two times; a range holding no time matches nothing (not a 400)."""
    make_job(ada)

    response = api.get("/api/jobs/?" + query)

    assert response.status_code == 200
    assert response.json() == {"next": None, "previous": None, "results": []}


def test_list_pages_follow_the_cursor_without_gaps_or_repeats(api, ada, make_job):
    made = [make_job(ada).pk for _ in range(7)]

    response = api.get("/api/jobs/?page_size=3")
    seen = ids(response)
    pages = 1
    make_job(ada)  # a job added while paging does not shift the pages
    while response.json()["next"]:
        response = api.get(response.json()["next"])
        assert response.status_code == 200
        seen += ids(response)
        pages += 1

    assert seen == sorted(made, reverse=True)
    assert pages == 3


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("status=bogus", "status", '"bogus" is not a valid choice.'),
        ("status=pending&status=nope", "status", '"nope" is not a valid choice.'),
        ("task=" + "x" * 201, "task", "Ensure this field has no more than 200 characters."),
        ("task=a%00b", "task", "Null characters are not allowed."),
        (
            "created_after=yesterday",
            "created_after",
            "Datetime has wrong format. Use one of these formats instead: "
            "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z].",
        ),
        (
            "scheduled_before=2030-02-30T00:00:00Z",
            "scheduled_before",
            "Datetime has wrong format. Use one of these formats instead: "
            "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z].",
        ),
        ("page_size=0", "page_size", "Must be an integer from 1 to 200."),
        ("page_size=201", "page_size", "Must be an integer from 1 to 200."),
        ("page_size=ten", "page_size", "Must be an integer from 1 to 200."),
        ("page_size=-1", "page_size", "Must be an integer from 1 to 200."),
        ("cursor=not-a-cursor", "cursor", "Invalid cursor."),
        ("cursor=%C3%A9", "cursor", "Invalid cursor."),
        # Well-formed base64, but a position that cannot be an id.
        ("cursor=" + base64.b64encode(b"p=abc").decode(), "cursor", "Invalid cursor."),
        ("cursor=" + base64.b64encode(b"p=" + b"9" * 30).decode(), "cursor", "Invalid cursor."),
    ],
)
def test_list_rejects_bad_query_parameters_naming_the_field(
    api, ada, make_job, query, field, message
):
    make_job(ada)

    response = api.get("/api/jobs/?" + query)

    assert response.status_code == 400
    assert response.json() == invalid(field, message)


def test_list_reports_every_bad_field_at_once(api):
    response = api.get("/api/jobs/?status=bogus&created_after=never")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["fields"]) == {"status", "created_after"}
    assert error["message"] == (
        'status: "bogus" is not a valid choice. created_after: Datetime has wrong format. '
        "Use one of these formats instead: YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]."
    )


@pytest.mark.parametrize(
    "field", ["status", "task", "created_after", "created_before", "scheduled_after"]
)
def test_empty_filter_values_are_400_not_ignored(api, field):
    response = api.get("/api/jobs/?%s=" % field)

    assert response.status_code == 400
    assert response.json() == invalid(field, "This field may not be blank.")


def test_retrieve_returns_the_job(api, ada, make_job):
    job = make_job(ada)

    response = api.get("/api/jobs/%s/" % job.pk)

    assert response.status_code == 200
    assert response.json()["id"] == job.pk
    assert response.json()["status"] == "pending"
    assert response.json()["scheduled_for"] == iso(job.scheduled_for)


@pytest.mark.parametrize(
    "job_id", ["0", "123456789", "abc", "-1", "1e3", "1.5", "9" * 19, "9" * 30, "١٢", "1%2F2"]
)
def test_retrieve_unknown_or_malformed_id_is_404(api, ada, make_job, job_id):
    make_job(ada)

    response = api.get("/api/jobs/%s/" % job_id)

    assert response.status_code == 404
    assert response.json() == NOT_FOUND


@pytest.mark.parametrize(
    "path", ["/api/jobs/1/extra/", "/api/jobs/1/cancel/again/", "/api/jobs/a/b/"]
)
def test_unknown_paths_below_jobs_get_the_api_404(api, ada, path):
    session = APIClient(enforce_csrf_checks=True)
    session.force_login(ada)

    for response in (api.get(path), api.post(path), session.post(path)):
        assert response.status_code == 404
        assert response.json() == NOT_FOUND


def test_reads_are_json_only_and_other_methods_are_405(api, ada, make_job):
    job = make_job(ada)

    put = api.put("/api/jobs/%s/" % job.pk, {}, format="json")
    delete = api.delete("/api/jobs/%s/" % job.pk)
    get_cancel = api.get("/api/jobs/%s/cancel/" % job.pk)
    html = api.get("/api/jobs/", HTTP_ACCEPT="text/html")

    for response, method in ((put, "PUT"), (delete, "DELETE"), (get_cancel, "GET")):
        assert response.status_code == 405
        assert response.json() == {
            "error": {
                "code": "method_not_allowed",
                "message": 'Method "%s" not allowed.' % method,
                "fields": {},
            }
        }
    assert html.status_code == 406
    assert html.json()["error"]["code"] == "not_acceptable"
    assert Job.objects.get(pk=job.pk).status == "pending"


@pytest.mark.parametrize("path", ["/api/", "/api/jobs/", "/api/batches/"])
def test_a_format_the_api_does_not_speak_is_406_not_404(api, path):
    """``?format=xml`` on a route that exists must not say the route does not exist."""
    response = api.get(path + "?format=xml")
    assert response.status_code == 406
    assert response.json() == {
        "error": {
            "code": "not_acceptable",
            "message": "Unsupported format 'xml'; this API answers in JSON only.",
            "fields": {},
        }
    }
    assert api.get(path + "?format=json").status_code == 200
