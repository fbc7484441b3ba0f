#!/usr/bin/env python
"""Worker benchmarks at scale (issue #14): pickup behind a backlog, and cost as history grows.

Run from the repository root (not in CI: the history mode writes 1.1 million rows)::

    python bench/worker_scale.py                       # both modes
    BENCH_MODE=backlog python bench/worker_scale.py    # pickup while a backlog drains
    BENCH_MODE=history python bench/worker_scale.py    # empty table vs 1M finished + 100k pending

It drops and re-creates its own database (``bench_worker_scale`` unless
BENCH_DATABASE_URL names another), migrates it and runs the app's default
settings (CONCURRENCY, CLAIM_BATCH_SIZE), like bench/worker.py:

backlog: BENCH_WORKERS (2) runworker processes; BENCH_BACKLOG (20000) jobs are
    scheduled in one transaction; while the workers drain them, PICKUP_JOBS jobs
    with priority -1 (ahead of the backlog, as an urgent job is) are scheduled one
    every 50 ms, each in its own transaction. Latency = started_at - the moment
    its commit returned. A job of the backlog's own priority waits for the jobs
    ahead of it by design; the figure is how soon a worker that is busy draining
    notices a job it should run next.
history: the drain of bench/worker.py (BENCH_JOBS jobs, 2 workers) and the
    CLAIM's latency (EXPLAIN ANALYZE, median of CLAIM_SAMPLES, 20,000 due jobs
    pending, rolled back), first on an empty job table, then with BENCH_FINISHED
    (1,000,000) finished jobs and BENCH_PENDING (100,000) pending jobs due in a
    day in it (vacuumed and analysed). Target: within 20% of the empty table.

A dated section is appended to bench/results-worker.md (BENCH_RESULTS); the
last stdout line is ``backlog_pickup_p50_ms=<n> backlog_pickup_p99_ms=<n>
drain_empty_jobs_s=<n> drain_history_jobs_s=<n> claim_empty_ms=<n> claim_history_ms=<n>``
(the figures of the modes that ran).
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

from harness import (
    REPO,
    append_results,
    env_int,
    machine_description,
    machine_line,
    migrate,
    recreate_database,
    setup_django,
    wait_ready,
)
from worker import POLL, WorkerProcess, bench_drain

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_worker_scale"
PICKUP_JOBS = 100
PICKUP_INTERVAL = 0.050
CLAIM_SAMPLES = 21
CLAIM_BACKLOG = 20000


def bench_backlog_pickup(
    url: str, backlog: int, concurrency: int, batch: int, workers: int
) -> dict:
    from django.db import connection, transaction

    from scheduler_app import clock, schedule, schedule_many
    from scheduler_app.models import Job

    processes = [
        WorkerProcess(url, "--concurrency", str(concurrency), "--batch-size", str(batch))
        for _ in range(workers)
    ]
    try:
        wait_ready(processes)
        with transaction.atomic():
            schedule_many("tests.noop", [None] * backlog)
        committed: dict[int, dt.datetime] = {}
        start = time.monotonic()
        for i in range(PICKUP_JOBS):
            delay = start + i * PICKUP_INTERVAL - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with transaction.atomic():
                job = schedule("tests.noop", priority=-1)
            committed[job.pk] = clock.now()
        pending_at_end = Job.objects.filter(status="pending").count()
        deadline = time.monotonic() + 300
        while Job.objects.filter(status__in=["pending", "running"]).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the backlog did not drain in 300 s")
            time.sleep(POLL)
        started = dict(Job.objects.filter(pk__in=committed).values_list("pk", "started_at"))
        connection.close()
    finally:
        for process in processes:
            process.stop()
    latencies = sorted((started[pk] - at).total_seconds() * 1000 for pk, at in committed.items())
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "n": len(latencies),
        "p50_ms": q[49],
        "p99_ms": q[98],
        "max_ms": latencies[-1],
        "pending_at_end": pending_at_end,
        "backlog": backlog,
    }


def claim_latency_ms(limit: int) -> float:
    """Median server time of CLAIM (EXPLAIN ANALYZE of the claim function's call, its plan
    kept by the session after the first calls, as in a worker) with CLAIM_BACKLOG due jobs,
    rolled back."""
    from django.db import transaction

    from scheduler_app import schedule_many
    from scheduler_app.conf import app_settings
    from scheduler_app.db.postgresql import jobs as pg
    from scheduler_app.db.postgresql.statements import bound_cursor

    times = []
    with transaction.atomic():
        schedule_many("tests.noop", [None] * CLAIM_BACKLOG)
        params = pg._claim_params(
            "bench", list(app_settings.QUEUES), limit, dt.timedelta(seconds=30), [], True
        )
        for _ in range(CLAIM_SAMPLES):
            with transaction.atomic(), bound_cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pg.CLAIM, params)
                raw = cursor.fetchone()[0]
                times.append(raw[0]["Execution Time"] + raw[0]["Planning Time"])
                transaction.set_rollback(True)
        transaction.set_rollback(True)
    return statistics.median(times)


def fill_history(finished: int, pending: int, *, due: dt.timedelta = dt.timedelta(days=1)) -> None:
    """Add ``finished`` succeeded jobs and ``pending`` jobs due ``due`` from now (a day);
    vacuum, analyse."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, "
            "status, scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, "
            "started_at, finished_at, last_error, created_at) "
            "SELECT 'tests.noop', 'default', 0, 'null', 1, 'succeeded', now() - interval '1 day', "
            "now() - interval '1 day', 1, 3, 'history', 1, now() - interval '1 day', "
            "now() - interval '1 day', '', now() - interval '1 day' FROM generate_series(1, %s)",
            [finished],
        )
        cursor.execute(
            "INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, "
            "status, scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, "
            "last_error, created_at) "
            "SELECT 'tests.noop', 'default', 0, 'null', 1, 'pending', now() + %s, now() + %s, "
            "0, 3, '', 0, '', now() FROM generate_series(1, %s)",
            [due, due, pending],
        )
        cursor.execute("VACUUM ANALYZE scheduler_app_job")


