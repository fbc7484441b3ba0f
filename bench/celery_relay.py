#!/usr/bin/env python
"""Celery executor benchmark: drain and pickup latency through Celery, beside runworker.

Run from the repository root (RabbitMQ and Redis on their default ports)::

    python bench/celery_relay.py

It drops and re-creates its own PostgreSQL database (``bench_celery`` unless
BENCH_DATABASE_URL names another), migrates it, and for each executor --
``runworker`` (local threads), and ``runworker --executor celery`` with one
``celery worker`` (threads pool) on RabbitMQ, then on Redis -- measures:

(a) drain: BENCH_JOBS ``tests.noop`` jobs scheduled in one transaction while
    the workers idle; jobs/s = BENCH_JOBS / (max(finished_at) - commit).
(b) pickup: PICKUP_JOBS jobs scheduled one every 50 ms, each in its own
    transaction; latency = the row's started_at (set when the job starts in
    the worker that runs it) - the moment commit returned.

Every executor runs BENCH_CONCURRENCY jobs at once (runworker threads, Celery
pool threads). Environment: BENCH_JOBS (2000), BENCH_CONCURRENCY (8),
BENCH_DATABASE_URL, BENCH_RESULTS (default bench/results-celery.md).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from harness import (
    REPO,
    WorkerProcess,
    append_results,
    env_int,
    machine_description,
    machine_line,
    migrate,
    recreate_database,
    setup_django,
)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_celery"
BROKERS = {
    "rabbitmq": os.environ.get(
        "SCHEDULER_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//"
    ),
    "redis": os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379/5"),
}
PICKUP_JOBS = 100
PICKUP_INTERVAL = 0.050
ROW = "| %s | **%.0f jobs/s** (%s jobs in %.2f s) | p50 %.1f ms, p99 %.1f ms, max %.1f ms |\n"


class CeleryWorker(WorkerProcess):
    """A ``celery worker`` subprocess; ready once it logs " ready."."""

    def on_line(self, line: str) -> None:
        if " ready." in line:
            self.started.set()


def start_executor(name: str, url: str, concurrency: int) -> list[WorkerProcess]:
    """Start the processes of executor ``name`` ("local" or a broker) and wait until ready."""
    runworker = [sys.executable, "-m", "django", "runworker", "--settings=tests.settings"]
    options = ["--poll-interval", "30", "--no-scheduler"]
    if name == "local":
        local = [*runworker, "--concurrency", str(concurrency), *options]
        processes = [WorkerProcess(local, {"DATABASE_URL": url}, 200)]
    else:
        env = {
            "DATABASE_URL": url,
            "SCHEDULER_TEST_BROKER": BROKERS[name],
            "SCHEDULER_CELERY_QUEUE_PREFIX": "bench.%s." % uuid.uuid4().hex[:8],
        }
        worker_env = {**env, "DATABASE_URL": url + "?conn_max_age=600"}  # see docs/celery.md
        worker = CeleryWorker(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.celery_app",
                "worker",
                "-Q",
                env["SCHEDULER_CELERY_QUEUE_PREFIX"] + "default",
                "--pool=threads",
                "--concurrency=%s" % concurrency,
                "--hostname=bench-%s@%%h" % uuid.uuid4().hex[:8],
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
            ],
            worker_env,
            200,
        )
        relay = WorkerProcess([*runworker, *options, "--executor", "celery"], env, 200)
        processes = [worker, relay]
    deadline = time.monotonic() + 60
    for process in processes:
        while not process.started.wait(0.05):
            if process.proc.poll() is not None or time.monotonic() > deadline:
                for started in processes:
                    started.stop()
                raise RuntimeError("%s did not start:\n%s" % (name, process.output()))
    time.sleep(1)  # the relay's LISTEN connection follows its "worker started" line
    return processes


def wait_finished(timeout: float) -> None:
    from scheduler_app.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.unfinished().exists():
        if time.monotonic() > deadline:
            raise RuntimeError("jobs still unfinished after %ss" % timeout)
        time.sleep(0.02)


def bench_drain(jobs: int) -> dict:
    from django.db import transaction
    from django.db.models import Max

    from scheduler_app.models import Job
    from scheduler_app.scheduling import schedule_many

    Job.objects.all().delete()
    with transaction.atomic():
        schedule_many("tests.noop", [{}] * jobs)
    t0 = time.time()
    wait_finished(300)
    last = Job.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
    return {"jobs_s": jobs / (last - t0), "seconds": last - t0}


def bench_pickup() -> dict:
    from django.db import transaction

    from scheduler_app.models import Job
    from scheduler_app.scheduling import schedule

    Job.objects.all().delete()
    committed: dict[int, float] = {}
    for _ in range(PICKUP_JOBS):
        with transaction.atomic():
            job = schedule("tests.noop", {})
        committed[job.pk] = time.time()
        time.sleep(PICKUP_INTERVAL)
    wait_finished(60)
    started = dict(Job.objects.values_list("pk", "started_at"))
    latencies = sorted((started[pk].timestamp() - t) * 1000 for pk, t in committed.items())
    return {
        "p50": statistics.median(latencies),
        "p99": latencies[int(len(latencies) * 0.99) - 1],
        "max": latencies[-1],
    }


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    jobs = env_int("BENCH_JOBS", 2000)
    concurrency = env_int("BENCH_CONCURRENCY", 8)
    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("synchronous_commit",))
    rows = []
    for name in ("local", "rabbitmq", "redis"):
        processes = start_executor(name, url, concurrency)
        try:
            drain = bench_drain(jobs)
            pickup = bench_pickup()
        finally:
            for process in processes:
                process.stop()
        label = "runworker (local threads)" if name == "local" else "Celery on %s" % name
        rows.append((label, drain, pickup))
        print(
            "%s: drain %.0f jobs/s (%.2f s), pickup p50 %.1f ms p99 %.1f ms max %.1f ms"
            % (
                label,
                drain["jobs_s"],
                drain["seconds"],
                pickup["p50"],
                pickup["p99"],
                pickup["max"],
            ),
            flush=True,
        )
    section = "\n## %s — jobs=%s concurrency=%s\n\n%s\n\n" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        jobs,
        concurrency,
        machine_line(machine),
    )
    section += (
        "| executor | drain | pickup latency (%s jobs, one every 50 ms) |\n|---|---|---|\n"
        % (PICKUP_JOBS)
    )
    for label, drain, pickup in rows:
        section += (
            "| %s | **%.0f jobs/s** (%s jobs in %.2f s) | p50 %.1f ms, p99 %.1f ms, max %.1f ms |\n"
            % (
                label,
                drain["jobs_s"],
                jobs,
                drain["seconds"],
                pickup["p50"],
                pickup["p99"],
                pickup["max"],
            )
        )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-celery.md"))
    append_results(
        results,
        "# Celery executor benchmark results\n\nAppended by `python bench/celery_relay.py`.\n",
        section,
    )


if __name__ == "__main__":
    main()
