#!/usr/bin/env python
"""Retention at full speed: a sustained drain with a short retention, pruned by deleting
rows (the job table as one table) and by dropping partitions (as migrate leaves a new install).

Run from the repository root, alone on the machine::

    python bench/retention.py

Each mode runs in turn on a database of its own (``<name>_delete``, ``<name>_partitions``
for BENCH_DATABASE_URL's ``<name>``, default ``bench_retention``). Jobs are scheduled due
at BENCH_RATE (5000) a second for BENCH_SECONDS (600) and drained as runworker's loop
does (``finish_and_claim``, CONCURRENCY at a time); every BENCH_PRUNE_INTERVAL (60) seconds
a second thread runs ``retention.prune(now)`` with a retention of BENCH_RETENTION_SECONDS
(60) for jobs and none for the other kinds, then VACUUMs the table the claim reads (the
whole job table, or the hot partition) and, with partitions, each history partition whose
interval has ended, once: the sandbox's PostgreSQL runs without autovacuum, and these
are the vacuums it would run (the partitions': after their inserts). The partitions are
of one minute, three made ahead: time scaled down from the defaults (day partitions, a
prune a day), one prune a partition interval.

Per minute: jobs drained, the turn's p99 (finish and claim, one round trip), the job
table's size with its indexes (all partitions), the hot partition's. Per mode: the
prune's CPU per job it removed (the pruner thread and its PostgreSQL backend), and the
vacuums' time. The last stdout line is ``<mode>_us_per_job=<n> ...``.

Environment: BENCH_RATE, BENCH_SECONDS, BENCH_RETENTION_SECONDS, BENCH_PRUNE_INTERVAL,
BENCH_MODES (``delete,partitions``), BENCH_DATABASE_URL, BENCH_RESULTS (default
bench/results-prune.md), BENCH_REVISION.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
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
from turn import succeeded

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_retention"
MODES = ("delete", "partitions")
LEASE = dt.timedelta(seconds=60)
INSERT_DUE = (
    "INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, "
    "status, scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, "
    "last_error, created_at) SELECT 'tests.noop', 'default', 0, 'null', 1, 'pending', now(), "
    "now(), 0, 3, '', 0, '', now() FROM generate_series(1, %s)"
)


def sizes() -> tuple[float, float]:
    """Return (MB of the job table with its indexes, all partitions; MB of the table the
    claim reads)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), "
            "pg_total_relation_size('scheduler_app_job')) "
            "FROM pg_partition_tree('scheduler_app_job')"
        )
        total = cursor.fetchone()[0]
        cursor.execute(
            "SELECT pg_total_relation_size(coalesce(to_regclass('scheduler_app_job_hot'), "
            "'scheduler_app_job'::regclass))"
        )
        hot = cursor.fetchone()[0]
    return float(total) / 2**20, float(hot) / 2**20


class Maintenance(threading.Thread):
    """Every ``interval`` seconds: prune as of now, then VACUUM the table the claim reads."""

    def __init__(self, interval: float, hot_table: str, partitioned: bool) -> None:
        super().__init__(name="maintenance", daemon=True)
        self.interval, self.hot_table, self.partitioned = interval, hot_table, partitioned
        self.vacuumed: set[str] = set()
        self.stopping = threading.Event()
        self.removed = 0
        self.prune_cpu = self.prune_wall = self.vacuum_wall = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connection

        from scheduler_app import clock, partitions
        from scheduler_app.retention import PARTITIONED_JOBS, prune

        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend = cursor.fetchone()[0]
            while not self.stopping.wait(self.interval):
                cpu, thread, wall = process_cpu(backend), time.thread_time(), time.perf_counter()
                run = prune(clock.now())
                self.prune_wall += time.perf_counter() - wall
                self.prune_cpu += process_cpu(backend) - cpu + time.thread_time() - thread
                self.removed += run.counts.get("jobs", 0) + run.counts.get(PARTITIONED_JOBS, 0)
                wall = time.perf_counter()
                tables = [self.hot_table]
                if self.partitioned:
                    tables += [
                        partition.name
                        for partition in partitions.history_partitions()
                        if partition.end <= clock.now() and partition.name not in self.vacuumed
                    ]
                    self.vacuumed.update(tables)
                with connection.cursor() as cursor:
                    for table in tables:
                        cursor.execute("VACUUM %s" % table)
                self.vacuum_wall += time.perf_counter() - wall
        except BaseException as exc:  # reported by the drain
            self.error = exc
        finally:
            connection.close()


