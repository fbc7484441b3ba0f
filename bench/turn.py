#!/usr/bin/env python
"""The claim loop's round trip in process: what one turn of record-and-claim costs per job.

Run from the repository root::

    python bench/turn.py

It drops and re-creates its own PostgreSQL database (``bench_turn`` unless
BENCH_DATABASE_URL names another), migrates it, and then, BENCH_ROUNDS (3) times:
schedules BENCH_JOBS (30000) ``tests.noop`` jobs, analyses the table, and has one
thread of this process claim them BENCH_BATCH at a time (the app's CONCURRENCY, 18)
and record each batch as succeeded with the next claim, through
``scheduler_app.db.postgresql.jobs.finish_and_claim``, as the worker's loop does, until
none is left. No executor threads, no handlers: only the statements, psycopg and
Django. Per job it reports the wall time, the thread's CPU and its backend's CPU; and,
from a libpq trace of one turn, how many times the client waited for the server.

Compare two revisions by running this script from each (an export or a git worktree,
with PYTHONPATH pointing at it): the figures swing with the machine, less so when the
runs alternate.

Environment: BENCH_JOBS, BENCH_BATCH, BENCH_ROUNDS, BENCH_DATABASE_URL, BENCH_RESULTS
(default bench/results-worker.md), BENCH_REVISION (the revision to name). The last
stdout line is ``turn_us_per_job=<median> client_us=<median> backend_us=<median>
waits_per_turn=<n>``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import statistics
import tempfile
import time
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

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_turn"
LEASE = dt.timedelta(seconds=30)


def claim_arguments(batch: int) -> dict:
    """The keyword arguments, but ``now``, of this benchmark's claims of ``batch`` jobs."""
    return {"worker": "bench", "queues": ["default"], "limit": batch, "lease": LEASE}


def succeeded(rows: list[tuple], now: dt.datetime) -> list[tuple]:
    """The finish rows of claimed ``rows`` that all succeeded at ``now``."""
    from scheduler_app.worker.execution import ClaimedJob, Finish

    return [
        Finish(
            job=ClaimedJob.from_row(row),
            status="succeeded",
            outcome="succeeded",
            finished_at=now,
        ).as_row()
        for row in rows
    ]


def run_round(jobs: int, batch: int) -> dict[str, float]:
    """Schedule ``jobs`` no-op jobs, then record and claim them ``batch`` at a time."""
    from django.db import connection

    from scheduler_app import clock, schedule_many
    from scheduler_app.db.postgresql import jobs as pg

    for start in range(0, jobs, 5000):
        schedule_many("tests.noop", [None] * min(5000, jobs - start))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % pg.JOB)
    arguments = claim_arguments(batch)
    rows = pg.claim_jobs(**arguments)
    backend = connection.connection.info.backend_pid
    done = 0
    wall, cpu, backend_cpu = time.perf_counter(), time.thread_time(), process_cpu(backend)
    while rows:
        now = clock.now()
        finishes = succeeded(rows, now)
        done += len(finishes)
        _, rows = pg.finish_and_claim(finishes, **arguments)
    return {
        "jobs": done,
        "wall_us": (time.perf_counter() - wall) * 1e6 / done,
        "client_us": (time.thread_time() - cpu) * 1e6 / done,
        "backend_us": (process_cpu(backend) - backend_cpu) * 1e6 / done,
    }


def waits_per_turn(batch: int) -> int:
    """Trace one turn's protocol messages; return how often the client waited for the
    server (a message of ours followed by one of the server's)."""
    from django.db import connection
    from psycopg import pq

    from scheduler_app import clock, schedule_many
    from scheduler_app.db.postgresql import jobs as pg

    schedule_many("tests.noop", [None] * (2 * batch))
    arguments = claim_arguments(batch)
    now = clock.now()
    finishes = succeeded(pg.claim_jobs(**arguments), now)
    raw = connection.connection
    with tempfile.TemporaryFile("w+") as trace:
        raw.pgconn.trace(trace.fileno())
        raw.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            pg.finish_and_claim(finishes, **arguments)
        finally:
            raw.pgconn.untrace()
        trace.seek(0)
        senders = [line[0] for line in trace if line[:2] in ("F\t", "B\t")]
    return sum(1 for pair in itertools.pairwise(senders) if pair == ("F", "B"))


def main() -> None:
    jobs = env_int("BENCH_JOBS", 30000)
    rounds = env_int("BENCH_ROUNDS", 3)
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    setup_django(url)
    migrate()
    from scheduler_app.conf import app_settings

    batch = env_int("BENCH_BATCH", app_settings.CONCURRENCY)
    machine = machine_description(("synchronous_commit",), os.environ.get("BENCH_REVISION", ""))
    results = [run_round(jobs, batch) for _ in range(rounds)]
    waits = waits_per_turn(batch)
    median = {k: statistics.median(r[k] for r in results) for k in results[0]}
    rows = "\n".join(
        "| %d | %d | %.1f | %.1f | %.1f |"
        % (n, r["jobs"], r["wall_us"], r["client_us"], r["backend_us"])
        for n, r in enumerate(results, 1)
    )
    section = (
        "\n## %s — bench/turn.py jobs=%s batch=%s rounds=%s\n\n%s\n\n"
        "| round | jobs | wall µs/job | thread CPU µs/job | backend CPU µs/job |\n"
        "|---|---|---|---|---|\n%s\n\n"
        "The client waited for the server %s time(s) in one traced turn.\n\n"
        "Final line: `turn_us_per_job=%.1f client_us=%.1f backend_us=%.1f "
        "waits_per_turn=%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            jobs,
            batch,
            rounds,
            machine_line(machine),
            rows,
            waits,
            median["wall_us"],
            median["client_us"],
            median["backend_us"],
            waits,
        )
    )
    results_path = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-worker.md"))
    append_results(results_path, "# Worker benchmark results\n", section)
    print(
        "turn_us_per_job=%.1f client_us=%.1f backend_us=%.1f waits_per_turn=%s"
        % (median["wall_us"], median["client_us"], median["backend_us"], waits)
    )


if __name__ == "__main__":
    main()
