#!/usr/bin/env python
"""Celery executor benchmark: drain and pickup latency through Celery, beside runworker and
beside plain Celery on the same broker.

Run from the repository root (RabbitMQ and Redis on their default ports)::

    python bench/celery_relay.py

It drops and re-creates its own PostgreSQL database (``bench_celery`` unless
BENCH_DATABASE_URL names another) and migrates it. Then, for ``runworker`` (local
threads) and, on RabbitMQ and then on Redis, for plain Celery and for
``runworker --executor celery`` with one and with two ``celery worker`` processes
(threads pool), it measures (the executor with one job a message, and with
BENCH_JOBS_PER_MESSAGE jobs a message, CELERY_JOBS_PER_MESSAGE; plain Celery with one and
two worker processes, for the scaling a second process gives Celery itself):

(a) drain: BENCH_JOBS no-op jobs. For runworker and the executor, ``tests.noop``
    jobs scheduled in one transaction while the workers idle; jobs/s = BENCH_JOBS /
    (max(finished_at) - commit). For plain Celery (bench/celery_plain.py), as many
    ``send_task()`` calls over one producer while the worker idles; jobs/s =
    BENCH_JOBS / (the last task's count - the first publish).
(b) pickup (runworker and the executor with one Celery worker): PICKUP_JOBS jobs
    scheduled one every 50 ms, each in its own transaction; latency = the row's
    started_at (set when the job starts in the worker that runs it) - the moment
    commit returned.

Every worker process runs BENCH_CONCURRENCY jobs at once (runworker threads, Celery
pool threads). Each drain also reports how busy the machine's CPUs were (busy / total
over the drain, all processes): near 100%, the cores bound the figure, not a process.
Environment: BENCH_JOBS (2000), BENCH_CONCURRENCY (8), BENCH_JOBS_PER_MESSAGE (8),
BENCH_DATABASE_URL, BENCH_RESULTS (default bench/results-celery.md).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from celery import Celery
from harness import (
    REPO,
    WorkerProcess,
    append_results,
    env_int,
    machine_cpu,
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


class CeleryWorker(WorkerProcess):
    """A ``celery worker`` subprocess; ready once it logs " ready."."""

    def on_line(self, line: str) -> None:
        if " ready." in line:
            self.started.set()


def celery_worker(app: str, queue: str, concurrency: int, env: dict[str, str]) -> CeleryWorker:
    """Start a ``celery -A app worker`` (threads pool) consuming ``queue``."""
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        app,
        "worker",
        "-Q",
        queue,
        "--pool=threads",
        "--concurrency=%s" % concurrency,
        "--hostname=bench-%s@%%h" % uuid.uuid4().hex[:8],
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
    ]
    return CeleryWorker(command, env, 200)


def wait_started(processes: list[WorkerProcess], name: str) -> None:
    deadline = time.monotonic() + 60
    for process in processes:
        while not process.started.wait(0.05):
            if process.proc.poll() is not None or time.monotonic() > deadline:
                for started in processes:
                    started.stop()
                raise RuntimeError("%s did not start:\n%s" % (name, process.output()))


def start_executor(
    name: str, url: str, concurrency: int, celery_workers: int = 1, jobs_per_message: int = 1
) -> list[WorkerProcess]:
    """Start the processes of executor ``name`` ("local" or a broker, with
    ``celery_workers`` Celery worker processes, its relay publishing ``jobs_per_message``
    jobs a message) and wait until ready."""
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
            "SCHEDULER_CELERY_JOBS_PER_MESSAGE": str(jobs_per_message),
        }
        worker_env = {**env, "DATABASE_URL": url + "?conn_max_age=600"}  # see docs/celery.md
        queue = env["SCHEDULER_CELERY_QUEUE_PREFIX"] + "default"
        processes = [
            *(
                celery_worker("tests.celery_app", queue, concurrency, worker_env)
                for _ in range(celery_workers)
            ),
            WorkerProcess([*runworker, *options, "--executor", "celery"], env, 200),
        ]
    wait_started(processes, name)
    time.sleep(1)  # the relay's LISTEN connection follows its "worker started" line
    return processes


class Busy:
    """How busy the machine's CPUs were between start() and result() (busy / total)."""

    def start(self) -> None:
        self.busy, self.total = machine_cpu()

    def result(self) -> float:
        busy, total = machine_cpu()
        return (busy - self.busy) / max(total - self.total, 1)


