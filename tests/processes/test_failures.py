"""Bad jobs fail cleanly and the worker goes on; bad options or no database exit non-zero."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys

import pytest
from django.utils import timezone

from scheduler_app.models import Job
from scheduler_app.scheduling import schedule
from tests.helpers import REPO, wait_until
from tests.testapp.models import Run

UNREACHABLE = "postgres://postgres@127.0.0.1:1/x"


@pytest.mark.django_db(transaction=True)
def test_unknown_task_and_unsupported_version_fail_cleanly(start_worker):
    """Jobs of an unknown task past its grace, or of a bad version, fail; the worker runs on."""
    now = timezone.now()
    long_ago = now - dt.timedelta(hours=2)
    unknown = Job.objects.create(task_name="no.such.task", scheduled_for=long_ago, run_at=long_ago)
    too_new = Job.objects.create(
        task_name="tests.versioned", payload_version=9, scheduled_for=now, run_at=now
    )
    normal = schedule("tests.record")
    worker = start_worker()
    wait_until(lambda: not Job.objects.unfinished().exists(), message="every job to finish")

    rows = {
        job.pk: (job.status, job.attempts, job.last_error)
        for job in Job.objects.filter(pk__in=[unknown.pk, too_new.pk, normal.pk])
    }
    assert rows == {
        unknown.pk: (
            "failed",
            1,
            "UnknownTask: No task is registered as 'no.such.task', and no worker that knows it "
            "ran the job within UNKNOWN_TASK_GRACE (3600s) of its scheduled time %s."
            % long_ago.isoformat(),
        ),
        too_new.pk: (
            "failed",
            1,
            "UnsupportedPayloadVersion: Task 'tests.versioned' does not accept payload "
            "version 9 (accepted: 1, 2).",
        ),
        normal.pk: ("succeeded", 1, ""),
    }
    history = [
        (a.job_id, a.outcome) for j in Job.objects.order_by("id") for a in j.attempt_history()
    ]
    assert sorted(history) == [
        (unknown.pk, "failed"),
        (too_new.pk, "failed"),
        (normal.pk, "succeeded"),
    ]
    assert Run.objects.filter(job_id=normal.pk).count() == 1
    assert worker.alive(), worker.output
    assert "Traceback" not in worker.output


def test_runworker_exits_nonzero_when_database_unreachable(start_worker):
    """With the database unreachable past DATABASE_UNAVAILABLE_TIMEOUT, runworker exits 1."""
    worker = start_worker(
        env={"DATABASE_URL": UNREACHABLE, "SCHEDULER_DB_UNAVAILABLE_TIMEOUT": "1"}
    )
    assert worker.wait_exit(timeout=30) == 1, worker.output
    assert re.search(
        r"^CommandError: Database unreachable for \d+s \(limit 1\.0s\): ", worker.output, re.M
    ), worker.output


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (
            ["--concurrency", "0"],
            2,
            "runworker: error: argument -c/--concurrency: must be from 1 to 1000, got 0",
        ),
        (
            ["--poll-interval", "soon"],
            2,
            "runworker: error: argument --poll-interval: 'soon' is not a number",
        ),
        (
            ["--worker-id", "w" * 201],
            2,
            "runworker: error: argument --worker-id: must be 1 to 200 characters without NUL, "
            "got 201 characters",
        ),
        (
            ["--queue", "nope"],
            1,
            "CommandError: Unknown queue(s): nope. SCHEDULER_APP['QUEUES'] lists: "
            "default, emails, slow.",
        ),
        (
            ["--executor", "celery", "--concurrency", "4"],
            1,
            "CommandError: --concurrency does not apply to --executor celery: the Celery "
            "workers' own --concurrency bounds what runs, and SCHEDULER_APP"
            "['CELERY_MAX_IN_FLIGHT'] how many jobs a relay keeps published per queue.",
        ),
        (
            ["--lease", "inf"],
            2,
            "runworker: error: argument --lease: must be a finite number, got 'inf'",
        ),
        (
            ["--concurrency", "99999999999999999999"],
            2,
            "runworker: error: argument -c/--concurrency: must be from 1 to 1000, "
            "got 99999999999999999999",
        ),
        (
            ["--metrics-address", "1.2.3.4"],
            1,
            "CommandError: --metrics-address needs --metrics-port: without a port no metrics "
            "are served.",
        ),
    ],
    ids=[
        "concurrency-0",
        "poll-interval-not-a-number",
        "worker-id-too-long",
        "unknown-queue",
        "concurrency-with-celery",
        "lease-infinite",
        "concurrency-too-many",
        "metrics-address-without-port",
    ],
)
def test_runworker_rejects_bad_options(args, status, message):
    """Bad options exit non-zero with a clear message, before touching the database."""
    result = subprocess.run(
        [sys.executable, "-m", "django", "runworker", "--settings=tests.settings", *args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": UNREACHABLE},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == status, result.stderr
    # argparse errors start with the program name, which depends on how Django was started.
    assert result.stderr.splitlines()[-1].endswith(message), result.stderr
    assert "Traceback" not in result.stderr
