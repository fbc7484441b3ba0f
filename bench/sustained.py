#!/usr/bin/env python
"""A long, paced drain on a job table with a large history: what the claim costs as the
entries of claimed jobs pile up in the claim index between autovacuums.

Run from the repository root, against a PostgreSQL server with autovacuum on (the
server's default; the sandbox's server has it off, so point BENCH_DATABASE_URL at one)::

    python bench/sustained.py

It runs two drains at once, each in a process and on a database of its own
(``<name>_app`` and ``<name>_postgres`` for BENCH_DATABASE_URL's ``<name>``, default
``bench_sustained``): one with the job table's autovacuum settings as migration 0018
sets them, one with PostgreSQL's defaults (the settings RESET). Each stores
BENCH_FINISHED (1000000) finished jobs and BENCH_JOBS (300000) due ones, VACUUM
ANALYZEs, and then records and claims them CONCURRENCY (18) at a time through
``scheduler_app.db.postgresql.jobs.finish_and_claim`` (as bench/turn.py does), paced at
BENCH_RATE (1000) jobs/s. Every BENCH_WINDOW (30000) jobs it reports the turn's time
per job, the claim index's blocks read per turn, the autovacuums of the job table so
far and its dead rows; after the drain, how long one VACUUM of the job table takes with
that configuration's settings.

Environment: BENCH_FINISHED, BENCH_JOBS, BENCH_RATE, BENCH_WINDOW, BENCH_DATABASE_URL,
BENCH_RESULTS (default bench/results-worker.md), BENCH_REVISION. The last stdout line is
``app_blocks=<n> postgres_blocks=<n> app_turn_us=<n> postgres_turn_us=<n>``: the means
over the windows of the claim index's blocks per turn and the turn's time per job.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import statistics
import subprocess
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
    pg_setting,
    recreate_database,
    setup_django,
)
from turn import succeeded
from worker_scale import fill_history

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_sustained"
CONFIGURATIONS = ("app", "postgres")
LEASE = dt.timedelta(seconds=60)


def table_counters() -> tuple[int, int, int]:
    """Return (claim index blocks read so far, autovacuums of the job table, its dead rows)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes "
            "WHERE indexrelname = 'scheduler_job_claimable'"
        )
        (blocks,) = cursor.fetchone()
        cursor.execute(
            "SELECT autovacuum_count, n_dead_tup FROM pg_stat_user_tables "
            "WHERE relname = 'scheduler_app_job'"
        )
        vacuums, dead = cursor.fetchone()
    return blocks, vacuums, dead


def drain(configuration: str, url: str) -> None:
    """One drain (a child process): print a line per window, ``window <fields>``."""
    recreate_database(url)
    setup_django(url)
    migrate()
    from django.db import connection

    from scheduler_app import clock
    from scheduler_app.conf import app_settings
    from scheduler_app.db import postgresql as pg

    if configuration == "postgres":
        migration = importlib.import_module("scheduler_app.migrations.0018_job_table_autovacuum")
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE scheduler_app_job RESET (%s)" % ", ".join(migration.AUTOVACUUM)
            )
    jobs, rate = env_int("BENCH_JOBS", 300_000), env_int("BENCH_RATE", 1000)
    window = env_int("BENCH_WINDOW", 30_000)
    fill_history(env_int("BENCH_FINISHED", 1_000_000), jobs, due=-dt.timedelta(hours=1))
    arguments = {
        "worker": "bench",
        "queues": ["default"],
        "limit": app_settings.CONCURRENCY,
        "lease": LEASE,
    }
    rows = pg.claim_jobs(**arguments)
    done = turns = window_jobs = 0
    busy = 0.0
    start = time.perf_counter()
    blocks0, _, _ = table_counters()
    while rows:
        finishes = succeeded(rows, clock.now())
        began = time.perf_counter()
        _, rows = pg.finish_and_claim(finishes, **arguments)
        busy += time.perf_counter() - began
        done += len(finishes)
        window_jobs += len(finishes)
        turns += 1
        ahead = start + done / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        if done // window != (done - len(finishes)) // window or not rows:
            blocks, vacuums, dead = table_counters()
            print(
                "window %.0f %d %.0f %.0f %d %d"
                % (
                    time.perf_counter() - start,
                    done,
                    busy * 1e6 / window_jobs,
                    (blocks - blocks0) / turns,
                    vacuums,
                    dead,
                ),
                flush=True,
            )
            blocks0, busy, turns, window_jobs = blocks, 0.0, 0, 0
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM scheduler_app_job")  # with the table's own settings
    print("vacuum %.2f" % (time.perf_counter() - began), flush=True)


def database_url(url: str, configuration: str) -> str:
    base, _, name = url.rpartition("/")
    return "%s/%s_%s" % (base, name, configuration)


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    if sys.argv[1:2] == ["drain"]:
        drain(sys.argv[2], database_url(url, sys.argv[2]))
        return
    setup_django(url.rpartition("/")[0] + "/postgres")
    machine = machine_description(
        ("autovacuum", "autovacuum_naptime"), os.environ.get("BENCH_REVISION", "")
    )
    if pg_setting("autovacuum") != "on":
        print("warning: autovacuum is off on this server: both drains go unvacuumed", flush=True)
    children = {
        name: subprocess.Popen(
            [sys.executable, __file__, "drain", name], stdout=subprocess.PIPE, text=True
        )
        for name in CONFIGURATIONS
    }
    windows: dict[str, list[list[float]]] = {}
    vacuums: dict[str, str] = {}
    for name, child in children.items():
        out, _ = child.communicate()
        if child.returncode:
            raise SystemExit("the %s drain failed (exit %s)" % (name, child.returncode))
        windows[name] = [
            [float(x) for x in line.split()[1:]]
            for line in out.splitlines()
            if line.startswith("window ")
        ]
        vacuums[name] = next(
            (line.split()[1] for line in out.splitlines() if line.startswith("vacuum ")), "?"
        )
    table = "\n".join(
        "| %s | %.0f s, %d jobs | %.0f µs, %.0f blocks, %d vacuums, %d dead "
        "| %.0f µs, %.0f blocks, %d vacuums, %d dead |"
        % (n + 1, app[0], app[1], *app[2:], *other[2:])
        for n, (app, other) in enumerate(zip(windows["app"], windows["postgres"], strict=True))
    )
    summary = {
        "%s_%s" % (name, measure): statistics.mean(w[column] for w in windows[name])
        for measure, column in (("blocks", 3), ("turn_us", 2))
        for name in CONFIGURATIONS
    }
    final = " ".join("%s=%.0f" % item for item in summary.items())
    section = (
        "\n## %s — bench/sustained.py finished=%s jobs=%s rate=%s/s window=%s\n\n%s\n\n"
        "Per window: the turn's time per job, the claim index's blocks read per turn, the job "
        "table's autovacuums so far and its dead rows.\n\n"
        "| window | at | migration 0018's autovacuum settings | PostgreSQL's defaults |\n"
        "|---|---|---|---|\n%s\n| then | one VACUUM of the job table, its own settings "
        "| %s s | %s s |\n\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            env_int("BENCH_FINISHED", 1_000_000),
            env_int("BENCH_JOBS", 300_000),
            env_int("BENCH_RATE", 1000),
            env_int("BENCH_WINDOW", 30_000),
            machine_line(machine),
            table,
            vacuums["app"],
            vacuums["postgres"],
            final,
        )
    )
    results_path = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-worker.md"))
    append_results(results_path, "# Worker benchmark results\n", section)
    print(final)


if __name__ == "__main__":
    main()
