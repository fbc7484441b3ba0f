"""Live workers: two real runworker processes keep heartbeat rows, evaluate the alert rules
without opening duplicates, and mark their rows stopped on a clean exit."""

from __future__ import annotations

import datetime as dt
import signal
import socket

import pytest

from scheduler_app import clock
from scheduler_app.models import Alert, Job, WorkerHeartbeat
from scheduler_app.scheduling import schedule
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
FAST = {"SCHEDULER_ALERT_INTERVAL": "0.2", "SCHEDULER_HEARTBEAT_INTERVAL": "0.5"}


def test_two_workers_heartbeat_evaluate_without_duplicates_and_stop_cleanly(start_worker):
    # Due on a queue neither worker serves: both evaluators find "no live worker" again and again.
    Job.objects.create(
        task_name="tests.noop", queue="slow", scheduled_for=clock.now(), run_at=clock.now()
    )
    workers = [
        start_worker("--queue=default", "--queue=emails", "--no-scheduler", env=FAST)
        for _ in range(2)
    ]
    rows = wait_until(
        lambda: (
            len(WorkerHeartbeat.objects.filter(status="alive")) == 2
            and WorkerHeartbeat.objects.filter(status="alive")
        ),
        message="both heartbeat rows",
    )
    assert sorted(r.pid for r in rows) == sorted(w.pid for w in workers)
    assert all(r.queues == ["default", "emails"] for r in rows)
    first_seen = {r.worker_id: r.last_seen_at for r in rows}

    wait_until(
        lambda: all(
            r.last_seen_at > first_seen[r.worker_id] for r in WorkerHeartbeat.objects.all()
        ),
        message="heartbeats to move",
    )
    alert = wait_until(
        lambda: Alert.objects.filter(kind=Alert.Kind.NO_WORKER).first(),
        message="the no_worker alert",
    )
    assert alert.subject == "queue:slow"
    # Let both evaluate many more times (each offers every ~0.2 s).
    wait_until(
        lambda: (
            Alert.objects.get(pk=alert.pk).last_seen_at
            > alert.last_seen_at + dt.timedelta(seconds=2)
        ),
        message="more evaluations",
    )
    assert Alert.objects.filter(kind=Alert.Kind.NO_WORKER).count() == 1

    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait_exit() == 0, worker.output
    assert set(WorkerHeartbeat.objects.values_list("status", "running")) == {("stopped", 0)}


def test_a_notifier_that_never_answers_does_not_stop_the_worker(start_worker):
    # A webhook that accepts connections and never answers (the notifier's timeout is 120 s).
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        url = "http://127.0.0.1:%d/" % server.getsockname()[1]
        Job.objects.create(
            task_name="tests.noop", queue="slow", scheduled_for=clock.now(), run_at=clock.now()
        )
        worker = start_worker(
            "--queue=default",
            "--no-scheduler",
            env={**FAST, "SCHEDULER_TEST_ALERT_WEBHOOK": url},
        )
        notifier, _ = server.accept()  # the no_worker alert opened: its delivery now hangs
        with notifier:
            job = schedule("tests.noop")
            wait_until(
                lambda: Job.objects.get(pk=job.pk).status == Job.Status.SUCCEEDED,
                timeout=15,
                message="the job to run while the notifier hangs",
            )
            assert Alert.objects.filter(kind=Alert.Kind.NO_WORKER).count() == 1
            worker.signal(signal.SIGTERM)
            assert worker.wait_exit() == 0, worker.output
