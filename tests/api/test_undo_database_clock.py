"""POST jobs/{id}/undo/ judges the undo window by the database's clock, not the host's."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app import clock
from scheduler_app.db import database_now
from scheduler_app.models import Job

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db]

SECOND = dt.timedelta(seconds=1)


@pytest.fixture
def skewed(monkeypatch):
    real = clock.now

    def skew(seconds):
        monkeypatch.setattr(clock, "now", lambda: real() + dt.timedelta(seconds=seconds))

    return skew


def test_undo_inside_the_window_wins_on_a_host_whose_clock_runs_ahead(api, ada, make_job, skewed):
    job = make_job(ada, undo_window=5)
    skewed(10)

    response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 200
    assert response.json()["outcome"] == "cancelled"
    assert Job.objects.get(pk=job.pk).status == Job.Status.CANCELLED


def test_undo_after_the_window_loses_on_a_host_whose_clock_runs_behind(api, ada, make_job, skewed):
    job = make_job(ada, undo_window=60)
    Job.objects.filter(pk=job.pk).update(undo_deadline=database_now() - SECOND)
    skewed(-10)

    response = api.post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_sending"
    assert Job.objects.get(pk=job.pk).status == Job.Status.PENDING