def bench_history(url: str, jobs: int, concurrency: int, batch: int, workers: int) -> dict:
    limit = min(concurrency, batch)
    empty_claim = claim_latency_ms(limit)
    empty = bench_drain(url, jobs, concurrency, batch, workers, None, history=0)
    fill_history(env_int("BENCH_FINISHED", 1_000_000), env_int("BENCH_PENDING", 100_000))
    full_claim = claim_latency_ms(limit)
    full = bench_drain(url, jobs, concurrency, batch, workers, None, history=0)
    return {
        "claim_empty_ms": empty_claim,
        "claim_history_ms": full_claim,
        "drain_empty_jobs_s": empty["jobs_s"],
        "drain_history_jobs_s": full["jobs_s"],
    }


def main() -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from scheduler_app.conf import DEFAULTS

    mode = os.environ.get("BENCH_MODE", "both")
    url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_URL
    concurrency = env_int("BENCH_CONCURRENCY", DEFAULTS["CONCURRENCY"])
    batch = env_int("BENCH_BATCH", DEFAULTS["CLAIM_BATCH_SIZE"])
    workers = env_int("BENCH_WORKERS", 2)
    results_path = Path(os.environ.get("BENCH_RESULTS") or REPO / "bench" / "results-worker.md")
    when = dt.datetime.now(dt.UTC)
    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("synchronous_commit",), os.environ.get("BENCH_REVISION", ""))
    figures: dict[str, float] = {}
    lines = []
    if mode in ("both", "backlog"):
        backlog = bench_backlog_pickup(
            url, env_int("BENCH_BACKLOG", 20000), concurrency, batch, workers
        )
        figures["backlog_pickup_p50_ms"] = backlog["p50_ms"]
        figures["backlog_pickup_p99_ms"] = backlog["p99_ms"]
        lines.append(
            "| pickup of a priority -1 job while %s workers drain a %s-job backlog (%s jobs, one "
            "every %d ms; %s backlog jobs still pending after the last) | **p50 %.2f ms, p99 "
            "%.2f ms** (max %.2f; target p99 < 10 ms) |"
            % (
                workers,
                backlog["backlog"],
                backlog["n"],
                PICKUP_INTERVAL * 1000,
                backlog["pending_at_end"],
                backlog["p50_ms"],
                backlog["p99_ms"],
                backlog["max_ms"],
            )
        )
        print(lines[-1], flush=True)
    if mode in ("both", "history"):
        history = bench_history(url, env_int("BENCH_JOBS", 20000), concurrency, batch, workers)
        figures.update(history)
        lines.append(
            "| drain, empty table -> 1M finished + 100k pending | %.0f -> %.0f jobs/s (%.0f%%; "
            "target within 20%%) |"
            % (
                history["drain_empty_jobs_s"],
                history["drain_history_jobs_s"],
                100 * history["drain_history_jobs_s"] / history["drain_empty_jobs_s"],
            )
        )
        lines.append(
            "| CLAIM of %s (planning + execution, median of %s), empty -> 1M + 100k | "
            "%.2f -> %.2f ms |"
            % (
                min(concurrency, batch),
                CLAIM_SAMPLES,
                history["claim_empty_ms"],
                history["claim_history_ms"],
            )
        )
        print("\n".join(lines[-2:]), flush=True)
    final = " ".join("%s=%.2f" % kv for kv in figures.items())
    section = [
        "",
        "## %s — bench/worker_scale.py mode=%s concurrency=%s batch=%s workers=%s"
        % (when.strftime("%Y-%m-%d %H:%M UTC"), mode, concurrency, batch, workers),
        "",
        machine_line(machine),
        "",
        "| measure | result |",
        "|---|---|",
        *lines,
        "",
        "```",
        final,
        "```",
    ]
    append_results(
        results_path,
        "# Worker benchmark results\n\nAppended by `python bench/worker.py`; "
        "see bench/README.md.\n",
        "\n".join(section) + "\n",
    )
    print(final, flush=True)


if __name__ == "__main__":
    main()
