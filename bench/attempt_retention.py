#!/usr/bin/env python
"""Retention of pruned jobs' attempts: the DELETE a history partition's drop ran for its
jobs' attempts against a dropped partition of attempts (scheduler_app.attempt_partitions),
and the attempt table's conversion.

Run from the repository root, alone on the machine::

    python bench/attempt_retention.py

On a database of its own (BENCH_DATABASE_URL, default ``bench_attempt_retention``), with
the attempt table as an install that holds rows has it (one table), it stores
BENCH_ATTEMPTS (1000000) failed attempts of as many jobs, VACUUM ANALYZEs, deletes
BENCH_COMPARE (200000) of them by ranges of job ids, 1000 jobs a statement (what
``partitions.drop()`` ran on one attempt table, there for a partition's jobs), and
VACUUMs them away, taking the CPU time (this process and its PostgreSQL backend) per
attempt. Then it times ``attempt_partitions.convert()``, stores as many attempts again in
one partition of job ids (made as wide as the job ids handed out in the last interval),
VACUUM ANALYZEs it, and prunes once with RETENTION_JOBS_DAYS set, its jobs gone
(``retention.prune()``: the count for the audit, the check of the range's jobs under the
lock, the drop), taking its CPU time per attempt removed. The last stdout line is
``convert_s=<n> delete_us_per_attempt=<n> vacuum_us_per_attempt=<n>
drop_us_per_attempt=<n> ratio=<n>``.

Environment: BENCH_ATTEMPTS, BENCH_COMPARE, BENCH_DATABASE_URL, BENCH_RESULTS (default
bench/results-prune.md), BENCH_REVISION.
"""

from __future__ import annotations

import datetime as dt
import os
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
from partition_convert import cpu_meter

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_attempt_retention"
ATTEMPTS = """
INSERT INTO scheduler_app_jobattempt (job_id, attempt, task_name, worker_id, due_at,
    started_at, finished_at, outcome, error)
SELECT %s + g, 1, 'bench.flaky', 'worker-1', now(), now(), now(), 'retried',
       'ConnectionError: the provider did not answer'
FROM generate_series(0, %s - 1) AS g
"""


