"""Real Celery workers and a real relay on real RabbitMQ and Redis brokers.

Each test gets its own Celery queue prefix, so messages of another test (or
another run on the same broker) never reach its workers; its queues are
deleted afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.test import override_settings

from scheduler_app.conf import app_settings
from tests.celery_app import RABBITMQ_URL, REDIS_URL, make_app
from tests.helpers import REPO, database_url
from tests.processes.conftest import WorkerProcess

#: Lease of the relay and the Celery workers in these tests (the issue's CI bound: 2 s).
LEASE = "2"


@dataclass(frozen=True)
class Broker:
    name: str
    url: str
    prefix: str  # this test's Celery queue prefix

    def env(self) -> dict[str, str]:
        """Return the environment that points a relay or Celery worker at this broker."""
        return {
            "SCHEDULER_TEST_BROKER": self.url,
            "SCHEDULER_CELERY_QUEUE_PREFIX": self.prefix,
            "DATABASE_URL": database_url(),
            "PYTHONUNBUFFERED": "1",
        }

    def queue(self, name: str = "default") -> str:
        return self.prefix + name


@pytest.fixture(params=["rabbitmq", "redis"])
def broker(request) -> Iterator[Broker]:
    """Yield each broker in turn, with a queue prefix of this test's own."""
    url = RABBITMQ_URL if request.param == "rabbitmq" else REDIS_URL
    prefix = "scheduler_tests.%s." % uuid.uuid4().hex[:8]
    app = make_app(url)
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1)  # an unreachable broker fails the test, never skips
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, "CELERY_QUEUE_PREFIX": prefix}):
        yield Broker(name=request.param, url=url, prefix=prefix)
    with app.connection_for_write() as conn:
        for queue in app_settings.QUEUES:
            conn.default_channel.queue_delete(prefix + queue)


class CeleryWorker(WorkerProcess):
    """A ``celery worker`` subprocess (threads pool) in its own process group."""

    def __init__(
        self, broker: Broker, *, concurrency: int = 8, database: str | None = None
    ) -> None:
        """``database``: the URL of the database it uses (default: the test database)."""
        self.args = ()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.celery_app",
                "worker",
                "-Q",
                ",".join(broker.queue(q) for q in app_settings.QUEUES),
                "--pool=threads",
                "--concurrency=%s" % concurrency,
                "--hostname=%s@%%h" % uuid.uuid4().hex[:8],
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
            ],
            cwd=REPO,
            # Persistent connections, as docs/celery.md recommends for Celery workers.
            env={
                **os.environ,
                **broker.env(),
                "DATABASE_URL": (database or database_url()) + "?conn_max_age=60",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self) -> None:
        self.wait_for_output(" ready.", timeout=30)

    def kill(self) -> None:
        """SIGKILL the whole process group (the worker and anything it started)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        super().kill()


@pytest.fixture
def celery_worker(broker) -> Iterator[Callable[..., CeleryWorker]]:
    """Return a function that starts a Celery worker on ``broker``; all are killed afterwards."""
    started: list[CeleryWorker] = []

    def start(**kwargs) -> CeleryWorker:
        worker = CeleryWorker(broker, **kwargs)
        started.append(worker)
        worker.wait_ready()
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()


@pytest.fixture
def relay(broker) -> Iterator[Callable[..., WorkerProcess]]:
    """Return a function that starts ``runworker --executor celery`` on ``broker``."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        process = WorkerProcess(
            "--executor",
            "celery",
            "--lease",
            LEASE,
            "--poll-interval",
            "0.2",
            *args,
            env={**broker.env(), **(env or {})},
        )
        started.append(process)
        return process  # not waited for: a Celery worker started next starts meanwhile

    try:
        yield start
    finally:
        for process in started:
            process.kill()
