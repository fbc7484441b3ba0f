"""Who may do what: owners, staff with and without the permission, strangers, anonymous
callers, session users (CSRF), and the per-user throttle on writes."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from rest_framework.test import APIClient

from scheduler_app.api.throttling import WriteRateThrottle
from scheduler_app.models import Job
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

Status = Job.Status
NOT_FOUND = {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message, "fields": {}}}


def listed(client) -> set[int]:
    response = client.get("/api/jobs/")
    assert response.status_code == 200
    return {job["id"] for job in response.json()["results"]}


# ownership ------------------------------------------------------------------


def test_another_users_job_does_not_exist_for_list_retrieve_cancel_and_undo(
    api, ada, bob, make_job
):
    mine = make_job(ada)
    theirs = make_job(bob, undo_window=60)

    assert listed(api) == {mine.pk}
    for response in (
        api.get("/api/jobs/%s/" % theirs.pk),
        api.post("/api/jobs/%s/cancel/" % theirs.pk),
        api.post("/api/jobs/%s/undo/" % theirs.pk),
    ):
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    theirs = Job.objects.get(pk=theirs.pk)
    assert (theirs.status, theirs.cancelled_at) == (Status.PENDING, None)
    # Exactly what a job that does not exist at all gets.
    assert api.post("/api/jobs/%s/cancel/" % (theirs.pk + 1000)).json() == NOT_FOUND


@pytest.mark.parametrize("status", [Status.RUNNING, Status.SUCCEEDED, Status.CANCELLED])
def test_another_users_job_is_404_whatever_its_state(api, bob, make_job, status):
    """A 409 or an "already_cancelled" would tell a stranger the job exists."""
    theirs = make_job(bob, undo_window=60)
    Job.objects.filter(pk=theirs.pk).update(status=status)

    for action in ("cancel", "undo"):
        response = api.post("/api/jobs/%s/%s/" % (theirs.pk, action))
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    assert Job.objects.get(pk=theirs.pk).status == status


def test_jobs_without_an_owner_are_visible_only_to_operators(api, operator, make_job):
    orphan = make_job(None)

    assert orphan.pk not in listed(api)
    assert api.get("/api/jobs/%s/" % orphan.pk).status_code == 404
    assert orphan.pk in listed(client_for(operator))


def test_staff_with_the_permission_see_and_cancel_every_job(ada, bob, operator, make_job):
    jobs = [make_job(ada), make_job(bob, undo_window=60), make_job(operator)]
    client = client_for(operator)

    assert listed(client) == {job.pk for job in jobs}
    assert client.get("/api/jobs/%s/" % jobs[0].pk).json()["owner"] == ada.pk
    cancel = client.post("/api/jobs/%s/cancel/" % jobs[0].pk)
    undo = client.post("/api/jobs/%s/undo/" % jobs[1].pk)

    assert (cancel.status_code, cancel.json()["outcome"]) == (200, "cancelled")
    assert (undo.status_code, undo.json()["outcome"]) == (200, "cancelled")
    for job in jobs[:2]:
        job.refresh_from_db()
        assert (job.status, job.cancelled_by) == (Status.CANCELLED, operator)


def test_superusers_see_every_job(ada, make_job):
    admin = get_user_model().objects.create_superuser("root", password="x")
    job = make_job(ada)

    assert listed(client_for(admin)) == {job.pk}


def test_staff_without_the_permission_see_only_their_own(ada, staff_without_permission, make_job):
    theirs = make_job(ada)
    own = make_job(staff_without_permission)
    client = client_for(staff_without_permission)

    assert listed(client) == {own.pk}
    assert client.get("/api/jobs/%s/" % theirs.pk).status_code == 404
    assert client.post("/api/jobs/%s/cancel/" % theirs.pk).json() == NOT_FOUND
    assert Job.objects.get(pk=theirs.pk).status == Status.PENDING


def test_the_permission_without_staff_status_grants_nothing(ada, bob, operator, make_job):
    operator.is_staff = False
    operator.save(update_fields=["is_staff"])
    theirs = make_job(ada)

    client = client_for(operator)
    assert listed(client) == set()
    assert client.post("/api/jobs/%s/cancel/" % theirs.pk).status_code == 404


# authentication -------------------------------------------------------------

ENDPOINTS = [
    ("get", "/api/jobs/"),
    ("get", "/api/jobs/%(id)s/"),
    ("post", "/api/jobs/%(id)s/cancel/"),
    ("post", "/api/jobs/%(id)s/undo/"),
]


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
@pytest.mark.parametrize(
    ("authorization", "code", "message"),
    [
        (None, "not_authenticated", "Authentication credentials were not provided."),
        ("Bearer abc", "not_authenticated", "Authentication credentials were not provided."),
        ("Token nope", "authentication_failed", "Invalid token."),
        ("Token", "authentication_failed", "Invalid token header. No credentials provided."),
        (
            "Token a b",
            "authentication_failed",
            "Invalid token header. Token string should not contain spaces.",
        ),
    ],
)
def test_unauthenticated_requests_are_401_with_a_token_challenge(
    ada, make_job, method, url, authorization, code, message
):
    job = make_job(ada, undo_window=60)
    client = APIClient()
    if authorization is not None:
        client.credentials(HTTP_AUTHORIZATION=authorization)

    response = getattr(client, method)(url % {"id": job.pk})

    assert response.status_code == 401
    assert response.json() == error(code, message)
    assert response["WWW-Authenticate"] == "Token"
    assert Job.objects.get(pk=job.pk).status == Status.PENDING


def test_an_inactive_users_token_is_refused(ada, make_job):
    client = client_for(ada)
    ada.is_active = False
    ada.save(update_fields=["is_active"])

    response = client.get("/api/jobs/")

    assert response.status_code == 401
    assert response.json() == error("authentication_failed", "User inactive or deleted.")


def test_session_users_are_authenticated_and_their_writes_need_the_csrf_token(ada, make_job):
    job = make_job(ada)
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username="ada", password="pw-ada")

    assert listed(client) == {job.pk}
    refused = client.post("/api/jobs/%s/cancel/" % job.pk)
    assert refused.status_code == 403
    assert refused.json() == error("permission_denied", "CSRF Failed: CSRF cookie not set.")
    assert Job.objects.get(pk=job.pk).status == Status.PENDING

    client.cookies["csrftoken"] = token = "a" * 32
    accepted = client.post("/api/jobs/%s/cancel/" % job.pk, HTTP_X_CSRFTOKEN=token)
    assert (accepted.status_code, accepted.json()["outcome"]) == (200, "cancelled")


def test_without_the_authtoken_app_a_token_header_is_ignored_not_a_500(ada, make_job):
    apps = [app for app in settings.INSTALLED_APPS if app != "rest_framework.authtoken"]
    with override_settings(INSTALLED_APPS=apps):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token abc")
        response = client.get("/api/jobs/")

    # Session authentication alone has no challenge to send, so DRF answers 403.
    assert response.status_code == 403
    assert response.json() == error(
        "not_authenticated", "Authentication credentials were not provided."
    )


# throttling -----------------------------------------------------------------


@pytest.fixture
def fixed_time(monkeypatch):
    """Stop the throttle's clock, so the Retry-After it computes is exact."""
    monkeypatch.setattr(WriteRateThrottle, "timer", lambda self: 1_000_000.0)


