"""Undo through the API against a real ``runworker`` process on PostgreSQL.

Inside the window the undo wins and the worker never runs the job; once the
window has closed or the worker has claimed the job the undo is a 409, and
the job runs exactly once.
"""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import threading
from collections.abc import Iterator

import pytest

from scheduler_app import clock, schedule
from scheduler_app.models import Job
from tests.api.conftest import client_for
from tests.helpers import spawn_worker, wait_for_status, wait_until
from tests.testapp.models import Run

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

SECOND = dt.timedelta(seconds=1)
Status = Job.Status


class Worker:
    """A runworker subprocess; its output is collected for failure messages."""

    def __init__(self) -> None:
        self.proc = spawn_worker("--worker-id", "api-tests", "--poll-interval", "0.2")
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


@pytest.fixture
def worker() -> Iterator[Worker]:
    started = Worker()
    try:
        wait_until(
            lambda: any("worker started" in line for line in started.lines),
            message="the worker to start",
        )
        yield started
    finally:
        code = started.stop()
        assert code == 0, "runworker exited with %s:\n%s" % (code, "\n".join(started.lines))


def runs(job: Job) -> int:
    return Run.objects.filter(job_id=job.pk).count()


def test_undo_inside_the_window_is_200_and_the_worker_never_runs_the_job(worker, ada):
    job = schedule("tests.record", {"to": "x@example.com"}, owner=ada, undo_window=30)

    response = client_for(ada).post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 200
    assert response.json()["outcome"] == "cancelled"
    # Were it still pending it would now be due; a job scheduled after it
    # proves the worker has claimed past it.
    Job.objects.filter(pk=job.pk).update(run_at=clock.now() - SECOND)
    later = schedule("tests.record", owner=ada)
    wait_for_status(later, Status.SUCCEEDED)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.started_at) == (Status.CANCELLED, 0, None)
    assert runs(job) == 0
    assert runs(later) == 1


@pytest.mark.parametrize("window_closed", [True, False], ids=["window-closed", "window-open"])
def test_undo_after_the_worker_claimed_the_job_is_409_and_it_runs_once(
    worker, ada, tmp_path, window_closed
):
    flag = tmp_path / "release"
    job = schedule("tests.block_until_flag", {"flag": str(flag)}, owner=ada, undo_window=30)
    now = clock.now()
    # Stage the time passing by moving the row's times: due now, and the
    # window closed (as it is by the time a job is due) or, to isolate the
    # claim as the reason, still open.
    deadline = now - 2 * SECOND if window_closed else now + 30 * SECOND
    Job.objects.filter(pk=job.pk).update(run_at=now - SECOND, undo_deadline=deadline)
    try:
        wait_until(lambda: runs(job) == 1, message="the worker to start the job")

        response = client_for(ada).post("/api/jobs/%s/undo/" % job.pk)

        assert response.status_code == 409
        assert response.json()["error"]["code"] == "already_sending"
        assert response.json()["job"]["status"] == "running"
    finally:
        flag.touch()
    job = wait_for_status(job, Status.SUCCEEDED)
    assert (job.attempts, job.cancelled_at) == (1, None)
    assert runs(job) == 1


def test_undo_after_the_window_closed_is_409_and_the_job_still_runs_once(worker, ada):
    job = schedule("tests.record", owner=ada, undo_window=30)
    # The window has closed; the safety margin has not passed yet.
    Job.objects.filter(pk=job.pk).update(undo_deadline=clock.now() - SECOND)

    response = client_for(ada).post("/api/jobs/%s/undo/" % job.pk)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_sending"
    assert response.json()["job"]["status"] == "pending"
    Job.objects.filter(pk=job.pk).update(run_at=clock.now() - SECOND)
    job = wait_for_status(job, Status.SUCCEEDED)
    assert runs(job) == 1
