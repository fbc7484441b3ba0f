#!/usr/bin/env python
"""Retention of schedule occurrences: the prune's row-by-row delete against a dropped
partition of occurrences (scheduler_app.occurrence_partitions), the table's conversion,
and a look-up of a schedule's latest occurrence on one table and on the partitions.

Run from the repository root, alone on the machine::

    python bench/occurrence_retention.py

On a database of its own (BENCH_DATABASE_URL, default ``bench_occurrence_retention``), with
the occurrence table as an install that holds rows has it (one table), it stores
BENCH_SCHEDULES (100) schedules' occurrences, one a minute each, 10,000 minutes (a week
of one partition) 200 days back, VACUUM ANALYZEs, deletes BENCH_COMPARE (100000) of them
as the prune does (retention's occurrences kind, PRUNE_BATCH_SIZE a transaction) and
VACUUMs them away, taking the CPU time (this process and its PostgreSQL backend) per
occurrence. Then it times ``occurrence_partitions.convert()``, stores as many
occurrences again in the partition of a week a year ahead, VACUUM ANALYZEs them, and
prunes once as of when that week is past RETENTION_OCCURRENCES_DAYS (90), taking its CPU
time per occurrence removed. The last stdout line is ``convert_s=<n>
delete_us_per_occurrence=<n> vacuum_us_per_occurrence=<n> drop_us_per_occurrence=<n>
ratio=<n> latest_one_table_ms=<n> latest_partitioned_ms=<n>`` (the look-up: the
enqueuer's latest occurrence of a schedule, a warm connection, HISTORY_PARTITIONS_AHEAD
partitions ahead and the 90 days of retention's behind).

Environment: BENCH_SCHEDULES, BENCH_COMPARE, BENCH_DATABASE_URL, BENCH_RESULTS (default
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

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_occurrence_retention"
MINUTES = 10_000
RETENTION_DAYS = 90
YEAR = dt.timedelta(days=365)
WEEK = dt.timedelta(days=7)
OCCURRENCES = """
INSERT INTO scheduler_app_scheduleoccurrence (schedule_id, occurrence_at, outcome, detail,
    created_at)
SELECT s.id, %s::timestamptz + g * interval '1 minute', 'skipped_overlap', '', now()
FROM scheduler_app_schedule AS s, generate_series(0, %s - 1) AS g
"""
LATEST = (
    "SELECT occurrence_at FROM scheduler_app_scheduleoccurrence WHERE schedule_id = %s"
    " ORDER BY occurrence_at DESC LIMIT 1"
)


def occurrences(start: dt.datetime) -> None:
    """Store MINUTES occurrences of every schedule, one a minute from ``start``."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(OCCURRENCES, [start, MINUTES])
        cursor.execute("VACUUM ANALYZE scheduler_app_scheduleoccurrence")