@override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"scheduler_app_write": "3/min"}})
def test_writes_beyond_the_rate_are_429_per_user_and_change_nothing(
    api, ada, bob, make_job, fixed_time
):
    jobs = [make_job(ada) for _ in range(4)]

    statuses = [api.post("/api/jobs/%s/cancel/" % job.pk).status_code for job in jobs]

    assert statuses == [200, 200, 200, 429]
    response = api.post("/api/jobs/%s/undo/" % jobs[3].pk)
    assert response.status_code == 429
    assert response.json() == error(
        "throttled", "Request was throttled. Expected available in 60 seconds."
    )
    assert response["Retry-After"] == "60"
    assert Job.objects.get(pk=jobs[3].pk).status == Status.PENDING
    # Reads are not throttled, and other users have their own allowance.
    assert api.get("/api/jobs/").status_code == 200
    assert client_for(bob).post("/api/jobs/%s/cancel/" % jobs[3].pk).status_code == 404


def test_the_default_write_rate_is_120_a_minute(api, ada, make_job, fixed_time):
    job = make_job(ada)

    statuses = [api.post("/api/jobs/%s/cancel/" % job.pk).status_code for _ in range(121)]

    assert statuses[:120] == [200] * 120
    assert statuses[120] == 429


def test_the_api_answers_for_itself_under_the_login_required_middleware(api):
    # Django's LoginRequiredMiddleware would send token clients to a login page.
    middleware = [*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"]
    with override_settings(MIDDLEWARE=middleware):
        assert api.get("/api/jobs/").status_code == 200
        assert api.get("/api/").status_code == 200
        assert api.get("/api/schema/").status_code == 200
        assert APIClient().get("/api/jobs/").status_code == 401
