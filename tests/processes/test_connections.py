"""A runworker process holds connections for its running handlers, and two besides.

Counted in pg_stat_activity by the worker's application_name (libpq reads PGAPPNAME, so
every connection of the subprocess carries it), with the alert evaluation, the lease
renewal and a send lane's claim keeper at work, each of which had a connection of its own.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from django.db import connection

from scheduler_app.models import Recipient, SendBatch
from scheduler_app.scheduling import schedule
from tests.helpers import database_url, wait_until
from tests.sends_processes.conftest import make_batch
from tests.testapp.models import ProviderBehaviour, Run

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

CONCURRENCY = 4


def connections_of(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


def most_connections(application_name: str, seconds: float) -> int:
    """Return the most connections seen in ``seconds`` of samples (the side duties come and
    go: the lease renewal every third of a lease, the alert evaluation, the duties' turns)."""
    most = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        most = max(most, connections_of(application_name))
        time.sleep(0.02)  # the sampling rate, not a synchronisation
    return most


def start(start_worker, name: str, url: str, **env: str):
    return start_worker(
        "--concurrency",
        str(CONCURRENCY),
        "--lease",
        "3",
        env={
            "PGAPPNAME": name,
            "DATABASE_URL": url,
            "SCHEDULER_ALERT_INTERVAL": "1",
            # One lane, whose claims the keeper extends every half second.
            "SCHEDULER_SEND_LANES": "1",
            "SCHEDULER_SEND_CLAIM_SECONDS": "1.5",
            **env,
        },
    )


def queries_of(application_name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        return [query for (query,) in cursor.fetchall()]


@pytest.mark.parametrize(
    "url_options",
    [
        pytest.param("?conn_max_age=600", id="persistent-connections"),
        pytest.param("?pool=1", id="django-pool"),
    ],
)
def test_a_worker_holds_a_connection_per_running_handler_and_two_besides(
    start_worker, tmp_path: Path, url_options: str
):
    name = "worker-%s" % uuid.uuid4().hex[:12]
    worker = start(start_worker, name, database_url() + url_options)
    worker.wait_for_output("worker started")
    wait_until(lambda: connections_of(name) >= 1, message="the worker to connect")
    idle = most_connections(name, 2.0)
    assert idle <= 3, "an idle worker held %s connections" % idle

    # Every handler slot busy: blocked jobs, and a send lane whose provider takes its time.
    flag = tmp_path / "flag"
    jobs = [
        schedule("tests.block_until_flag", payload={"flag": str(flag), "max_wait": 30})
        for _ in range(CONCURRENCY - 1)
    ]
    ProviderBehaviour.objects.create(delay=0.1)
    batch = make_batch(40)
    wait_until(
        lambda: (
            Run.objects.filter(job_id__in=[j.pk for j in jobs]).count() == CONCURRENCY - 1
            and Recipient.objects.filter(batch=batch, sent_at__isnull=False).exists()
        ),
        message="every handler to start (each opens a connection) and the lane to send",
    )
    busy = most_connections(name, 2.0)
    assert busy <= CONCURRENCY + 2, "%s handlers running, %s connections" % (CONCURRENCY, busy)

    flag.touch()
    wait_until(
        lambda: (
            Run.objects.filter(finished_at__isnull=False).count() == CONCURRENCY - 1
            and SendBatch.objects.get(pk=batch.pk).status == SendBatch.Status.COMPLETED
        ),
        timeout=30,
        message="the handlers and the send to finish",
    )
    wait_until(
        lambda: connections_of(name) <= 3,
        message="the finished handlers to let go of their connections",
    )
    assert worker.alive(), worker.output


@pytest.mark.parametrize(
    ("listen_database", "listens", "most_idle"),
    [
        pytest.param("direct", True, 3, id="own-connection"),
        pytest.param("", False, 2, id="nowhere"),
    ],
)
def test_listen_database_says_where_a_worker_listens(
    start_worker, listen_database: str, listens: bool, most_idle: int
):
    """An alias: the LISTEN has a connection of its own (3 while idle). "": no LISTEN, and
    a job is still picked up, by the poll."""
    name = "worker-%s" % uuid.uuid4().hex[:12]
    worker = start(
        start_worker,
        name,
        database_url(),
        SCHEDULER_TEST_LISTEN_DATABASE=listen_database,
    )
    worker.wait_for_output("worker started")
    if listens:
        wait_until(
            lambda: "LISTEN scheduler_app_jobs" in queries_of(name),
            message="the worker to LISTEN",
        )
    job = schedule("tests.record")
    wait_until(lambda: Run.objects.filter(job_id=job.pk).exists(), message="the job to run")
    assert ("LISTEN scheduler_app_jobs" in queries_of(name)) is listens
    assert most_connections(name, 1.5) <= most_idle
