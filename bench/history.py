#!/usr/bin/env python
"""The reads that run again and again, on a database with a long history (issue #14:
cost stays flat as history grows).

Run from the repository root (not in CI: it writes 1.3 million rows)::

    python bench/history.py

It drops and re-creates its own PostgreSQL database (``bench_history`` unless
BENCH_DATABASE_URL names another), migrates it, and stores a schedule with BENCH_RUNS
(100000) one-minute runs behind it, each with its occurrence and its finished job, as
BENCH_RUNS minutes of history leave them; then, newer, BENCH_FINISHED (1000000)
finished jobs of other work and BENCH_PENDING (100000) pending jobs due in a day. It
times each read below BENCH_SAMPLES (21) times, in a transaction rolled back after
each, and reports the median and the slowest, and how many queries each sent:

- ``tick, fixed-rate occurrence due``: a scheduler tick that enqueues the schedule's
  due occurrence; its overlap check finds the previous run finished;
- ``tick, fixed-delay run unfinished``: a tick while the (fixed-delay) schedule's
  latest run is running: it waits for the run to end, and every worker asks again
  every SCHEDULER_INTERVAL;
- ``tick, fixed-delay run ended``: the tick after that run ended, which finds the
  latest end and sets the next run;
- ``admin job list``: an operator opens the jobs' changelist (a superuser, through
  django.test.Client);
- ``admin recipient search, exact address``: the recipients' changelist searched for
  one address, among the BENCH_RECIPIENTS (1000000) sent recipients of a completed
  batch (stored with the jobs);
- ``admin schedule page``: the change page of the schedule with BENCH_RUNS runs;
- ``API jobs, rare task``: staff's first page of GET jobs/?task= a task with
  BENCH_RARE (20) jobs, which finished a month ago;
- ``API jobs, old created range``: staff's first page of the jobs created in one day
  two months ago (a day of the schedule's runs);
- ``API jobs, user's status``: a user's first page of GET jobs/?status=failed; the
  user owns BENCH_OWNED (1000) succeeded jobs and BENCH_RARE failed ones.

Each API read is a request through DRF's APIClient with a real token.

Environment: BENCH_FINISHED, BENCH_PENDING, BENCH_RUNS, BENCH_RECIPIENTS, BENCH_RARE,
BENCH_OWNED, BENCH_SAMPLES, BENCH_DATABASE_URL, BENCH_RESULTS (default
bench/results-history.md), BENCH_REVISION.
The last stdout line names each read's median in ms (``tick_unfinished_ms=<n> ...``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from feedback import store_sent_batch
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
from worker_scale import fill_history

if TYPE_CHECKING:
    from django.test import Client

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_history"
SCHEDULE = "bench-minutely"
RARE_TASK = "tests.rare"
STAFF = "bench-staff"
USER = "bench-user"


def store_schedule_runs(runs: int) -> None:
    """A fixed-delay one-minute schedule with ``runs`` finished runs, the last one
    ending a minute ago, each with its occurrence; its cursor waits for a run to end."""
    from django.db import connection

    from scheduler_app.models import Job, Schedule, ScheduleOccurrence
    from scheduler_app.models.jobs import OCCURRENCE_KEY_PREFIX

    schedule = Schedule.objects.create(
        name=SCHEDULE,
        task_name="tests.noop",
        kind=Schedule.Kind.FIXED_DELAY,
        interval=dt.timedelta(minutes=1),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH runs AS ("
            " INSERT INTO %s (task_name, queue, priority, payload, payload_version, status,"
            " scheduled_for, run_at, attempts, max_attempts, worker_id, lease_token,"
            " started_at, finished_at, last_error, created_at, unique_key)"
            " SELECT 'tests.noop', 'default', 0, 'null', 1, 'succeeded', at, at, 1, 3, 'h', 1,"
            " at, at + interval '1 second', '', at, %%s || %%s || ':' || at"
            " FROM (SELECT now() - g * interval '1 minute' AS at"
            " FROM generate_series(1, %%s) AS g) AS times"
            " RETURNING id, scheduled_for)"
            " INSERT INTO %s (schedule_id, occurrence_at, outcome, job_id, detail, created_at)"
            " SELECT %%s, scheduled_for, 'enqueued', id, '', scheduled_for FROM runs"
            % (Job._meta.db_table, ScheduleOccurrence._meta.db_table),
            [OCCURRENCE_KEY_PREFIX, SCHEDULE, runs, schedule.pk],
        )
        cursor.execute("VACUUM ANALYZE %s" % ScheduleOccurrence._meta.db_table)


def prepare(kind: str, latest: str) -> None:
    """Make the schedule ``kind``, its latest run ``latest`` (running, or succeeded just
    now) and its cursor what a tick then finds: empty for a fixed-delay schedule (it
    waits for the run to end), an occurrence due now for a fixed-rate one."""
    from scheduler_app import clock
    from scheduler_app.models import Job, Schedule

    now = clock.now()
    fixed_delay = kind == Schedule.Kind.FIXED_DELAY
    Schedule.objects.filter(name=SCHEDULE).update(
        kind=kind, next_run_at=None if fixed_delay else now
    )
    run = Job.objects.filter(schedule_occurrences__schedule__name=SCHEDULE).latest("pk")
    running = latest == Job.Status.RUNNING
    Job.objects.filter(pk=run.pk).update(status=latest, finished_at=None if running else now)


def store_api_users(rare: int, owned: int) -> None:
    """A staff user with scheduler_app.change_job and a user, each with a token; ``rare``
    jobs of RARE_TASK that finished a month ago; the user's ``owned`` succeeded jobs a
    week ago and ``rare`` failed ones a month ago; analyse."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db import connection
    from rest_framework.authtoken.models import Token

    staff = get_user_model().objects.create_user(STAFF, is_staff=True)
    staff.user_permissions.add(
        Permission.objects.get(content_type__app_label="scheduler_app", codename="change_job")
    )
    user = get_user_model().objects.create_user(USER)
    Token.objects.create(user=staff)
    Token.objects.create(user=user)
    with connection.cursor() as cursor:
        for task, status, owner, count, age in (
            (RARE_TASK, "succeeded", None, rare, "30 days"),
            ("tests.noop", "failed", user.pk, rare, "30 days"),
            ("tests.noop", "succeeded", user.pk, owned, "7 days"),
        ):
            cursor.execute(
                "INSERT INTO scheduler_app_job (task_name, queue, priority, payload,"
                " payload_version, status, scheduled_for, run_at, attempts, max_attempts,"
                " worker_id, lease_token, started_at, finished_at, last_error, created_at,"
                " owner_id)"
                " SELECT %s, 'default', 0, 'null', 1, %s, at, at, 1, 3, 'history', 1, at, at,"
                " '', at, %s FROM (SELECT now() - %s::interval AS at"
                " FROM generate_series(1, %s)) AS times",
                [task, status, owner, age, count],
            )
        cursor.execute("ANALYZE scheduler_app_job")