def drain(mode: str, url: str) -> None:
    """One mode (a child process): print ``minute <json>`` lines, then ``mode <json>``."""
    recreate_database(url)
    retention_days = env_int("BENCH_RETENTION_SECONDS", 60) / 86400
    setup_django(url)
    from django.conf import settings
    from django.test import override_settings

    from scheduler_app.retention import SETTINGS

    override_settings(
        SCHEDULER_APP={
            **getattr(settings, "SCHEDULER_APP", {}),
            # Jobs only: each prune's fixed cost is then what pruning jobs costs.
            **dict.fromkeys(SETTINGS.values()),
            "RETENTION_JOBS_DAYS": retention_days,
            "PRUNE_MAX_ROWS": 100_000_000,
            # migrate partitions the new database's job table (migration 0033) or not.
            "PARTITIONED_HISTORY": mode == "partitions",
            "HISTORY_PARTITION_MINUTES": 1,
            "HISTORY_PARTITIONS_AHEAD": 3,
        }
    ).enable()
    migrate()
    from django.db import connection

    from scheduler_app import clock, partitions
    from scheduler_app.conf import app_settings
    from scheduler_app.db import postgresql as pg

    hot_table = "scheduler_app_job"
    if mode == "partitions":
        hot_table = partitions.HOT
    rate, seconds = env_int("BENCH_RATE", 5000), env_int("BENCH_SECONDS", 600)
    arguments = {
        "worker": "bench",
        "queues": ["default"],
        "limit": app_settings.CONCURRENCY,
        "lease": LEASE,
    }
    maintenance = Maintenance(
        env_int("BENCH_PRUNE_INTERVAL", 60), hot_table, partitioned=mode == "partitions"
    )
    maintenance.start()
    start = time.perf_counter()
    produced = done = 0
    turns: list[float] = []
    minute, minute_done = 1, 0
    rows: list[tuple] = []
    with connection.cursor() as cursor:
        while (elapsed := time.perf_counter() - start) < seconds:
            due = min(int(elapsed * rate), seconds * rate) - produced
            if due > 0:
                cursor.execute(INSERT_DUE, [due])
                produced += due
            finishes = succeeded(rows, clock.now())
            began = time.perf_counter()
            _, rows = pg.finish_and_claim(finishes, **arguments)
            turns.append(time.perf_counter() - began)
            done += len(finishes)
            if not rows and not finishes:
                time.sleep(0.005)
            if elapsed >= minute * 60:
                total, hot = sizes()
                turns.sort()
                print(
                    "minute "
                    + json.dumps(
                        {
                            "minute": minute,
                            "jobs": done - minute_done,
                            "turn_p99_ms": turns[int(len(turns) * 0.99)] * 1000,
                            "total_mb": total,
                            "hot_mb": hot,
                        }
                    ),
                    flush=True,
                )
                minute, minute_done, turns = minute + 1, done, []
                if maintenance.error is not None:
                    raise maintenance.error
    maintenance.stopping.set()
    maintenance.join()
    print(
        "mode "
        + json.dumps(
            {
                "removed": maintenance.removed,
                "prune_cpu_s": maintenance.prune_cpu,
                "prune_wall_s": maintenance.prune_wall,
                "vacuum_wall_s": maintenance.vacuum_wall,
                "produced": produced,
                "done": done,
            }
        ),
        flush=True,
    )


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    if sys.argv[1:2] == ["drain"]:
        drain(sys.argv[2], "%s_%s" % (url, sys.argv[2]))
        return
    setup_django(url.rpartition("/")[0] + "/postgres")
    machine = machine_description(
        ("autovacuum", "shared_buffers"), os.environ.get("BENCH_REVISION", "")
    )
    modes = os.environ.get("BENCH_MODES", ",".join(MODES)).split(",")
    minutes: dict[str, list[dict]] = {}
    totals: dict[str, dict] = {}
    for mode in modes:
        out = subprocess.run(
            [sys.executable, __file__, "drain", mode], stdout=subprocess.PIPE, text=True, check=True
        ).stdout
        minutes[mode] = [
            json.loads(line[7:]) for line in out.splitlines() if line.startswith("minute ")
        ]
        totals[mode] = next(
            json.loads(line[5:]) for line in out.splitlines() if line.startswith("mode ")
        )
        print(mode, totals[mode], flush=True)
    rows = []
    for mode in modes:
        for m in minutes[mode]:
            rows.append(
                "| %s | %d | %d | %.1f | %.0f | %.0f |"
                % (mode, m["minute"], m["jobs"], m["turn_p99_ms"], m["total_mb"], m["hot_mb"])
            )
    per_job = {
        mode: totals[mode]["prune_cpu_s"] * 1e6 / max(totals[mode]["removed"], 1) for mode in modes
    }
    summary = "\n".join(
        "| %s | %d | %.1f µs | %.1f s | %.1f s | %d of %d |"
        % (
            mode,
            totals[mode]["removed"],
            per_job[mode],
            totals[mode]["prune_wall_s"],
            totals[mode]["vacuum_wall_s"],
            totals[mode]["done"],
            totals[mode]["produced"],
        )
        for mode in modes
    )
    final = " ".join("%s_us_per_job=%.2f" % (mode, value) for mode, value in per_job.items())
    section = (
        "\n## %s — bench/retention.py rate=%s/s seconds=%s retention=%ss prune_interval=%ss\n\n"
        "%s\n\nPer minute: jobs drained, the turn's p99 (finish + claim, one round trip), "
        "the job table with its indexes (all partitions), the table the claim reads.\n\n"
        "| mode | minute | jobs | turn p99 ms | job table MB | hot MB |\n"
        "|---|---|---|---|---|---|\n"
        "%s\n\nPer mode: jobs retention removed, its CPU per job removed (pruner thread and "
        "backend), the prunes' and the vacuums' wall time, jobs drained of scheduled.\n\n"
        "| mode | removed | prune CPU per job | prune wall | vacuum wall | drained |\n"
        "|---|---|---|---|---|---|\n%s\n\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            env_int("BENCH_RATE", 5000),
            env_int("BENCH_SECONDS", 600),
            env_int("BENCH_RETENTION_SECONDS", 60),
            env_int("BENCH_PRUNE_INTERVAL", 60),
            machine_line(machine),
            "\n".join(rows),
            summary,
            final,
        )
    )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-prune.md"))
    append_results(results, "# Retention benchmark results\n", section)
    print(final)


if __name__ == "__main__":
    main()
