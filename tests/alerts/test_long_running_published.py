"""long_running skips a job a Celery relay published and no Celery worker started yet."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler_app.alerts.evaluator import evaluate
from scheduler_app.clock import frozen_clock
from scheduler_app.models import Alert, Job
from tests.alerts.helpers import T0, TIMED, job, open_alerts

pytestmark = pytest.mark.django_db


def test_a_job_waiting_in_the_broker_is_not_a_long_run_nor_breaks_the_rule():
    """Running with no started_at (waiting in the broker) is not a run: the rule still
    reports the run that is one."""
    with frozen_clock(T0):
        job(TIMED, Job.Status.RUNNING, at=T0 - dt.timedelta(hours=1), started_at=None)
        job(TIMED, Job.Status.RUNNING, at=T0, started_at=T0 - dt.timedelta(minutes=1))
        evaluate()
        alert = open_alerts(Alert.Kind.LONG_RUNNING)["task:%s" % TIMED]
    assert alert.numbers == {"runs": 1, "longest_seconds": 60, "max_runtime_seconds": 30}