def api_jobs(username: str, query: str) -> None:
    """GET jobs/?``query`` as ``username`` (with their token); fail unless it is a 200."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token %s" % Token.objects.get(user__username=username))
    response = client.get("/api/jobs/?" + query)
    assert response.status_code == 200, response.content


def old_day() -> str:
    """Return the query of the jobs created in one day two months ago."""
    from scheduler_app import clock

    start = (clock.now() - dt.timedelta(days=60)).replace(microsecond=0, tzinfo=None)
    end = start + dt.timedelta(days=1)
    return "created_after=%sZ&created_before=%sZ" % (start.isoformat(), end.isoformat())


def noop() -> None:
    """Set nothing up: store_api_users() did."""


def timed(read: Callable[[], object], samples: int) -> dict:
    """Run ``read`` ``samples`` times, each in a transaction rolled back; return the median
    and slowest ms, and the queries one run sent."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    times = []
    for _ in range(samples):
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            read()
            times.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    return {"median": statistics.median(times), "max": max(times), "queries": len(queries)}


def tick() -> None:
    from scheduler_app.schedules.enqueuer import enqueue_due_occurrences

    enqueue_due_occurrences()


@functools.cache
def operator() -> Client:
    """Return a django.test.Client logged in as a superuser, created on the first call
    (an admin read's preparation: outside the transactions the timing rolls back)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("bench", "bench@example.com"))
    return client


def admin_page(path: str, query: dict[str, str] | None = None) -> None:
    """GET the admin page ``path`` as the operator; fail unless it answers 200."""
    response = operator().get(path, query)
    if response.status_code != 200:
        raise SystemExit("GET %s answered %s" % (path, response.status_code))


def schedule_page() -> None:
    from scheduler_app.models import Schedule

    pk = Schedule.objects.get(name=SCHEDULE).pk
    admin_page("/admin/scheduler_app/schedule/%s/change/" % pk)


@dataclasses.dataclass(frozen=True)
class Read:
    """One read to time: ``prepare()`` sets the tables up for it (once), ``read()`` is timed."""

    key: str
    label: str
    prepare: Callable[[], object]
    read: Callable[[], object]


READS = [
    Read(
        "tick_due",
        "tick, fixed-rate occurrence due",
        functools.partial(prepare, "fixed_rate", "succeeded"),
        tick,
    ),
    Read(
        "tick_unfinished",
        "tick, fixed-delay run unfinished",
        functools.partial(prepare, "fixed_delay", "running"),
        tick,
    ),
    Read(
        "tick_ended",
        "tick, fixed-delay run ended",
        functools.partial(prepare, "fixed_delay", "succeeded"),
        tick,
    ),
    Read(
        "admin_jobs",
        "admin job list",
        operator,
        functools.partial(admin_page, "/admin/scheduler_app/job/"),
    ),
    Read(
        "admin_recipient_address",
        "admin recipient search, exact address",
        operator,
        # store_sent_batch's addresses are customer<n>@example.com, n from 1.
        functools.partial(
            admin_page, "/admin/scheduler_app/recipient/", {"q": "customer4321@example.com"}
        ),
    ),
    Read("admin_schedule", "admin schedule page", operator, schedule_page),
    Read(
        "api_rare_task", "API jobs, rare task", noop, lambda: api_jobs(STAFF, "task=" + RARE_TASK)
    ),
    Read(
        "api_old_created", "API jobs, old created range", noop, lambda: api_jobs(STAFF, old_day())
    ),
    Read(
        "api_user_status", "API jobs, user's status", noop, lambda: api_jobs(USER, "status=failed")
    ),
]


def main() -> None:
    finished = env_int("BENCH_FINISHED", 1_000_000)
    pending = env_int("BENCH_PENDING", 100_000)
    runs = env_int("BENCH_RUNS", 100_000)
    recipients = env_int("BENCH_RECIPIENTS", 1_000_000)
    samples = env_int("BENCH_SAMPLES", 21)
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("shared_buffers",), os.environ.get("BENCH_REVISION", ""))
    started = time.perf_counter()
    store_schedule_runs(runs)
    fill_history(finished, pending)
    store_sent_batch(recipients)
    store_api_users(env_int("BENCH_RARE", 20), env_int("BENCH_OWNED", 1000))
    stored_s = time.perf_counter() - started

    results = {}
    for read in READS:
        read.prepare()
        results[read.key] = (read.label, timed(read.read, samples))

    rows = "".join(
        "| %s | %.2f ms | %.2f ms | %d |\n" % (label, r["median"], r["max"], r["queries"])
        for label, r in results.values()
    )
    final = " ".join("%s_ms=%.2f" % (key, r["median"]) for key, (_, r) in results.items())
    section = (
        "\n## %s — bench/history.py finished=%s pending=%s runs=%s recipients=%s samples=%s\n\n"
        "%s\n\n"
        "Storing the history (INSERT ... SELECT, VACUUM ANALYZE): %.1f s.\n\n"
        "| read | median | slowest | queries |\n|---|---|---|---|\n%s\n"
        "Final line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            finished,
            pending,
            runs,
            recipients,
            samples,
            machine_line(machine),
            stored_s,
            rows,
            final,
        )
    )
    path = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-history.md"))
    append_results(
        path,
        "# bench/history.py results\n\nThe reads that run again and again, on a long "
        "history. Commands and what each read is: the docstring of bench/history.py.\n",
        section,
    )
    print(final)


if __name__ == "__main__":
    main()
