#!/usr/bin/env python
"""Many workers on one database (issue #34): does adding workers add throughput?

Run from the repository root, alone on the machine::

    python bench/worker_fleet.py
    BENCH_FLEET=2,4,8 BENCH_CONCURRENCY=4 python bench/worker_fleet.py

For each worker count of BENCH_FLEET (2,4,8), the drain of bench/worker.py: that many
``runworker`` processes at BENCH_CONCURRENCY (4: a low concurrency, so a few cores
stand in for many hosts, each with fewer slots) drain BENCH_JOBS (20000) ``tests.noop``
jobs scheduled in one transaction. Reported per count: the drain, the drain per worker,
the CPU per job (workers and their backends), how busy the machine was, and the
workers' transactions per job (a claim that finds nothing, or a wake-up that was not
needed, shows there). BENCH_DATABASE_URL names the database (dropped and made again;
default ``bench_worker_fleet``); BENCH_RESULTS the results file
(bench/results-worker.md).

BENCH_PGBOUNCER=1 adds a drain of the first count through a PgBouncer in transaction mode
(started with .ci/pgbouncer on port BENCH_PGBOUNCER_PORT, 6434; the package must be
installed), its workers LISTENing on a direct connection (LISTEN_DATABASE), next to the
same drain connected directly.

The last stdout line is ``drain_jobs_s_<n>=<x> ...`` for each count.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
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
from worker import bench_drain

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_worker_fleet"


def pgbouncer_drain(
    url: str, jobs: int, concurrency: int, batch: int, workers: int, direct_jobs_s: float
) -> str:
    """Drain through a PgBouncer in transaction mode; return the results' paragraph."""
    import subprocess
    import tempfile
    from urllib.parse import urlsplit

    from django.db import connection

    port = os.environ.get("BENCH_PGBOUNCER_PORT", "6434")
    run_dir = tempfile.mkdtemp(prefix="bench-pgbouncer-")
    script = str(REPO / ".ci" / "pgbouncer")
    started = subprocess.run(
        ["bash", script, "start", run_dir, port], capture_output=True, text=True, check=True
    )
    pooled_url = started.stdout.strip() + urlsplit(url).path
    worker_env = {
        "SCHEDULER_TEST_TRANSACTION_POOLING": "1",
        "SCHEDULER_TEST_DIRECT_DATABASE_URL": url,
        "SCHEDULER_TEST_LISTEN_DATABASE": "direct",
    }
    os.environ.update(worker_env)  # the workers inherit them
    try:
        drain = bench_drain(pooled_url, jobs, concurrency, batch, workers, None, history=0)
    finally:
        for name in worker_env:
            del os.environ[name]
        subprocess.run(["bash", script, "stop", run_dir], check=False)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM scheduler_app_job, scheduler_app_jobattempt")
    ratio = drain["jobs_s"] / direct_jobs_s
    print(
        "%s workers through PgBouncer (transaction mode): %.0f jobs/s, %.2f of direct, "
        "machine %.0f%% busy" % (workers, drain["jobs_s"], ratio, drain["machine_busy"] * 100),
        flush=True,
    )
    return (
        "\nThrough PgBouncer (transaction mode, LISTEN on a direct connection), %s workers: "
        "**%.0f jobs/s**, %.2f of the direct drain above (%.0f jobs/s); machine %.0f %% busy "
        "(PgBouncer's own CPU included there, not in the CPU per job).\n"
        % (workers, drain["jobs_s"], ratio, direct_jobs_s, drain["machine_busy"] * 100)
    )


def main() -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    jobs = env_int("BENCH_JOBS", 20000)
    concurrency = env_int("BENCH_CONCURRENCY", 4)
    batch = env_int("BENCH_BATCH", 100)
    fleet = [int(n) for n in os.environ.get("BENCH_FLEET", "2,4,8").split(",")]
    url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_URL
    results_path = Path(os.environ.get("BENCH_RESULTS") or REPO / "bench" / "results-worker.md")
    when = dt.datetime.now(dt.UTC)
    print(
        "bench/worker_fleet.py jobs=%s concurrency=%s batch=%s fleet=%s db=%s"
        % (jobs, concurrency, batch, fleet, url),
        flush=True,
    )
    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("synchronous_commit", "max_connections"))

    from django.db import connection

    rows = []
    for i, workers in enumerate(fleet):
        # The first drain seeds BENCH_JOBS rows of history; the next ones keep what is there.
        history = None if i == 0 else 0
        drain = bench_drain(url, jobs, concurrency, batch, workers, None, history=history)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM scheduler_app_job, scheduler_app_jobattempt")
        cpu_us = (drain["worker_cpu_s"] + drain["backend_cpu_s"]) / jobs * 1e6
        row = {
            "workers": workers,
            "jobs_s": drain["jobs_s"],
            "per_worker": drain["jobs_s"] / workers,
            "cpu_us": cpu_us,
            "busy": drain["machine_busy"] * 100,
            "statements_per_job": drain["statements"] / jobs,
        }
        rows.append(row)
        print(
            "%(workers)s workers: %(jobs_s).0f jobs/s, %(per_worker).0f per worker, "
            "%(cpu_us).0f us CPU per job, machine %(busy).0f%% busy, "
            "%(statements_per_job).3f worker transactions per job" % row,
            flush=True,
        )
    pooled = ""
    if os.environ.get("BENCH_PGBOUNCER"):
        pooled = pgbouncer_drain(url, jobs, concurrency, batch, fleet[0], rows[0]["jobs_s"])
    base = rows[0]["jobs_s"]
    table = "\n".join(
        "| %s | %.0f | %.0f | %.2fx | %.0f µs | %.0f %% | %.3f |"
        % (
            r["workers"],
            r["jobs_s"],
            r["per_worker"],
            r["jobs_s"] / base,
            r["cpu_us"],
            r["busy"],
            r["statements_per_job"],
        )
        for r in rows
    )
    section = (
        "\n## %s — bench/worker_fleet.py jobs=%s concurrency=%s batch=%s\n\n%s\n\n"
        "| workers | drain jobs/s | per worker | vs %s workers | CPU per job (workers + "
        "backends) | machine busy | worker transactions per job |\n"
        "|---|---|---|---|---|---|---|\n%s\n%s"
        % (
            when.strftime("%Y-%m-%d %H:%M UTC"),
            jobs,
            concurrency,
            batch,
            machine_line(machine),
            fleet[0],
            table,
            pooled,
        )
    )
    append_results(results_path, "# Worker benchmark results\n", section)
    print(" ".join("drain_jobs_s_%s=%.0f" % (r["workers"], r["jobs_s"]) for r in rows))


if __name__ == "__main__":
    main()
