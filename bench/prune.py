#!/usr/bin/env python
"""Retention benchmark: prune a million finished jobs while a worker keeps claiming.

Run from the repository root::

    python bench/prune.py

It drops and re-creates its own PostgreSQL database (``bench_prune`` unless
BENCH_DATABASE_URL names another), migrates it, and fills the job table
with BENCH_JOBS (1,000,000) finished jobs (succeeded, failed, cancelled),
each with one attempt row, finished 31 to 60 days ago, plus BENCH_PENDING
(20,000) due pending jobs for the claimer; then VACUUM ANALYZE.

A claimer process (its own connection, like a worker's claim loop) runs the
real claim statement (``backend().claim_jobs``, BENCH_CLAIM jobs at a time)
every 5 ms, hands the jobs back (an UPDATE, as a finish would write) and
records how long each claim takes: first for BENCH_BASELINE
seconds with nothing else running (the baseline), then during
``scheduler_app.retention.prune()`` with PRUNE_BATCH_SIZE (BENCH_BATCH, 1000)
and a breaker above BENCH_JOBS. The figures: jobs (and attempts) deleted per
second, and the claim latency p50 / p99 / worst during the prune next to the
baseline.

Environment: BENCH_JOBS, BENCH_PENDING, BENCH_BATCH, BENCH_CLAIM (10),
BENCH_BASELINE (10 s), BENCH_DATABASE_URL, BENCH_RESULTS (default
bench/results-prune.md), BENCH_NOTE (a sentence about the machine's load).

A dated section is appended to the results file; the last stdout line is
``prune_jobs_s=<n> claim_p99_ms=<n> claim_max_ms=<n> baseline_max_ms=<n>``.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import statistics
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
)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_prune"
#: Seconds the claimer waits between claims (a busy worker's loop, not a spin).
PAUSE = 0.005

FILL_JOBS = """
INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, status,
    scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, started_at,
    finished_at, last_error, result, created_at)
SELECT 'bench.done', 'default', 0, '{"n": 1}', 1,
    (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled'])[1 + n %% 5],
    f, f, 1, 3, 'bench', 1, f, f + interval '1 second', '', NULL, f
FROM (
    SELECT n, now() - interval '31 days' - (n %% 2505600) * interval '1 second' AS f
    FROM generate_series(1, %s) AS n
) AS rows
"""
FILL_ATTEMPTS = """
INSERT INTO scheduler_app_jobattempt (job_id, attempt, task_name, worker_id, due_at, started_at,
    finished_at, outcome, error)
SELECT id, 1, task_name, 'bench', run_at, started_at, finished_at,
    CASE status WHEN 'cancelled' THEN 'succeeded' ELSE status END, ''
FROM scheduler_app_job WHERE status <> 'pending'
"""
FILL_PENDING = """
INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, status,
    scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, last_error, created_at)
SELECT 'bench.todo', 'default', 0, '{}', 1, 'pending', now() - interval '1 minute',
    now() - interval '1 minute', 0, 3, '', 0, '', now()