def latest_ms(schedule_id: int, tries: int = 200) -> float:
    """Return the wall time of the latest-occurrence look-up (planned each time, as the
    ORM's queries are), the median of ``tries``."""
    from django.db import connection

    times = []
    with connection.cursor() as cursor:
        for _ in range(tries):
            began = time.perf_counter()
            cursor.execute(LATEST, [schedule_id])
            cursor.fetchall()
            times.append(time.perf_counter() - began)
    return sorted(times)[len(times) // 2] * 1000


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    # The tables of an install that holds rows: migrate leaves them one table each.
    os.environ["SCHEDULER_TEST_PLAIN_JOB_TABLE"] = "1"
    setup_django(url)
    migrate()
    from django.db import connection
    from django.test import override_settings

    from scheduler_app import clock, occurrence_partitions
    from scheduler_app.models import Schedule
    from scheduler_app.retention import KINDS, PARTITIONED_OCCURRENCES, _remove_rows, prune

    machine = machine_description(
        ("autovacuum", "shared_buffers"), os.environ.get("BENCH_REVISION", "")
    )
    schedules = env_int("BENCH_SCHEDULES", 100)
    Schedule.objects.bulk_create(
        Schedule(
            name="s%s" % n,
            task_name="bench.noop",
            kind=Schedule.Kind.FIXED_RATE,
            interval=dt.timedelta(minutes=1),
        )
        for n in range(schedules)
    )
    first = Schedule.objects.order_by("pk").values_list("pk", flat=True).first()
    total = schedules * MINUTES
    began = time.perf_counter()
    occurrences(clock.now() - dt.timedelta(days=200))
    fill_s = time.perf_counter() - began
    latest_one_table = latest_ms(first)

    # Retention's row-by-row delete on the table as it is, then the VACUUM of its dead rows.
    compare = env_int("BENCH_COMPARE", 100_000)
    (kind,) = [kind for kind in KINDS if kind.name == "occurrences"]
    cutoff = clock.now() - dt.timedelta(days=RETENTION_DAYS)
    cpu = cpu_meter()
    began = time.perf_counter()
    deleted = _remove_rows(kind, cutoff, compare)
    delete_s, delete_cpu = time.perf_counter() - began, cpu()
    cpu = cpu_meter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM scheduler_app_scheduleoccurrence")
    vacuum_cpu = cpu()

    only_occurrences = override_settings(
        SCHEDULER_APP={
            "RETENTION_OCCURRENCES_DAYS": RETENTION_DAYS,
            **{
                name: None
                for name in (
                    "RETENTION_JOBS_DAYS",
                    "RETENTION_CONTROL_EVENTS_DAYS",
                    "RETENTION_RECIPIENT_CONTEXT_DAYS",
                    "RETENTION_DRY_RUN_REPORTS_DAYS",
                    "RETENTION_WORKERS_DAYS",
                    "RETENTION_ALERTS_DAYS",
                )
            },
        }
    )
    with only_occurrences:
        began = time.perf_counter()
        occurrence_partitions.convert()
        convert_s = time.perf_counter() - began
        # Partitions a year ahead: the week whose occurrences are dropped, and as many as
        # an install has with 90 days of retention behind and those made ahead.
        target, *_ = occurrence_partitions.ensure_partitions(now=clock.now() + YEAR)
        occurrence_partitions.ensure_partitions(now=clock.now() + YEAR + 9 * WEEK)
        count = len(occurrence_partitions.range_partitions())
        latest_partitioned = latest_ms(first)
        occurrences(target.start)
        # What the prunes before did: the weeks before the target's went (empty), and the
        # old occurrences of the before partition row by row.
        for partition in occurrence_partitions.range_partitions():
            if partition.end < target.end:
                occurrence_partitions.drop(partition)
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE %s" % occurrence_partitions.BEFORE)
        cpu = cpu_meter()
        began = time.perf_counter()
        run = prune(target.end + dt.timedelta(days=RETENTION_DAYS))
        drop_s, drop_cpu = time.perf_counter() - began, cpu()
    assert run.counts["occurrences"] == 0, run.counts
    assert target not in occurrence_partitions.range_partitions()
    dropped = total
    delete_us, vacuum_us = delete_cpu * 1e6 / deleted, vacuum_cpu * 1e6 / deleted
    drop_us = drop_cpu * 1e6 / dropped
    final = (
        "convert_s=%.2f delete_us_per_occurrence=%.2f vacuum_us_per_occurrence=%.2f "
        "drop_us_per_occurrence=%.3f ratio=%.0f latest_one_table_ms=%.3f "
        "latest_partitioned_ms=%.3f"
        % (
            convert_s,
            delete_us,
            vacuum_us,
            drop_us,
            delete_us / drop_us,
            latest_one_table,
            latest_partitioned,
        )
    )
    section = (
        "\n## %s — bench/occurrence_retention.py schedules=%s occurrences=%s\n\n%s\n\n"
        "| measure | result |\n|---|---|\n"
        "| fill (SQL, then VACUUM ANALYZE) | %.1f s |\n"
        "| the prune's row-by-row delete of occurrences, %s of them, PRUNE_BATCH_SIZE a "
        "transaction | %.0f occurrences/s (CPU %.2f µs an occurrence, and %.2f µs for the "
        "VACUUM of its dead rows) |\n"
        "| `occurrence_partitions.convert()` on %s occurrences (CHECK validated, then the "
        "swap) | **%.2f s** |\n"
        "| a prune that drops a partition of %s occurrences (audit count from the "
        "statistics: %s, check of unfinished runs under the lock, drop): wall, CPU "
        "| %.0f ms, **%.3f µs an occurrence** (%.0fx less than the delete, %.0fx with its "
        "VACUUM) |\n"
        "| a schedule's latest occurrence (median of 200, planned each time): one table, "
        "%s partitions | %.3f ms, %.3f ms |\n"
        "\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            schedules,
            total,
            machine_line(machine),
            fill_s,
            deleted,
            deleted / delete_s,
            delete_us,
            vacuum_us,
            total - deleted,
            convert_s,
            dropped,
            run.counts[PARTITIONED_OCCURRENCES],
            drop_s * 1000,
            drop_us,
            delete_us / drop_us,
            (delete_us + vacuum_us) / drop_us,
            count + 2,
            latest_one_table,
            latest_partitioned,
            final,
        )
    )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-prune.md"))
    append_results(results, "# Retention benchmark results\n", section)
    print(final)


if __name__ == "__main__":
    main()
