"""Cancel and claim race on the same job: exactly one wins, and cancel says which.

Two long-lived threads, each with its own Django connection (connections are
per thread), are released together by a threading.Barrier once per trial:
one cancels the job, the other claims it as a worker does. The main thread
then checks that exactly one of them won and that each reported it.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from scheduler_app import CancelOutcome, cancel, schedule, task
from scheduler_app.db import backend
from scheduler_app.models import Job

TRIALS = 500
TIMEOUT = 20.0
LEASE = dt.timedelta(seconds=30)
Status = Job.Status


@task(name="tests.outcomes.race_target")
def race_target(ctx):
    return None


def claim():
    return backend().claim_jobs(worker="w", queues=["default"], limit=1, lease=LEASE)


class Contender(threading.Thread):
    """Run ``action(job_id)`` once per trial on this thread's own connection."""

    def __init__(self, name, action, *, start, done):
        super().__init__(name=name, daemon=True)
        self.action = action
        self.start_together = start
        self.done = done
        self.job_id: int | None = None
        self.results: list = []
        self.error: BaseException | None = None

    def run(self):
        try:
            # Connect before the first trial so that connecting is not part of the race.
            connection.ensure_connection()
            while True:
                self.start_together.wait(timeout=TIMEOUT)
                if self.job_id is None:
                    return
                self.results.append(self.action(self.job_id))
                self.done.wait(timeout=TIMEOUT)
        except threading.BrokenBarrierError:
            pass  # the other side failed; it reports why
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.start_together.abort()
            self.done.abort()
        finally:
            connection.close()


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_cancel_and_claim_racing_on_one_job_have_exactly_one_winner():
    start = threading.Barrier(3)
    done = threading.Barrier(3)
    canceller = Contender("canceller", cancel, start=start, done=done)
    claimer = Contender("claimer", lambda job_id: claim(), start=start, done=done)
    canceller.start()
    claimer.start()
    wins = {"cancel": 0, "claim": 0}
    try:
        for trial in range(TRIALS):
            job = schedule("tests.outcomes.race_target")
            canceller.job_id = claimer.job_id = job.pk
            start.wait(timeout=TIMEOUT)
            done.wait(timeout=TIMEOUT)
            cancelled, claimed = canceller.results[-1], claimer.results[-1]
            status = Job.objects.filter(pk=job.pk).values_list("status", flat=True).get()
            report = "trial %s: cancel=%s claim=%s status=%s" % (trial, cancelled, claimed, status)
            if cancelled is CancelOutcome.CANCELLED:
                assert claimed == [], report
                assert status == Status.CANCELLED, report
                wins["cancel"] += 1
            else:
                assert cancelled is CancelOutcome.TOO_LATE, report
                assert [row[0] for row in claimed] == [job.pk], report
                assert status == Status.RUNNING, report
                wins["claim"] += 1
        # Let the contenders leave their loops.
        canceller.job_id = claimer.job_id = None
        start.wait(timeout=TIMEOUT)
    except threading.BrokenBarrierError:
        pass  # a contender failed: its error is raised below
    finally:
        if canceller.is_alive() or claimer.is_alive():
            start.abort()
            done.abort()
        canceller.join(timeout=TIMEOUT)
        claimer.join(timeout=TIMEOUT)
    for contender in (canceller, claimer):
        if contender.error is not None:
            raise contender.error
    assert not canceller.is_alive() and not claimer.is_alive()

    print(
        "cancel/claim race over %s trials: cancel won %s, claim won %s"
        % (TRIALS, wins["cancel"], wins["claim"])
    )
    assert wins["cancel"] + wins["claim"] == TRIALS
    assert wins["cancel"] >= 1, wins
    assert wins["claim"] >= 1, wins
    assert Job.objects.filter(status=Status.CANCELLED).count() == wins["cancel"]
    assert Job.objects.filter(status=Status.RUNNING, worker_id="w").count() == wins["claim"]


@pytest.mark.django_db
def test_cancel_on_a_job_claimed_just_before_reports_too_late():
    job = schedule("tests.outcomes.race_target")
    [row] = claim()

    assert row[0] == job.pk
    assert cancel(job.pk) is CancelOutcome.TOO_LATE
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == Status.RUNNING
    assert stored.worker_id == "w"
    assert stored.cancelled_at is None


@pytest.mark.django_db
def test_claim_just_after_cancel_finds_nothing():
    job = schedule("tests.outcomes.race_target")
    assert cancel(job.pk) is CancelOutcome.CANCELLED

    assert claim() == []
    assert Job.objects.get(pk=job.pk).status == Status.CANCELLED