def bench_plain(broker: str, jobs: int, concurrency: int, workers: int = 1) -> dict:
    """Drain ``jobs`` no-op tasks through plain Celery on ``broker`` (bench/celery_plain.py)
    with ``workers`` worker processes."""
    sys.path.insert(0, str(REPO / "bench"))
    import celery_plain

    queue = "bench.%s.plain" % uuid.uuid4().hex[:8]
    key = "bench-plain-%s" % uuid.uuid4().hex[:8]
    env = {"SCHEDULER_TEST_BROKER": BROKERS[broker], "PYTHONPATH": str(REPO / "bench")}
    started = [celery_worker("celery_plain", queue, concurrency, env) for _ in range(workers)]
    wait_started(started, "plain Celery on %s" % broker)
    publisher = Celery("bench_plain_publisher", broker=BROKERS[broker])
    busy = Busy()
    try:
        busy.start()
        t0 = time.time()
        with publisher.producer_or_acquire() as producer:
            for _ in range(jobs):
                publisher.send_task("bench.noop", args=(key,), queue=queue, producer=producer)
        deadline = time.monotonic() + 300
        while int(celery_plain.counter.get(key) or 0) < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError("plain Celery tasks still unfinished after 300 s")
            time.sleep(0.005)
        seconds = time.time() - t0
        cpu = busy.result()
    finally:
        for worker in started:
            worker.stop()
        celery_plain.counter.delete(key)
        with publisher.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)
    return {"jobs_s": jobs / seconds, "seconds": seconds, "cpu": cpu}


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
    busy = Busy()
    with transaction.atomic():
        schedule_many("tests.noop", [{}] * jobs)
        busy.start()
    t0 = time.time()
    wait_finished(300)
    cpu = busy.result()
    last = Job.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
    return {"jobs_s": jobs / (last - t0), "seconds": last - t0, "cpu": cpu}


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


def bench_executor(
    name: str,
    url: str,
    jobs: int,
    concurrency: int,
    celery_workers: int = 1,
    jobs_per_message: int = 1,
    pickup: bool = True,
):
    """Return (drain, pickup) for executor ``name``; pickup None unless asked."""
    processes = start_executor(name, url, concurrency, celery_workers, jobs_per_message)
    try:
        drain = bench_drain(jobs)
        pickup = bench_pickup() if pickup else None
    finally:
        for process in processes:
            process.stop()
    return drain, pickup


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    jobs = env_int("BENCH_JOBS", 2000)
    concurrency = env_int("BENCH_CONCURRENCY", 8)
    per_message = env_int("BENCH_JOBS_PER_MESSAGE", 8)
    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("synchronous_commit",))
    rows = []  # (label, drain, pickup, plain drain or None)

    def measured(label: str, drain: dict, pickup: dict | None, plain: dict | None) -> None:
        rows.append((label, drain, pickup, plain))
        print(row(label, drain, pickup, plain, jobs), end="", flush=True)

    drain, pickup = bench_executor("local", url, jobs, concurrency)
    measured("runworker (local threads)", drain, pickup, None)
    for broker in BROKERS:
        plain = bench_plain(broker, jobs, concurrency)
        measured("plain Celery on %s (1 worker)" % broker, plain, None, None)
        plain2 = bench_plain(broker, jobs, concurrency, workers=2)
        measured("plain Celery on %s (2 workers)" % broker, plain2, None, plain)
        drain, _ = bench_executor(broker, url, jobs, concurrency, pickup=False)
        measured("Celery executor on %s (1 worker, 1 job a message)" % broker, drain, None, plain)
        for workers in (1, 2):
            drain, pickup = bench_executor(
                broker, url, jobs, concurrency, workers, per_message, pickup=workers == 1
            )
            label = "Celery executor on %s (%s worker%s, %s jobs a message)" % (
                broker,
                workers,
                "s" if workers > 1 else "",
                per_message,
            )
            measured(label, drain, pickup, plain)
    section = "\n## %s — jobs=%s concurrency=%s\n\n%s\n\n" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        jobs,
        concurrency,
        machine_line(machine),
    )
    section += (
        "| executor | drain | ratio to plain Celery (1 worker) | CPUs busy | pickup latency "
        "(%s jobs, one every 50 ms) |\n"
        "|---|---|---|---|---|\n" % PICKUP_JOBS
    )
    section += "".join(row(label, d, p, plain, jobs) for label, d, p, plain in rows)
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-celery.md"))
    append_results(
        results,
        "# Celery executor benchmark results\n\nAppended by `python bench/celery_relay.py`.\n",
        section,
    )


def row(label: str, drain: dict, pickup: dict | None, plain: dict | None, jobs: int) -> str:
    """Return a results table row."""
    ratio = "%.2f" % (drain["jobs_s"] / plain["jobs_s"]) if plain else ""
    latency = ""
    if pickup:
        latency = "p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
            pickup["p50"],
            pickup["p99"],
            pickup["max"],
        )
    return "| %s | **%.0f jobs/s** (%s jobs in %.2f s) | %s | %.0f%% | %s |\n" % (
        label,
        drain["jobs_s"],
        jobs,
        drain["seconds"],
        ratio,
        drain["cpu"] * 100,
        latency,
    )


if __name__ == "__main__":
    main()
