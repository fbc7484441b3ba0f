#!/usr/bin/env python
"""Cost of one alert evaluation with many finished jobs, on PostgreSQL.

Run from the repository root::

    python bench/alerts.py

It drops and re-creates its own database (``bench_alerts`` unless
BENCH_DATABASE_URL names another), migrates it, inserts BENCH_JOBS finished
jobs (default 1,000,000) spread over 50 tasks and the last 7 days (one in 20
failed, results {"processed": n}), 1,000 first-attempt rows per task for the
lateness rule, and 200 pending jobs, then registers targets on 20 of the tasks
(lateness, max runtime, expected_every, count_key with zero_runs_alert) and
times BENCH_RUNS evaluations. It prints the plan of each rule's main query.

A dated section is appended to bench/results-alerts.md; the last stdout line is
``evaluate_p50_ms=<n> evaluate_max_ms=<n> jobs=<n>``.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import time

import harness

JOBS = harness.env_int("BENCH_JOBS", 1_000_000)
RUNS = harness.env_int("BENCH_RUNS", 10)
TASKS = 50
URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench_alerts")
RESULTS = harness.REPO / "bench" / os.environ.get("BENCH_RESULTS", "results-alerts.md")

FILL = """
INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, status,
    scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, started_at,
    finished_at, last_error, result, created_at)
SELECT 'bench.task_' || (i %% {tasks}), 'default', 0, '{{}}', 1,
       CASE WHEN i %% 20 = 0 THEN 'failed' ELSE 'succeeded' END,
       t, t, 1, 3, '', 1, t + interval '1 second', t + interval '2 seconds', '',
       jsonb_build_object('processed', i %% 7), t
FROM (SELECT i, now() - (i * interval '7 days' / %(jobs)s) AS t
      FROM generate_series(1, %(jobs)s) AS i) AS s
"""
ATTEMPTS = """
INSERT INTO scheduler_app_jobattempt (job_id, attempt, task_name, worker_id, due_at, started_at,
    finished_at, outcome, error)
SELECT id, 1, task_name, '', scheduled_for, started_at, finished_at, status, ''
FROM scheduler_app_job WHERE started_at > now() - interval '1 day'
ORDER BY id DESC LIMIT %(attempts)s
"""
PENDING = """
INSERT INTO scheduler_app_job (task_name, queue, priority, payload, payload_version, status,
    scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token, last_error,
    created_at)
SELECT 'bench.task_' || (i %% {tasks}), 'default', 0, '{{}}', 1, 'pending',
       now() + i * interval '1 minute', now() + i * interval '1 minute', 0, 3, '', 0, '', now()
FROM generate_series(1, 200) AS i
"""


def fill() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        started = time.monotonic()
        cursor.execute(FILL.format(tasks=TASKS), {"jobs": JOBS})
        cursor.execute(ATTEMPTS, {"attempts": TASKS * 1000})
        cursor.execute(PENDING.format(tasks=TASKS), {})
        cursor.execute("ANALYZE")
        print("filled %s jobs in %.1fs" % (JOBS, time.monotonic() - started))


def register_targets() -> None:
    from scheduler_app.registry import task

    for n in range(20):
        task(
            name="bench.task_%s" % n,
            lateness_target=60,
            max_runtime=600,
            expected_every=3600,
            count_key="processed",
            zero_runs_alert=3,
        )(lambda ctx: None)


def plans() -> list[str]:
    from django.db.models import Count, Q

    from scheduler_app.models import Job

    now = harness_now()
    queries = {
        "failing": Job.objects.filter(
            status__in=["succeeded", "failed"], finished_at__gte=now - dt.timedelta(hours=1)
        )
        .values("task_name")
        .annotate(n=Count("id"), failed=Count("id", filter=Q(status="failed"))),
        "suspicious_success": Job.objects.filter(task_name="bench.task_1", status="succeeded")
        .order_by("-finished_at")
        .values_list("result")[:3],
        "absent": Job.objects.filter(
            task_name="bench.task_1",
            status="succeeded",
            finished_at__gte=now - dt.timedelta(hours=1),
        ),
        "overdue": Job.objects.due(now - dt.timedelta(minutes=10))
        .values("task_name")
        .annotate(n=Count("id")),
    }
    lines = []
    for name, queryset in queries.items():
        lines.append("%s:\n%s" % (name, queryset.explain(analyze=True)))
    return lines


def harness_now() -> dt.datetime:
    from scheduler_app.db import database_now

    return database_now()


def main() -> None:
    harness.recreate_database(URL)
    harness.setup_django(URL)
    harness.migrate()
    fill()
    register_targets()
    from scheduler_app.alerts.evaluator import evaluate

    timings = []
    for _ in range(RUNS):
        started = time.monotonic()
        evaluation = evaluate()
        timings.append((time.monotonic() - started) * 1000)
    opened = len(evaluation.opened) + len(evaluation.still_open)
    explained = plans()
    for text in explained:
        print(text)
    machine = harness.machine_description(("shared_buffers", "work_mem"))
    p50, worst = statistics.median(timings), max(timings)
    section = (
        "\n## %s\n\n%s\n\n%s finished jobs over %s tasks (20 with targets), %s runs: "
        "evaluate p50 %.0f ms, max %.0f ms; %s alerts open.\n\n```\n%s\n```\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            harness.machine_line(machine),
            JOBS,
            TASKS,
            RUNS,
            p50,
            worst,
            opened,
            "\n".join(explained),
        )
    )
    harness.append_results(RESULTS, "# Alert evaluation cost (bench/alerts.py)\n", section)
    print("evaluate_p50_ms=%.0f evaluate_max_ms=%.0f jobs=%s" % (p50, worst, JOBS))


if __name__ == "__main__":
    main()
