"""POST jobs/{id}/cancel/ and jobs/{id}/undo/: every outcome, its status code, its exact body."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.clock import frozen_clock
from scheduler_app.db import backend
from scheduler_app.models import Job

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)
Status = Job.Status
NOT_FOUND = {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}


def claim(job: Job, *, at: dt.datetime) -> None:
    """Claim ``job`` as a worker does, making it due first; it is then running."""
    Job.objects.filter(pk=job.pk).update(run_at=at - SECOND)
    with frozen_clock(at):  # the claim compares due times with the database's clock
        rows = backend().claim_jobs(worker="w", queues=["default"], limit=1, lease=30 * SECOND)
    assert [row[0] for row in rows] == [job.pk]


def finish(job: Job, status: str, *, at: dt.datetime) -> None:
    """Stage a finished job by writing the row a worker's finish leaves behind."""
    Job.objects.filter(pk=job.pk).update(status=status, attempts=1, started_at=at, finished_at=at)


def conflict(api, job: Job, code: str, message: str) -> dict:
    """Return the expected 409 body: the error, and the job as GET jobs/{id}/ shows it now."""
    return {
        "error": {"code": code, "message": message, "fields": {}},
        "job": api.get("/api/jobs/%s/" % job.pk).json(),
    }


def stored(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


# cancel ---------------------------------------------------------------------


def test_cancel_pending_job_cancels_it_and_records_who(api, ada, make_job):
    job = make_job(ada)

    with frozen_clock(T0):
        response = api.post("/api/jobs/%s/cancel/" % job.pk)

    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "cancelled"
    assert body["job"]["id"] == job.pk
    assert body["job"]["status"] == "cancelled"
    assert body["job"]["cancelled_at"] == "2030-01-01T12:00:00Z"
    job = stored(job)
    assert (job.status, job.cancelled_at, job.cancelled_by) == (Status.CANCELLED, T0, ada)


def test_repeating_a_successful_cancel_is_200_already_cancelled_and_changes_nothing(
    api, ada, make_job
):
    job = make_job(ada)
    with frozen_clock(T0):
        assert api.post("/api/jobs/%s/cancel/" % job.pk).json()["outcome"] == "cancelled"

    response = api.post("/api/jobs/%s/cancel/" % job.pk)

    assert response.status_code == 200
    assert response.json()["outcome"] == "already_cancelled"
    assert response.json()["job"]["cancelled_at"] == "2030-01-01T12:00:00Z"
    assert stored(job).cancelled_at == T0


def test_cancel_running_job_is_409_already_running_and_changes_nothing(api, ada, make_job):
    job = make_job(ada)
    claim(job, at=T0)

    response = api.post("/api/jobs/%s/cancel/" % job.pk)

    assert response.status_code == 409
    assert response.json() == conflict(
        api,
        job,
        "already_running",
        "Job %s is already running; it can no longer be cancelled." % job.pk,
    )
    assert response.json()["job"]["status"] == "running"
    job = stored(job)
    assert (job.status, job.worker_id, job.cancelled_at) == (Status.RUNNING, "w", None)


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED])
def test_cancel_finished_job_is_409_already_finished(api, ada, make_job, status):
    job = make_job(ada)
    finish(job, status, at=T0)

    response = api.post("/api/jobs/%s/cancel/" % job.pk)

    assert response.status_code == 409
    assert response.json() == conflict(
        api,
        job,
        "already_finished",
        "Job %s has already finished (%s); there is nothing to cancel." % (job.pk, status),
    )
    assert response.json()["job"]["status"] == status
    assert stored(job).status == status


@pytest.mark.parametrize("job_id", ["0", "987654", "abc", "-1", "9" * 19, "9" * 40])
def test_cancel_unknown_or_malformed_id_is_404(api, ada, make_job, job_id):
    job = make_job(ada)

    response = api.post("/api/jobs/%s/cancel/" % job_id)

    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    assert stored(job).status == Status.PENDING


def test_cancel_ignores_a_request_body(api, ada, make_job):
    job = make_job(ada)

    response = api.post("/api/jobs/%s/cancel/" % job.pk, {"anything": [1]}, format="json")

    assert response.status_code == 200
    assert response.json()["outcome"] == "cancelled"


def test_cancel_takes_three_queries(api, ada, make_job, django_assert_num_queries):
    job = make_job(ada)
    # Authenticate the token, the guarded UPDATE, read the job back.
    with django_assert_num_queries(3):
        assert api.post("/api/jobs/%s/cancel/" % job.pk).status_code == 200


# undo -----------------------------------------------------------------------


def test_undo_inside_the_window_cancels_the_job(api, ada, make_job):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30, payload={"to": "x@example.com"})
        clock.advance(29 * SECOND)
        response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "cancelled"
    assert body["job"]["status"] == "cancelled"
    assert body["job"]["payload"] == {"to": "x@example.com"}
    assert body["job"]["undo_deadline"] == "2030-01-01T12:00:30Z"
    assert body["job"]["cancelled_at"] == "2030-01-01T12:00:29Z"
    job = stored(job)
    assert (job.status, job.cancelled_by) == (Status.CANCELLED, ada)


