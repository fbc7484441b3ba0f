#!/usr/bin/env python
"""Converting an existing install to partitioned history: how long ``scheduler_partition``
takes on a job table with a large history, and how fast ``--move-history`` moves it,
while a claimer keeps claiming.

Run from the repository root, alone on the machine::

    python bench/partition_convert.py

On a database of its own (BENCH_DATABASE_URL, default ``bench_partition_convert``) it
stores BENCH_FINISHED (1000000) jobs that finished in the last day and BENCH_PENDING
(100000) due ones, VACUUM ANALYZEs, then times ``partitions.convert()`` (the CHECK's
validation reads the table; the swap reads nothing) and ``partitions.move_history()``
(PRUNE_BATCH_SIZE jobs a transaction, into one-day partitions), while a thread claims and
finishes CONCURRENCY jobs at a time, recording each turn's time. It then VACUUM ANALYZEs the
job table (autovacuum's work, long before a partition expires) and, for comparison,
deletes BENCH_COMPARE (100000) of the moved jobs with the prune's statement, batch by batch,
and prunes once with the oldest partition past the cutoff (``retention.prune()``: the
count for its audit, what the alert rules remember, the drop), taking both their CPU time
(this process and its PostgreSQL backend) per job. The last stdout line is
``convert_s=<n> move_jobs_s=<n> delete_jobs_s=<n> delete_us_per_job=<n>
vacuum_us_per_job=<n> drop_us_per_job=<n>`` (the VACUUM that clears the DELETE's dead rows).

Environment: BENCH_FINISHED, BENCH_PENDING, BENCH_COMPARE, BENCH_DATABASE_URL,
BENCH_RESULTS (default bench/results-prune.md), BENCH_REVISION.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness import (
    REPO,
    append_results,
    env_int,
    machine_description,
    machine_line,
    migrate,
    process_cpu,
    recreate_database,
    setup_django,
)
from turn import succeeded
from worker_scale import fill_history

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_partition_convert"
LEASE = dt.timedelta(seconds=60)


class Claimer(threading.Thread):
    """Claim and finish jobs as runworker's loop does until stopped; keep each turn's time."""

    def __init__(self) -> None:
        super().__init__(name="claimer", daemon=True)
        self.stopping = threading.Event()
        self.turns: list[float] = []
        self.jobs = 0

    def run(self) -> None:
        from django.db import connection

        from scheduler_app import clock
        from scheduler_app.conf import app_settings
        from scheduler_app.db import postgresql as pg

        arguments = {
            "worker": "bench",
            "queues": ["default"],
            "limit": app_settings.CONCURRENCY,
            "lease": LEASE,
        }
        rows: list[tuple] = []
        try:
            while not self.stopping.is_set():
                finishes = succeeded(rows, clock.now())
                began = time.perf_counter()
                _, rows = pg.finish_and_claim(finishes, **arguments)
                self.turns.append(time.perf_counter() - began)
                self.jobs += len(finishes)
                time.sleep(0.005)  # a paced claimer: its latency is what is measured
        finally:
            connection.close()

    def p99_ms(self, since: int = 0) -> float:
        turns = sorted(self.turns[since:])
        return turns[int(len(turns) * 0.99)] * 1000 if turns else 0.0


def cpu_meter() -> Callable[[], float]:
    """Start measuring; return a function that gives the CPU seconds since, of this thread
    and of its connection's PostgreSQL backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    start = process_cpu(backend) + time.thread_time()
    return lambda: process_cpu(backend) + time.thread_time() - start


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    # The job table of an install that holds jobs, which the bench converts: migrate
    # leaves it one table (tests/settings.py).
    os.environ["SCHEDULER_TEST_PLAIN_JOB_TABLE"] = "1"
    setup_django(url)
    migrate()
    from django.db import connection

    from scheduler_app import partitions
    from scheduler_app.conf import app_settings
    from scheduler_app.db.postgresql import prune_finished_jobs
    from scheduler_app.retention import PARTITIONED_JOBS, prune

    machine = machine_description(
        ("autovacuum", "shared_buffers"), os.environ.get("BENCH_REVISION", "")
    )
    finished = env_int("BENCH_FINISHED", 1_000_000)
    began = time.perf_counter()
    fill_history(finished, env_int("BENCH_PENDING", 100_000), due=-dt.timedelta(minutes=1))
    fill_s = time.perf_counter() - began

    claimer = Claimer()
    claimer.start()
    time.sleep(10)
    baseline = claimer.p99_ms()
    mark = len(claimer.turns)
    began = time.perf_counter()
    partitions.convert()
    convert_s = time.perf_counter() - began
    during_convert = claimer.p99_ms(mark)
    mark = len(claimer.turns)
    began = time.perf_counter()
    moved = sum(partitions.move_history(None, batch_size=1000))
    move_s = time.perf_counter() - began
    during_move = claimer.p99_ms(mark)

    # What autovacuum does to a partition (by its inserts) long before the partition expires,
    # and to a table that keeps its history: both measures below read vacuumed rows.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE %s" % partitions.JOB)
    compare = env_int("BENCH_COMPARE", 100_000)
    target = max(partitions.history_partitions(), key=lambda partition: partition.rows()).name
    cpu = cpu_meter()
    deleted, began = 0, time.perf_counter()
    future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    while deleted < compare:
        removed = prune_finished_jobs(
            cutoff=future, limit=min(1000, compare - deleted), table=target
        )
        if not removed:
            break
        deleted += removed
    delete_s = time.perf_counter() - began
    delete_cpu = cpu()
    # The DELETE leaves dead rows and index entries that a VACUUM must clear (autovacuum,
    # beside the claim loop); a dropped partition leaves none.
    cpu = cpu_meter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM %s" % target)
    vacuum_cpu = cpu()
    claimer.stopping.set()
    claimer.join()

    # One prune with the oldest partition that holds jobs past the jobs' cutoff.
    oldest = next(p for p in partitions.history_partitions() if p.rows())
    cpu = cpu_meter()
    began = time.perf_counter()
    run = prune(oldest.end + dt.timedelta(days=app_settings.RETENTION_JOBS_DAYS))
    drop_s, drop_cpu = time.perf_counter() - began, cpu()
    dropped = run.counts[PARTITIONED_JOBS]

    delete_us, vacuum_us = delete_cpu * 1e6 / deleted, vacuum_cpu * 1e6 / deleted
    drop_us = drop_cpu * 1e6 / dropped
    final = (
        "convert_s=%.2f move_jobs_s=%.0f delete_jobs_s=%.0f delete_us_per_job=%.2f "
        "vacuum_us_per_job=%.2f drop_us_per_job=%.3f"
        % (convert_s, moved / move_s, deleted / delete_s, delete_us, vacuum_us, drop_us)
    )
    section = (
        "\n## %s — bench/partition_convert.py finished=%s\n\n%s\n\n"
        "| measure | result |\n|---|---|\n"
        "| fill (SQL, then VACUUM ANALYZE) | %.1f s |\n"
        "| `convert()` (CHECK validated, then the swap) | **%.2f s** |\n"
        "| `move_history()`: %s finished jobs into day partitions, 1000 a transaction "
        "| **%.0f jobs/s** (%.1f s) |\n"
        "| for comparison: the prune's DELETE, %s of those jobs, 1000 a statement | %.0f jobs/s "
        "(CPU %.2f µs a job, and %.2f µs a job for the VACUUM of its dead rows) |\n"
        "| a prune that drops a partition of %s jobs (audit count, alert memory, drop): wall, CPU "
        "| %.0f ms, **%.3f µs a job** (%.0fx less than the DELETE, %.0fx with its VACUUM) |\n"
        "| claimer's turn p99 (finish + claim, paced every 5 ms): before / during convert "
        "/ during the move | %.1f / %.1f / %.1f ms |\n"
        "\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            finished,
            machine_line(machine),
            fill_s,
            convert_s,
            moved,
            moved / move_s,
            move_s,
            deleted,
            deleted / delete_s,
            delete_us,
            vacuum_us,
            dropped,
            drop_s * 1000,
            drop_us,
            delete_us / drop_us,
            (delete_us + vacuum_us) / drop_us,
            baseline,
            during_convert,
            during_move,
            final,
        )
    )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-prune.md"))
    append_results(results, "# Retention benchmark results\n", section)
    print(final)


if __name__ == "__main__":
    main()