def attempts(first_job: int, count: int, table: str) -> None:
    """Store an attempt of each of ``count`` jobs from ``first_job``, then VACUUM ANALYZE
    ``table``."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(ATTEMPTS, [first_job, count])
        cursor.execute("VACUUM ANALYZE %s" % table)


def next_job_id(value: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('scheduler_app_job_id_seq', %s)", [value - 1])


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    # The tables of an install that holds rows: migrate leaves them one table each.
    os.environ["SCHEDULER_TEST_PLAIN_JOB_TABLE"] = "1"
    setup_django(url)
    migrate()
    from django.db import connection
    from django.test import override_settings

    from scheduler_app import attempt_partitions, clock
    from scheduler_app.models import Job
    from scheduler_app.retention import PARTITIONED_ATTEMPTS, prune

    machine = machine_description(
        ("autovacuum", "shared_buffers"), os.environ.get("BENCH_REVISION", "")
    )
    count = env_int("BENCH_ATTEMPTS", 1_000_000)
    began = time.perf_counter()
    attempts(1, count, attempt_partitions.ATTEMPT)
    fill_s = time.perf_counter() - began

    # The DELETE by ranges of job ids, then the VACUUM of its dead rows.
    compare = env_int("BENCH_COMPARE", 200_000)
    cpu = cpu_meter()
    began = time.perf_counter()
    with connection.cursor() as cursor:
        for first in range(1, compare + 1, 1000):
            cursor.execute(
                "DELETE FROM %s WHERE job_id BETWEEN %%s AND %%s" % attempt_partitions.ATTEMPT,
                [first, first + 999],
            )
    delete_s, delete_cpu = time.perf_counter() - began, cpu()
    cpu = cpu_meter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM %s" % attempt_partitions.ATTEMPT)
    vacuum_cpu = cpu()

    jobs_kept = override_settings(
        SCHEDULER_APP={
            "RETENTION_JOBS_DAYS": 30,
            **{
                name: None
                for name in (
                    "RETENTION_OCCURRENCES_DAYS",
                    "RETENTION_CONTROL_EVENTS_DAYS",
                    "RETENTION_RECIPIENT_CONTEXT_DAYS",
                    "RETENTION_DRY_RUN_REPORTS_DAYS",
                    "RETENTION_WORKERS_DAYS",
                    "RETENTION_ALERTS_DAYS",
                )
            },
        }
    )
    with jobs_kept:
        next_job_id(count + 1)  # the jobs the stored attempts are of were handed out
        began = time.perf_counter()
        attempt_partitions.convert()
        convert_s = time.perf_counter() - began
        # An interval's jobs: one created before it, then ``count`` ids handed out in it,
        # the first to a job still there; the next prune makes a partition that wide.
        now = clock.now()
        fields = {"task_name": "bench.flaky", "run_at": now, "scheduled_for": now}
        Job.objects.create(**fields, created_at=now - dt.timedelta(days=2))
        recent = Job.objects.create(**fields)
        next_job_id(recent.pk + count)
        target, *_ = attempt_partitions.ensure_partitions()
        attempts(target.first, target.end - target.first, target.name)
        next_job_id(target.end)  # no new job can fall in its range
        Job.objects.all().delete()  # the jobs went (a history partition dropped)
        # What the prune runs before did: the partitions before the target's went.
        for partition in attempt_partitions.range_partitions():
            if partition.end <= target.first:
                attempt_partitions.drop(partition)
        cpu = cpu_meter()
        began = time.perf_counter()
        run = prune(now)
        drop_s, drop_cpu = time.perf_counter() - began, cpu()
    assert target not in attempt_partitions.range_partitions(), run.counts
    dropped = target.end - target.first
    delete_us, vacuum_us = delete_cpu * 1e6 / compare, vacuum_cpu * 1e6 / compare
    drop_us = drop_cpu * 1e6 / dropped
    final = (
        "convert_s=%.2f delete_us_per_attempt=%.2f vacuum_us_per_attempt=%.2f "
        "drop_us_per_attempt=%.3f ratio=%.0f"
        % (convert_s, delete_us, vacuum_us, drop_us, delete_us / drop_us)
    )
    section = (
        "\n## %s — bench/attempt_retention.py attempts=%s\n\n%s\n\n"
        "| measure | result |\n|---|---|\n"
        "| fill (SQL, then VACUUM ANALYZE) | %.1f s |\n"
        "| the DELETE of attempts by ranges of job ids, %s of them, 1000 jobs a statement "
        "| %.0f attempts/s (CPU %.2f µs an attempt, and %.2f µs for the VACUUM of its "
        "dead rows) |\n"
        "| `attempt_partitions.convert()` on %s attempts (CHECK validated, then the swap) "
        "| **%.2f s** |\n"
        "| a prune that drops a partition of %s attempts (audit count from the "
        "statistics: %s, check of the range's jobs under the lock, drop): wall, CPU "
        "| %.0f ms, **%.3f µs an attempt** (%.0fx less than the DELETE, %.0fx with its "
        "VACUUM) |\n"
        "\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            count,
            machine_line(machine),
            fill_s,
            compare,
            compare / delete_s,
            delete_us,
            vacuum_us,
            count - compare,
            convert_s,
            dropped,
            run.counts[PARTITIONED_ATTEMPTS],
            drop_s * 1000,
            drop_us,
            delete_us / drop_us,
            (delete_us + vacuum_us) / drop_us,
            final,
        )
    )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-prune.md"))
    append_results(results, "# Retention benchmark results\n", section)
    print(final)


if __name__ == "__main__":
    main()
