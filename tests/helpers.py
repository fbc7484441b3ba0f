"""Test helpers: polling with a timeout, and real runworker subprocesses."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from django.db import connection

from scheduler_app.worker.loop import Worker
from scheduler_app.worker.options import WorkerOptions

REPO = Path(__file__).resolve().parent.parent


def job_storage() -> str:
    """Return the table that stores the pending and running jobs (PostgreSQL): the job
    table, or its hot partition once the table is partitioned (scheduler_app.partitions)."""
    from scheduler_app import partitions

    return partitions.HOT if partitions.is_partitioned() else partitions.JOB


def indexes_covering(table: str, pk: int) -> set[str]:
    """Return the indexes of ``table`` (PostgreSQL), or of its partition that holds the row
    ``pk``, whose predicate admits that row: the ones a write of that row version adds an
    entry to."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM %s WHERE id = %%s" % table, [pk])
        table = cursor.fetchone()[0]
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indrelid = %s::regclass",
            [table],
        )
        covering = set()
        for name, predicate in cursor.fetchall():
            cursor.execute(
                "SELECT count(*) FROM %s WHERE id = %%s AND (%s)"
                % (table, (predicate or "true").replace("%", "%%")),
                [pk],
            )
            if cursor.fetchone()[0]:
                covering.add(name)
        return covering


def rows_read(sql: str, params: Any = None) -> int:
    """Return how many rows and index entries PostgreSQL's scans visited to run ``sql``:
    what EXPLAIN ANALYZE counts as each scan's rows, kept or filtered out, over all its
    loops. A query whose cost stays flat as tables grow keeps this small. PostgreSQL
    before 16 rounds a scan's rows per loop, so an inner scan that finds under half a
    row per loop counts none; its outer side's rows count, which is what a test reading
    a whole table through a nested loop shows. The statement
    runs in a savepoint that is rolled back; without ``params``, ``sql`` is sent as it
    is (a query Django captured, its ``%`` literal)."""
    with connection.cursor() as cursor:
        cursor.execute("SAVEPOINT rows_read")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()[0]
        cursor.execute("ROLLBACK TO SAVEPOINT rows_read")

    def visited(node: dict[str, Any]) -> int:
        own = 0
        if node["Node Type"].endswith("Scan"):
            own = node["Actual Loops"] * (
                node["Actual Rows"]
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            )
        return own + sum(visited(child) for child in node.get("Plans", ()))

    return visited(plan["Plan"])


def reads_of(queries: Iterable[dict[str, Any]], *tables: str) -> list[tuple[int, str]]:
    """Return (rows_read(), sql) of each SELECT among ``queries`` (a CaptureQueriesContext)
    that names one of ``tables`` (or a part of a table name), most rows first."""
    return sorted(
        (
            (rows_read(query["sql"]), query["sql"])
            for query in queries
            if query["sql"].startswith("SELECT") and any(table in query["sql"] for table in tables)
        ),
        reverse=True,
    )


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, message))
        time.sleep(interval)


def database_url() -> str:
    """Return a DATABASE_URL for the test database this process is using."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///%s" % settings["NAME"]
    return "postgres://%s@%s:%s/%s" % (
        settings["USER"] or "postgres",
        settings["HOST"] or "127.0.0.1",
        settings["PORT"] or 5432,
        settings["NAME"],
    )


@contextlib.contextmanager
def scratch_database(suffix: str) -> Iterator[str]:
    """Yield the URL of a new, empty PostgreSQL database beside the test database, for
    migrations run from a subprocess (see migrate_database); drop it afterwards."""
    import psycopg

    name = "%s_%s" % (connection.settings_dict["NAME"], suffix)
    base = database_url().rsplit("/", 1)[0].replace("postgres://", "postgresql://")
    with psycopg.connect(base + "/postgres", autocommit=True) as admin:
        admin.execute('DROP DATABASE IF EXISTS "%s"' % name)
        admin.execute('CREATE DATABASE "%s"' % name)
    try:
        yield "%s/%s" % (base, name)
    finally:
        with psycopg.connect(base + "/postgres", autocommit=True) as admin:
            admin.execute('DROP DATABASE IF EXISTS "%s"' % name)


def migrate_database(url: str, *target: str) -> None:
    """Run ``manage.py migrate [target...]`` with tests.settings against the database ``url``."""
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--settings=tests.settings", *target],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
        capture_output=True,
    )


def spawn_worker(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``manage.py runworker`` against the test database, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", "runworker", "--settings=tests.settings", *args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def make_worker(**overrides: Any) -> Worker:
    """Return a Worker (not started) with the options in-process tests use."""
    options = {
        "queues": ("default",),
        "concurrency": 2,
        "batch_size": 10,
        "poll_interval": 0.05,
        "lease_seconds": 10,
        "shutdown_timeout": 5,
        "database_unavailable_timeout": 10,
        "summary_interval": 60,
        **overrides,
    }
    return Worker(WorkerOptions(**options))


@contextlib.contextmanager
def running_worker(**overrides: Any) -> Iterator[Worker]:
    """Run a real Worker in a thread of this process for the block, then stop it.

    run() returns only after its LISTEN thread let go of its connection, so
    the test database can be flushed right after.
    """
    worker = make_worker(**overrides)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the worker did not stop within 30s"
        if errors:
            raise errors[0]


def wait_for_status(job: Any, *statuses: str, timeout: float = 20.0) -> Any:
    """Wait until ``job`` has one of ``statuses``; return the stored Job."""
    from scheduler_app.models import Job

    return wait_until(
        lambda: Job.objects.filter(pk=job.pk, status__in=statuses).first(),
        timeout=timeout,
        message="job %s to be %s" % (job.pk, "/".join(statuses)),
    )


class UnreadableError(Exception):
    """An exception whose message cannot be read: str() of it raises."""

    def __str__(self) -> str:
        raise RuntimeError("str broke")


def pickup_seconds(
    worker_is_idle: Callable[[], bool], *, jobs: int = 5, timeout: float = 30
) -> list[float]:
    """Schedule ``jobs`` ``tests.record`` jobs one at a time, each once ``worker_is_idle()``,
    and return how long each waited to start (started_at - created_at): how fast an idle
    worker's LISTEN wakes it."""
    from scheduler_app.models import Job
    from scheduler_app.scheduling import schedule
    from tests.testapp.models import Run

    pickups = []
    for _ in range(jobs):
        wait_until(worker_is_idle, message="the worker to go idle")
        job = schedule("tests.record")
        wait_until(
            lambda job=job: Run.objects.filter(job_id=job.pk).exists(),
            timeout=timeout,
            message="the job to start",
        )
        stored = Job.objects.get(pk=job.pk)
        pickups.append((stored.started_at - stored.created_at).total_seconds())
    return pickups