def test_repeating_a_successful_undo_is_200_already_cancelled_even_after_the_window(
    api, ada, make_job
):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30)
        assert api.post("/api/jobs/%s/undo/" % job.pk).json()["outcome"] == "cancelled"
        again = api.post("/api/jobs/%s/undo/" % job.pk)
        clock.advance(60 * SECOND)
        after_window = api.post("/api/jobs/%s/undo/" % job.pk)

    for response in (again, after_window):
        assert response.status_code == 200
        assert response.json()["outcome"] == "already_cancelled"
        assert response.json()["job"]["cancelled_at"] == "2030-01-01T12:00:00Z"


@pytest.mark.parametrize("late", [dt.timedelta(0), SECOND, dt.timedelta(hours=1)])
def test_undo_at_or_after_the_deadline_is_409_already_sending_and_changes_nothing(
    api, ada, make_job, late
):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30)
        clock.advance(30 * SECOND + late)
        response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json() == conflict(
        api,
        job,
        "already_sending",
        "Too late to undo: the undo window of job %s closed at 2030-01-01T12:00:30Z; "
        "it is already being sent." % job.pk,
    )
    assert response.json()["job"]["status"] == "pending"
    assert stored(job).status == Status.PENDING


def test_undo_of_a_job_a_worker_claimed_inside_the_window_is_409_already_sending(
    api, ada, make_job
):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30)
        claim(job, at=T0 + 5 * SECOND)
        clock.advance(10 * SECOND)
        response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json() == conflict(
        api, job, "already_sending", "Too late to undo: job %s is already being sent." % job.pk
    )
    assert response.json()["job"]["status"] == "running"
    assert stored(job).status == Status.RUNNING


def test_undo_of_a_running_job_after_the_window_is_409_already_sending(api, ada, make_job):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30)
        claim(job, at=T0 + 40 * SECOND)
        clock.advance(41 * SECOND)
        response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_sending"
    assert response.json()["job"]["status"] == "running"
    assert stored(job).status == Status.RUNNING


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED])
@pytest.mark.parametrize("elapsed", [10 * SECOND, dt.timedelta(hours=1)])
def test_undo_of_a_finished_job_is_409_already_finished(api, ada, make_job, status, elapsed):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30)
        finish(job, status, at=T0 + 5 * SECOND)
        clock.advance(elapsed)
        response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json() == conflict(
        api,
        job,
        "already_finished",
        "Too late to undo: job %s has already run (%s)." % (job.pk, status),
    )
    assert stored(job).status == status


def test_undo_of_a_job_without_an_undo_window_is_409_not_undoable(api, ada, make_job):
    job = make_job(ada, delay=3600)

    response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json() == conflict(
        api,
        job,
        "not_undoable",
        "Job %s was scheduled without an undo window; it cannot be undone." % job.pk,
    )
    assert stored(job).status == Status.PENDING


@pytest.mark.parametrize("job_id", ["0", "987654", "abc", "-1", "9" * 19, "9" * 40])
def test_undo_unknown_or_malformed_id_is_404(api, ada, make_job, job_id):
    job = make_job(ada, undo_window=30)

    response = api.post("/api/jobs/%s/undo/" % job_id)

    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    assert stored(job).status == Status.PENDING


def test_undo_takes_two_queries(api, ada, make_job, django_assert_num_queries):
    job = make_job(ada, undo_window=30)
    # Authenticate the token; the guarded UPDATE ... RETURNING gives the job back.
    with django_assert_num_queries(2):
        assert api.post("/api/jobs/%s/undo/" % job.pk).status_code == 200


@pytest.mark.parametrize("state", ["window_closed", "claimed", "already_cancelled"])
def test_an_undo_that_changes_nothing_takes_three_queries(
    api, ada, make_job, django_assert_num_queries, state
):
    with frozen_clock(T0) as clock:
        job = make_job(ada, undo_window=30)
        if state == "claimed":
            claim(job, at=T0 + SECOND)
        elif state == "already_cancelled":
            api.post("/api/jobs/%s/undo/" % job.pk)
        clock.advance(60 * SECOND if state == "window_closed" else 2 * SECOND)
        # Authenticate the token, the guarded UPDATE (no row), read the job's state.
        with django_assert_num_queries(3):
            response = api.post("/api/jobs/%s/undo/" % job.pk)
    assert response.status_code == (200 if state == "already_cancelled" else 409)


def test_undo_of_another_users_job_takes_three_queries_and_is_404(
    api, bob, make_job, django_assert_num_queries
):
    theirs = make_job(bob, undo_window=30)
    with django_assert_num_queries(3):
        response = api.post("/api/jobs/%s/undo/" % theirs.pk)
    assert (response.status_code, response.json()) == (404, NOT_FOUND)
    assert stored(theirs).status == Status.PENDING
