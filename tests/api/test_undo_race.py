"""Undo requests racing a worker's claim on PostgreSQL: one outcome, and every response agrees.

Per trial, UNDOERS threads (each with its own connection, through the whole
Django/DRF stack) POST undo for the same due job while another thread
claims it the way a worker does; a threading.Barrier starts them together.
Either the undo won (exactly one "cancelled", the others
"already_cancelled", nothing claimed) or the claim won (every undo a 409
"already_sending", the job running).
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from scheduler_app import clock, schedule
from scheduler_app.db import backend
from scheduler_app.models import Job
from tests.api.conftest import client_for

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

TRIALS = 150
UNDOERS = 4
TIMEOUT = 30.0
Status = Job.Status


class Contender(threading.Thread):
    """Run ``action(job_id)`` once per trial on this thread's own connection."""

    def __init__(
        self,
        name: str,
        action: Callable[[int], Any],
        start: threading.Barrier,
        done: threading.Barrier,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.action = action
        self.start_together = start
        self.done = done
        self.job_id: int | None = None
        self.results: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection.ensure_connection()
            while True:
                self.start_together.wait(timeout=TIMEOUT)
                if self.job_id is None:
                    return
                self.results.append(self.action(self.job_id))
                self.done.wait(timeout=TIMEOUT)
        except threading.BrokenBarrierError:
            pass  # another contender failed; it reports why
        except BaseException as exc:  # re-raised by the test
            self.error = exc
            self.start_together.abort()
            self.done.abort()
        finally:
            connection.close()


@override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"scheduler_app_write": "100000/min"}})
def test_concurrent_undos_and_a_claim_have_one_outcome_and_consistent_responses(ada):
    latencies: list[float] = []
    # The claimer waits a random part of a typical undo request's time, so
    # that both sides win some trials; it follows the measured latency.
    jitter = {"max": 0.005}

    def undo(job_id: int) -> tuple[int, dict]:
        client = client_for(ada)
        started = time.perf_counter()
        response = client.post("/api/jobs/%s/undo/" % job_id)
        latencies.append(time.perf_counter() - started)
        return response.status_code, response.json()

    def claim(job_id: int) -> list[int]:
        time.sleep(random.uniform(0, jitter["max"]))
        rows = backend().claim_jobs(
            worker="racer",
            queues=["default"],
            limit=1,
            lease=dt.timedelta(seconds=60),
        )
        return [row[0] for row in rows]

    start = threading.Barrier(UNDOERS + 2)
    done = threading.Barrier(UNDOERS + 2)
    undoers = [Contender("undo-%s" % n, undo, start, done) for n in range(UNDOERS)]
    claimer = Contender("claimer", claim, start, done)
    contenders = [*undoers, claimer]
    for contender in contenders:
        contender.start()
    wins = {"undo": 0, "claim": 0}
    try:
        for trial in range(TRIALS):
            job = schedule("tests.record", owner=ada, undo_window=3600)
            # Due now, its undo window still open: both sides can win.
            Job.objects.filter(pk=job.pk).update(run_at=clock.now() - dt.timedelta(seconds=1))
            for contender in contenders:
                contender.job_id = job.pk
            start.wait(timeout=TIMEOUT)
            done.wait(timeout=TIMEOUT)

            claimed = claimer.results[-1]
            responses = [undoer.results[-1] for undoer in undoers]
            stored = Job.objects.get(pk=job.pk)
            report = "trial %s: claim=%s undo=%s status=%s" % (
                trial,
                claimed,
                responses,
                stored.status,
            )
            if claimed:
                assert claimed == [job.pk], report
                assert stored.status == Status.RUNNING, report
                assert stored.cancelled_at is None, report
                for status_code, body in responses:
                    assert status_code == 409, report
                    assert body["error"] == {
                        "code": "already_sending",
                        "message": "Too late to undo: job %s is already being sent." % job.pk,
                        "fields": {},
                    }, report
                wins["claim"] += 1
            else:
                assert stored.status == Status.CANCELLED, report
                assert stored.cancelled_by_id == ada.pk, report
                assert [code for code, _ in responses] == [200] * UNDOERS, report
                outcomes = sorted(body["outcome"] for _, body in responses)
                assert outcomes == ["already_cancelled"] * (UNDOERS - 1) + ["cancelled"], report
                for _, body in responses:
                    assert body["job"]["status"] == "cancelled", report
                    assert body["job"]["cancelled_at"] is not None, report
                wins["undo"] += 1
            jitter["max"] = 2 * statistics.median(latencies)
        for contender in contenders:
            contender.job_id = None
        start.wait(timeout=TIMEOUT)
    except threading.BrokenBarrierError:
        pass  # a contender failed: its error is raised below
    finally:
        start.abort()
        done.abort()
        for contender in contenders:
            contender.join(timeout=TIMEOUT)
    for contender in contenders:
        if contender.error is not None:
            raise contender.error
    assert not any(contender.is_alive() for contender in contenders)

    print(
        "undo/claim race over %s trials: undo won %s, claim won %s; median undo %.1f ms"
        % (TRIALS, wins["undo"], wins["claim"], 1000 * statistics.median(latencies))
    )
    assert wins["undo"] + wins["claim"] == TRIALS
    assert wins["undo"] >= 1, wins
    assert wins["claim"] >= 1, wins