FROM generate_series(1, %s)
"""


def claimer(
    url: str,
    limit: int,
    go: multiprocessing.Event,
    stop: multiprocessing.Event,
    out: multiprocessing.Queue,
) -> None:
    """Claim back to back until ``stop``; put (phase, [seconds per claim]) per phase."""
    setup_django(url)
    from scheduler_app.db import backend
    from scheduler_app.models import Job

    phase, latencies = "baseline", []
    while not stop.is_set():
        if go.is_set() and phase == "baseline":
            out.put((phase, latencies))
            phase, latencies = "prune", []
        began = time.perf_counter()
        rows = backend().claim_jobs(
            worker="bench-claimer",
            queues=["default"],
            limit=limit,
            lease=dt.timedelta(minutes=5),
        )
        latencies.append(time.perf_counter() - began)
        # Hand them back (the write a worker's finish would do), so the backlog stays.
        Job.objects.filter(pk__in=[row[0] for row in rows]).update(
            status=Job.Status.PENDING, worker_id="", lease_expires_at=None
        )
        time.sleep(PAUSE)
    out.put((phase, latencies))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def describe(latencies: list[float]) -> str:
    ms = [v * 1000 for v in latencies]
    return "%d claims: p50 %.1f ms, p99 %.1f ms, worst %.1f ms" % (
        len(ms),
        statistics.median(ms),
        percentile(ms, 0.99),
        max(ms),
    )


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    jobs = env_int("BENCH_JOBS", 1_000_000)
    pending = env_int("BENCH_PENDING", 20_000)
    batch = env_int("BENCH_BATCH", 1000)
    claim = env_int("BENCH_CLAIM", 10)
    baseline = env_int("BENCH_BASELINE", 10)
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-prune.md"))

    recreate_database(url)
    # The DELETE on one job table, as measured before partitioned history: migrate
    # leaves it one table (tests/settings.py).
    os.environ["SCHEDULER_TEST_PLAIN_JOB_TABLE"] = "1"
    setup_django(url)
    migrate()
    from django.db import connection
    from django.test import override_settings

    from scheduler_app import clock
    from scheduler_app.models import Job, JobAttempt
    from scheduler_app.retention import prune

    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FILL_JOBS % jobs)
        cursor.execute(FILL_ATTEMPTS)
        cursor.execute(FILL_PENDING % pending)
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    fill = time.perf_counter() - began
    print("filled %s finished jobs (+ attempts) and %s pending in %.1f s" % (jobs, pending, fill))
    machine = machine_description(("synchronous_commit", "shared_buffers"))
    connection.close()

    go, stop = multiprocessing.Event(), multiprocessing.Event()
    out: multiprocessing.Queue = multiprocessing.Queue()
    process = multiprocessing.Process(target=claimer, args=(url, claim, go, stop, out))
    process.start()
    time.sleep(baseline)  # the claimer measures its baseline meanwhile
    go.set()
    settings = {"PRUNE_BATCH_SIZE": batch, "PRUNE_SCHEDULE": None}
    with override_settings(SCHEDULER_APP=settings):
        began = time.perf_counter()
        run = prune(clock.now(), max_rows=jobs * 2)
        seconds = time.perf_counter() - began
    stop.set()
    phases = dict(out.get() for _ in range(2))
    process.join(30)
    deleted = run.counts["jobs"]
    left = Job.objects.filter(task_name="bench.done").count()
    attempts_left = JobAttempt.objects.filter(task_name="bench.done").count()
    rate = deleted / seconds
    during = [v * 1000 for v in phases["prune"]]
    base = [v * 1000 for v in phases["baseline"]]

    note = os.environ.get(
        "BENCH_NOTE",
        "The machine was shared with other developers' test runs and benchmarks while this "
        "ran (see the load average): the figures are lower bounds for a quiet machine.",
    )
    section = (
        "\n## %s — jobs=%s batch=%s claim=%s\n\n%s\n\n%s\n\n"
        "| measure | result |\n|---|---|\n"
        "| fill (SQL, then VACUUM ANALYZE) | %.1f s |\n"
        "| prune: %s finished jobs and their %s attempts | **%.0f jobs/s** (%.1f s; "
        "%s batches of %s; %s jobs and %s attempts left) |\n"
        "| claim latency before the prune (baseline, %s s) | %s |\n"
        "| claim latency during the prune | **%s** |\n\n"
        "```\nprune_jobs_s=%.0f claim_p99_ms=%.1f claim_max_ms=%.1f baseline_max_ms=%.1f\n```\n"
        % (
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            jobs,
            batch,
            claim,
            machine_line(machine),
            note,
            fill,
            deleted,
            deleted,
            rate,
            seconds,
            -(-deleted // batch),
            batch,
            left,
            attempts_left,
            baseline,
            describe(phases["baseline"]),
            describe(phases["prune"]),
            rate,
            percentile(during, 0.99),
            max(during),
            max(base),
        )
    )
    append_results(
        results,
        "# Retention benchmark results\n\nAppended by `python bench/prune.py`; see "
        "bench/README.md.\n",
        section,
    )
    print(section)
    print(
        "prune_jobs_s=%.0f claim_p99_ms=%.1f claim_max_ms=%.1f baseline_max_ms=%.1f"
        % (rate, percentile(during, 0.99), max(during), max(base))
    )


if __name__ == "__main__":
    main()
