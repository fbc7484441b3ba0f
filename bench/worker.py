#!/usr/bin/env python
"""Worker benchmarks: drain throughput, NOTIFY pickup latency, and the raw SKIP LOCKED limit.

Run from the repository root::

    python bench/worker.py

It drops and re-creates its own PostgreSQL database (``bench_worker`` unless
BENCH_DATABASE_URL names another), migrates it, and measures:

(a) drain: the job table gets BENCH_JOBS finished jobs of history (vacuumed,
    analysed); BENCH_WORKERS (2) ``runworker`` subprocesses are started on an
    empty queue and waited for (their "worker started" log line, and their
    LISTEN connection in pg_stat_activity). Then BENCH_JOBS ``tests.noop``
    jobs are scheduled with schedule_many() in one transaction; its commit
    is t0 (the NOTIFY wakes the workers at commit). The figure is
    BENCH_JOBS / (max(finished_at) - t0). Then CLAIM and FINISH are
    EXPLAIN ANALYZEd at that backlog (rolled back).
(b) pickup: one idle worker with a 30 s poll interval (so only NOTIFY can
    wake it); 200 jobs scheduled one every 50 ms, each in its own
    transaction. Latency = the row's started_at - the moment commit returned.
(c) raw: bare psycopg, no Django: 2 processes claim 100 rows at a time from
    a bare ``raw_jobs`` table with UPDATE ... FOR UPDATE SKIP LOCKED and mark
    them done, until nothing is left; three rounds, the median counts.

Environment: BENCH_JOBS (20000), BENCH_CONCURRENCY and BENCH_BATCH (the app's
defaults, CONCURRENCY and CLAIM_BATCH_SIZE in scheduler_app.conf),
BENCH_WORKERS (2), BENCH_DATABASE_URL, BENCH_PROFILE (a directory: record
the drain workers with py-spy and print the hot spots; perturbs the figures),
BENCH_RESULTS (results file, default bench/results-worker.md), BENCH_REVISION
(the revision to name, when running from an export of a commit).

A dated section is appended to the results file; the last stdout line is
``drain_jobs_s=<n> raw_jobs_s=<n> ratio=<x> pickup_p50_ms=<n> pickup_p99_ms=<n>``.
"""

from __future__ import annotations

import collections
import datetime as dt
import inspect
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

from harness import (
    PROFILED_NOTE,
    REPO,
    Profiler,
    append_results,
    collapsed_stacks,
    env_int,
    frame_name,
    machine_cpu,
    machine_description,
    machine_line,
    migrate,
    process_cpu,
    recreate_database,
    setup_django,
    transactions,
    wait_ready,
)
from harness import WorkerProcess as BaseWorkerProcess

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_worker"

PICKUP_JOBS = 200
PICKUP_INTERVAL = 0.050
RAW_BATCH = 100
RAW_PROCESSES = 2
RAW_ROUNDS = 3
POLL = 0.020


# -- runworker subprocesses ------------------------------------------------------


#: What a healthy worker logs at INFO; anything else during the drain is reported.
EXPECTED_LOG_LINES = ("worker started", "worker summary", "worker stopped", "stopping:")


class WorkerProcess(BaseWorkerProcess):
    """A ``manage.py runworker`` subprocess whose merged stdout/stderr a thread reads."""

    def __init__(self, url: str, *args: str) -> None:
        super().__init__(
            [sys.executable, "-m", "django", "runworker", "--settings=tests.settings", *args],
            {"DATABASE_URL": url},
            keep_lines=200,
        )


# -- CPU accounting ----------------------------------------------------------------


def backend_pids() -> list[int]:
    """Return the pids of the other PostgreSQL backends on this database (the workers')."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in cursor.fetchall()]


class CpuMeter:
    """CPU used by the worker processes and their PostgreSQL backends between start() and stop()."""

    def __init__(self, worker_pids: list[int]) -> None:
        self.worker_pids = worker_pids

    def start(self) -> None:
        self.backends = backend_pids()
        self.x0 = transactions()
        self.w0 = sum(process_cpu(p) for p in self.worker_pids)
        self.b0 = sum(process_cpu(p) for p in self.backends)
        self.m0 = machine_cpu()

    def stop(self) -> dict[str, float]:
        w1 = sum(process_cpu(p) for p in self.worker_pids)
        b1 = sum(process_cpu(p) for p in self.backends)
        m1 = machine_cpu()
        busy = (m1[0] - self.m0[0]) / max(m1[1] - self.m0[1], 1)
        return {"worker_cpu_s": w1 - self.w0, "backend_cpu_s": b1 - self.b0, "machine_busy": busy}

    def transactions(self) -> int:
        """Transactions committed on this database since start(): one per worker statement
        (they autocommit), plus this process's polling. Backends report their counts when
        idle, at most once a second, so call this a little after the work ended."""
        return transactions() - self.x0


# -- py-spy profiling (BENCH_PROFILE) -------------------------------------------------


def _thread_group(name: str) -> str:
    if name.startswith("scheduler-exec"):
        return "executor threads"
    if name.startswith("scheduler-listener"):
        return "listener thread"
    return name or "unnamed thread"


#: Main-thread frames whose inclusive share answers "where does the claim loop spend its time".
KEY_FRAMES = [
    ("Worker._claim (scheduler_app/worker/loop.py)", "_claim (incl. ClaimedJob, inbox)"),
    ("claim_jobs (scheduler_app/db/postgresql/jobs.py)", "  claim_jobs: CLAIM statement"),
    ("Worker._flush (scheduler_app/worker/loop.py)", "_flush"),
    ("finish_jobs (scheduler_app/db/postgresql/jobs.py)", "  finish_jobs: FINISH statement"),
    (
        "Connection.wait (psycopg/connection.py)",
        "  (either) psycopg round trip: send, wait for PostgreSQL, read the result",
    ),
    (
        "ClientCursorMixin._execute_send (psycopg/client_cursor.py)",
        "    of which client-side parameter binding (Django cursor)",
    ),
    (
        "BaseCursor._execute_send (psycopg/_cursor_base.py)",
        "    of which encoding the parameters (server-binding cursor)",
    ),
    ("Worker._collect (scheduler_app/worker/loop.py)", "_collect"),
    ("Worker._side_duties (scheduler_app/worker/loop.py)", "_side_duties (renew, rescue)"),
    ("Worker._sleep_time (scheduler_app/worker/loop.py)", "_sleep_time (next-due query)"),
    ("Event.wait (threading.py)", "Event.wait: waiting for a wake-up"),
]


def summarise_profile(path: Path, title: str, top: int = 16) -> str:
    """Return a text summary of a py-spy raw (collapsed) profile: per thread group, hot frames."""
    groups: dict[str, dict[str, collections.Counter]] = {}
    totals: collections.Counter[str] = collections.Counter()
    try:
        text = path.read_text()
    except OSError as exc:
        return "%s: no profile (%s)\n" % (title, exc)
    for frames, count in collapsed_stacks(text):
        thread = ""
        if frames[0].startswith("thread ("):
            thread = frames.pop(0).partition("): ")[2]
        frames = [frame_name(f) for f in frames]
        group = _thread_group(thread)
        g = groups.setdefault(group, {"self": collections.Counter(), "incl": collections.Counter()})
        totals[group] += count
        if frames:
            g["self"][frames[-1]] += count
        for frame in set(frames):
            g["incl"][frame] += count
    out = ["### %s" % title, ""]
    main = groups.get("MainThread")
    if main:
        total = totals["MainThread"]
        out.append("MainThread, the claim loop: %s samples" % total)
        for frame, label in KEY_FRAMES:
            out.append("    %5.1f%%  %s" % (100 * main["incl"][frame] / total, label))
        out.append("")
    for group, total in totals.most_common():
        g = groups[group]
        out.append("%s: %s samples" % (group, total))
        out.append("  inclusive (share of this group's samples):")
        shown = 0
        for frame, n in g["incl"].most_common():
            if frame.startswith(
                (
                    "_bootstrap",
                    "Thread.",
                    "_run_",
                    "<module>",
                    "execute_from",
                    "ManagementUtility",
                    "BaseCommand",
                    "Command.handle",
                )
            ):
                continue  # the frames every stack of the group shares
            out.append("    %5.1f%%  %s" % (100 * n / total, frame))
            shown += 1
            if shown == top:
                break
        out.append("  self (leaf frame):")
        for frame, n in g["self"].most_common(top // 2):
            out.append("    %5.1f%%  %s" % (100 * n / total, frame))
        out.append("")
    return "\n".join(out) + "\n"


def seed_history(jobs: int) -> int:
    """Give the job table ``jobs`` finished rows, vacuumed and analysed, like a live system.

    Without it the drain would run on a never-analysed table, whose plans flip
    from run to run; with it the planner sees what it sees in production when a
    burst arrives: statistics that say almost nothing is pending or running.
    """
    from django.db import connection, transaction

    from scheduler_app import schedule_many

    with transaction.atomic():
        schedule_many("tests.noop", [None] * jobs)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_app_job SET status = 'succeeded', attempts = 1, "
            "started_at = now(), finished_at = now() WHERE status = 'pending' AND run_at <= now()"
        )
        cursor.execute("VACUUM ANALYZE scheduler_app_job")
        cursor.execute("VACUUM ANALYZE scheduler_app_jobattempt")
        cursor.execute("SELECT COALESCE(max(id), 0) FROM scheduler_app_job")
        return cursor.fetchone()[0]


# -- (a) drain throughput --------------------------------------------------------------


def bench_drain(
    url: str,
    jobs: int,
    concurrency: int,
    batch: int,
    n_workers: int,
    profile_dir: Path | None,
    history: int | None = None,
) -> dict:
    """Drain ``jobs`` after seeding ``history`` finished rows (default: ``jobs``); with
    ``history=0`` the rows already in the table stay as they are."""
    from django.db import connection, transaction

    from scheduler_app import clock, schedule_many

    last_history_id = seed_history(jobs if history is None else history)
    workers: list[WorkerProcess] = []
    profilers: list[Profiler] = []
    try:
        for _ in range(n_workers):
            workers.append(
                WorkerProcess(url, "--concurrency", str(concurrency), "--batch-size", str(batch))
            )
        wait_ready(workers)
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
            for i, worker in enumerate(workers):
                # Worker 1: wall-clock (idle included); the others: on-CPU samples only.
                idle = i == 0
                name = "worker%d-%s.txt" % (i + 1, "wall" if idle else "cpu")
                profilers.append(
                    Profiler(worker.pid, profile_dir / name, rate=100, idle=idle, threads=True)
                )
            time.sleep(1.5)  # let py-spy attach
        meter = CpuMeter([w.pid for w in workers])
        meter.start()
        items = [None] * jobs
        with transaction.atomic():
            schedule_many("tests.noop", items)
        t0 = clock.now()  # the commit has returned; the NOTIFY went out with it
        mono0 = time.monotonic()
        timeout = max(120.0, jobs / 50)
        polls = 0
        with connection.cursor() as cursor:
            while True:
                polls += 1
                cursor.execute(
                    "SELECT EXISTS (SELECT 1 FROM scheduler_app_job "
                    "WHERE status IN ('pending', 'running') AND id > %s AND run_at <= now())",
                    [last_history_id],
                )
                if not cursor.fetchone()[0]:
                    break
                if time.monotonic() - mono0 > timeout:
                    raise RuntimeError(
                        "drain did not finish in %ss:\n%s"
                        % (timeout, "\n".join(w.output() for w in workers))
                    )
                dead = [w for w in workers if w.proc.poll() is not None]
                if dead:
                    raise RuntimeError("worker died:\n%s" % dead[0].output())
                time.sleep(POLL)
            polled = time.monotonic() - mono0
            cpu = meter.stop()
            time.sleep(1.2)  # backends report transaction counts when idle, once a second
            # Minus this process's own: the scheduling commit, the polls, the count reads.
            statements = meter.transactions() - polls - 3
            cursor.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*), "
                "min(started_at), max(finished_at) FROM scheduler_app_job WHERE id > %s",
                [last_history_id],
            )
            succeeded, total, first_start, last_finish = cursor.fetchone()
        unexpected = [
            line for w in workers for line in w.lines if not line.startswith(EXPECTED_LOG_LINES)
        ]
        if succeeded != jobs or total != jobs:
            raise RuntimeError(
                "expected %s succeeded jobs, found %s of %s" % (jobs, succeeded, total)
            )
        elapsed = (last_finish - t0).total_seconds()
        for profiler in profilers:
            profiler.stop()
        return {
            "jobs": jobs,
            "elapsed_s": elapsed,
            "polled_s": polled,
            "first_start_ms": (first_start - t0).total_seconds() * 1000,
            "jobs_s": jobs / elapsed,
            "statements": statements,
            "unexpected_log_lines": unexpected,
            **cpu,
            "profiles": [p.path for p in profilers],
        }
    finally:
        for profiler in profilers:
            profiler.stop()
        for worker in workers:
            worker.stop()


# -- (b) pickup latency --------------------------------------------------------------------


def bench_pickup(url: str, concurrency: int, batch: int) -> dict:
    from django.db import connection, transaction

    from scheduler_app import clock, schedule
    from scheduler_app.models import Job

    worker = WorkerProcess(
        url, "--concurrency", str(concurrency), "--batch-size", str(batch), "--poll-interval", "30"
    )
    try:
        wait_ready([worker])
        time.sleep(0.5)  # let its first turn (lease rescue, next-due look-up) end in the idle wait
        committed: dict[int, dt.datetime] = {}
        issued: dict[int, dt.datetime] = {}
        commit_ms: list[float] = []
        start = time.monotonic()
        for i in range(PICKUP_JOBS):
            delay = start + i * PICKUP_INTERVAL - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            before = time.perf_counter()
            with transaction.atomic():
                job = schedule("tests.noop")
                issued[job.pk] = clock.now()  # COMMIT is sent next
            committed[job.pk] = clock.now()  # commit has returned
            commit_ms.append((time.perf_counter() - before) * 1000)
        deadline = time.monotonic() + 60
        while Job.objects.filter(pk__in=committed, status="succeeded").count() < PICKUP_JOBS:
            if time.monotonic() > deadline:
                raise RuntimeError("pickup jobs did not finish:\n%s" % worker.output())
            time.sleep(POLL)
        started = dict(Job.objects.filter(pk__in=committed).values_list("pk", "started_at"))
        connection.close()
    finally:
        worker.stop()
    latencies = sorted((started[pk] - at).total_seconds() * 1000 for pk, at in committed.items())
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    # Upper bound: from the moment COMMIT was sent (includes the commit's WAL flush).
    from_issue = sorted((started[pk] - at).total_seconds() * 1000 for pk, at in issued.items())
    qi = statistics.quantiles(from_issue, n=100, method="inclusive")
    return {
        "issued_p50_ms": qi[49],
        "issued_p99_ms": qi[98],
        "n": len(latencies),
        "p50_ms": q[49],
        "p99_ms": q[98],
        "max_ms": latencies[-1],
        "min_ms": latencies[0],
        "commit_p50_ms": statistics.median(commit_ms),
    }


# -- (c) the raw limit ---------------------------------------------------------------------

RAW_CLAIM = """
UPDATE raw_jobs SET status = 'running', lease = now() + interval '30 seconds'
WHERE id IN (
    SELECT id FROM raw_jobs
    WHERE status = 'pending' AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
RETURNING id
"""
RAW_DONE = "UPDATE raw_jobs SET status = 'done' WHERE id = ANY(%s)"


def _raw_worker(url: str, batch: int, ready, go, results) -> None:  # type: ignore[no-untyped-def]
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        ready.put(os.getpid())
        go.wait()
        done = 0
        while True:
            ids = [row[0] for row in conn.execute(RAW_CLAIM, (batch,)).fetchall()]
            if not ids:
                break
            conn.execute(RAW_DONE, (ids,))
            done += len(ids)
        results.put((done, time.time()))


def bench_raw_once(url: str, jobs: int) -> dict:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS raw_jobs")
        conn.execute(
            "CREATE TABLE raw_jobs (id bigserial PRIMARY KEY, status text, run_at timestamptz, "
            "priority int, lease timestamptz)"
        )
        conn.execute(
            "CREATE INDEX raw_jobs_pending ON raw_jobs (priority, run_at, id) "
            "WHERE status = 'pending'"
        )
        # The same history the job table gets (see seed_history), then the pending rows.
        conn.execute(
            "INSERT INTO raw_jobs (status, run_at, priority) "
            "SELECT 'done', now(), 0 FROM generate_series(1, %s)",
            (jobs,),
        )
        conn.execute("VACUUM ANALYZE raw_jobs")
        conn.execute(
            "INSERT INTO raw_jobs (status, run_at, priority) "
            "SELECT 'pending', now(), 0 FROM generate_series(1, %s)",
            (jobs,),
        )
    ctx = multiprocessing.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_raw_worker, args=(url, RAW_BATCH, ready, go, results))
        for _ in range(RAW_PROCESSES)
    ]
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=60)
        t0 = time.time()
        go.set()
        outcomes = [results.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join(30)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    done = sum(n for n, _ in outcomes)
    if done != jobs:
        raise RuntimeError("raw: expected %s rows done, got %s" % (jobs, done))
    return {"elapsed_s": max(end for _, end in outcomes) - t0}


def bench_raw(url: str, jobs: int) -> dict:
    """The raw loop RAW_ROUNDS times (it is short, so noisy); report the median round."""
    rounds = sorted(
        (bench_raw_once(url, jobs) for _ in range(RAW_ROUNDS)), key=lambda r: r["elapsed_s"]
    )
    median = rounds[len(rounds) // 2]
    return {
        "jobs": jobs,
        "elapsed_s": median["elapsed_s"],
        "jobs_s": jobs / median["elapsed_s"],
        "rounds_jobs_s": [jobs / r["elapsed_s"] for r in rounds],
    }


# -- (d) the commit's WAL flush -----------------------------------------------------------------

COMMIT_SAMPLES = 300


def bench_commit(url: str) -> dict:
    """Time a one-row UPDATE and its COMMIT, COMMIT_SAMPLES times, at the server's settings.

    Every turn of a worker commits once (the outcomes of one batch and the next claim)
    and waits for that commit's WAL flush before it starts the jobs it claimed; a
    turn carries at most CONCURRENCY jobs (one per slot). So one worker drains at
    most CONCURRENCY / (commit latency) jobs per second, whatever its CPU: the
    ``flush_bound`` reported is that figure times the workers (concurrent commits
    may share a flush, so it is a guide, not a hard limit).
    """
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (n int)")
        conn.execute("INSERT INTO bench_commit_probe VALUES (0)")
        conn.commit()
        times = []
        for _ in range(COMMIT_SAMPLES):
            started = time.perf_counter()
            conn.execute("UPDATE bench_commit_probe SET n = n + 1")
            conn.commit()
            times.append((time.perf_counter() - started) * 1000)
        conn.execute("DROP TABLE bench_commit_probe")
        conn.commit()
    q = statistics.quantiles(times, n=100, method="inclusive")
    return {"p50_ms": q[49], "p90_ms": q[89]}


# -- the claim and finish statements, explained -------------------------------------------------


def _plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def _plan_text(node: dict) -> str:
    """Return a one-line plan: Node(rows[xloops] [on index]) [children...]."""
    name = node["Node Type"]
    if node.get("Index Name"):
        name += " " + node["Index Name"]
    elif node.get("Relation Name") and "Scan" in node["Node Type"]:
        name += " " + node["Relation Name"]
    loops = node.get("Actual Loops", 1)
    text = "%s(%s%s)" % (name, node.get("Actual Rows"), "x%s" % loops if loops != 1 else "")
    children = node.get("Plans", ())
    if children:
        text += " [" + ", ".join(_plan_text(child) for child in children) + "]"
    return text


#: auto_explain's settings for _explain(), transaction-local: every statement's plan with
#: its actual rows and buffers, those run inside a function included, sent to the client.
AUTO_EXPLAIN = (
    ("auto_explain.log_min_duration", "0"),
    ("auto_explain.log_analyze", "on"),
    ("auto_explain.log_buffers", "on"),
    ("auto_explain.log_format", "json"),
    ("auto_explain.log_nested_statements", "on"),
    ("client_min_messages", "log"),
)


def _explain(cursor_class, sql: str, params) -> dict:  # type: ignore[no-untyped-def]
    """Run ``sql`` (a call of one of scheduler_app's functions, migration 0031) on a cursor
    of the class it was sent with, and return the plan of the statement the function ran:
    auto_explain logs it, with ``client_min_messages`` letting the log reach the client
    as a notice. The caller rolls back."""
    from django.db import connection

    raw = connection.connection
    logged: list = []

    def keep(notice) -> None:  # type: ignore[no-untyped-def]
        # Read in the handler: psycopg frees a notice's result when the handler returns.
        if "plan:" in (notice.message_primary or ""):
            logged.append(notice.message_primary)

    raw.add_notice_handler(keep)
    try:
        with cursor_class(raw) as cursor:
            cursor.execute("LOAD 'auto_explain'")
            before = []
            for name, value in AUTO_EXPLAIN:
                cursor.execute(
                    "SELECT current_setting(%s), set_config(%s, %s, true)", [name, name, value]
                )
                before.append((name, cursor.fetchone()[0]))
            cursor.execute(sql, params)
            for name, value in before:
                cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
    finally:
        raw.remove_notice_handler(keep)
    docs = [json.loads(message.split("plan:", 1)[1]) for message in logged]
    (doc,) = [d for d in docs if "scheduler_app_job " in d["Query Text"]]
    duration = float(logged[docs.index(doc)].split("duration:", 1)[1].split("ms", 1)[0])
    nodes = list(_plan_nodes(doc["Plan"]))
    sorted_rows = max(
        (
            child.get("Actual Rows", 0) * child.get("Actual Loops", 1)
            for n in nodes
            if n["Node Type"] == "Sort"
            for child in n.get("Plans", ())
        ),
        default=0,
    )
    return {
        "ms": duration,
        "sorted_rows": sorted_rows,
        "plan": _plan_text(doc["Plan"]),
        "buffers": doc["Plan"].get("Shared Hit Blocks", 0)
        + doc["Plan"].get("Shared Read Blocks", 0),
    }


def _sent_statement(call):  # type: ignore[no-untyped-def]
    """Run ``call()`` in a savepoint that is rolled back; return its result and the last
    statement it sent as (sql, params, cursor class), so that the very statement
    scheduler_app builds can be EXPLAINed the way it was sent.

    Captured at the psycopg level, so it sees statements sent on a Django cursor
    (client-side binding) and on a bare psycopg cursor (server-side binding) alike.
    """
    import psycopg
    from django.db import transaction

    sent: list = []
    original = psycopg.Cursor.execute

    def capture(cursor, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        sent.append((query, params, type(cursor)))
        return original(cursor, query, params, **kwargs)

    with transaction.atomic():
        psycopg.Cursor.execute = capture  # type: ignore[method-assign]
        try:
            result = call()
        finally:
            psycopg.Cursor.execute = original  # type: ignore[method-assign]
        transaction.set_rollback(True)
    if not sent:
        raise RuntimeError("%r sent no statement through psycopg.Cursor.execute" % call)
    return result, sent[-1]


def _call_with(function, known: dict):  # type: ignore[no-untyped-def]
    """Call ``function`` with the keyword arguments it takes from ``known``."""
    accepted = inspect.signature(function).parameters
    return function(**{k: v for k, v in known.items() if k in accepted})


def explain_statements(jobs: int, limit: int) -> dict:
    """EXPLAIN ANALYZE scheduler_app's CLAIM and FINISH with ``jobs`` pending, then roll back.

    The statements are the ones scheduler_app.db.postgresql.jobs.claim_jobs() and
    finish_jobs() send (captured, then explained), so this follows their changes.
    """
    from django.db import connection, transaction

    from scheduler_app import clock, schedule_many
    from scheduler_app.conf import app_settings
    from scheduler_app.db.postgresql import jobs as pg
    from scheduler_app.worker.execution import ClaimedJob, Finish

    out: dict = {"backlog": jobs, "limit": limit}
    with transaction.atomic():
        schedule_many("tests.noop", [None] * jobs)
        now = clock.now()
        known = {
            "worker": "bench",
            "queues": list(app_settings.QUEUES),
            "limit": limit,
            "now": now,
            "lease": dt.timedelta(seconds=30),
        }
        _, (claim_sql, claim_params, claim_cursor) = _sent_statement(
            lambda: _call_with(pg.claim_jobs, known)
        )
        out["claim"] = _explain(claim_cursor, claim_sql, claim_params)
        rows = _call_with(pg.claim_jobs, known)
        finishes = [
            Finish(
                job=ClaimedJob.from_row(r),
                status="succeeded",
                outcome="succeeded",
                finished_at=clock.now(),
            ).as_row()
            for r in rows
        ]
        _, (finish_sql, finish_params, finish_cursor) = _sent_statement(
            lambda: pg.finish_jobs(finishes, worker="bench")
        )
        out["finish_rows"] = len(rows)
        out["finish"] = _explain(finish_cursor, finish_sql, finish_params)
        transaction.set_rollback(True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_live_tup, n_dead_tup, last_autovacuum IS NOT NULL, "
            "last_autoanalyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = %s",
            [pg.JOB],
        )
        out["table"] = cursor.fetchone()
    return out


def format_explain(e: dict) -> str:
    if "error" in e:
        return "EXPLAIN of CLAIM/FINISH failed: %s" % e["error"]

    def one(label: str, r: dict | None) -> str:
        if r is None:
            return "%s: n/a (statement text changed)" % label
        extra = "; sorts %s rows" % r["sorted_rows"] if r["sorted_rows"] else ""
        return "%s: %.2f ms, %s buffers%s\n    plan: %s" % (
            label,
            r["ms"],
            r["buffers"],
            extra,
            r["plan"],
        )

    live, dead, vacuumed, analyzed = e["table"] or (0, 0, False, False)
    return "\n".join(
        [
            "job table: %s live, %s dead tuples; autovacuum ran: %s, autoanalyze ran: %s"
            % (live, dead, vacuumed, analyzed),
            one("CLAIM %s (scheduler_app)" % e["limit"], e["claim"]),
            one("FINISH %s (scheduler_app)" % e["finish_rows"], e["finish"]),
        ]
    )


# -- reporting ---------------------------------------------------------------------------------


def write_results(
    path: Path,
    when: dt.datetime,
    params: dict,
    machine: dict,
    drain: dict,
    pickup: dict,
    raw: dict,
    commit: dict,
    final: str,
    profile_text: str,
    explained: dict,
) -> None:
    ratio = drain["jobs_s"] / raw["jobs_s"]
    per_k = 1000 / drain["jobs"]
    lines = [
        "",
        "## %s — jobs=%s workers=%s concurrency=%s batch=%s%s"
        % (
            when.strftime("%Y-%m-%d %H:%M UTC"),
            params["jobs"],
            params["workers"],
            params["concurrency"],
            params["batch"],
            PROFILED_NOTE if params["profile"] else "",
        ),
        "",
        machine_line(machine),
        "",
        "| measure | result |",
        "|---|---|",
        "| (a) drain, %s workers x concurrency %s, batch %s | **%.0f jobs/s** (%s jobs in %.2f s "
        "from commit to last finished_at; polled %.2f s; first start %.1f ms after commit) |"
        % (
            params["workers"],
            params["concurrency"],
            params["batch"],
            drain["jobs_s"],
            drain["jobs"],
            drain["elapsed_s"],
            drain["polled_s"],
            drain["first_start_ms"],
        ),
        "| (a) CPU during drain | workers %.2f s, their PostgreSQL backends %.2f s "
        "(%.0f ms + %.0f ms per 1000 jobs); machine %.0f%% busy; ~%s worker statements "
        "(%.1f jobs per statement) |"
        % (
            drain["worker_cpu_s"],
            drain["backend_cpu_s"],
            drain["worker_cpu_s"] * per_k * 1000,
            drain["backend_cpu_s"] * per_k * 1000,
            drain["machine_busy"] * 100,
            drain["statements"],
            drain["jobs"] / max(drain["statements"], 1),
        ),
        "| (c) raw SKIP LOCKED loop, %s processes, LIMIT %s | **%.0f jobs/s** (%s rows in %.2f s) |"
        % (RAW_PROCESSES, RAW_BATCH, raw["jobs_s"], raw["jobs"], raw["elapsed_s"]),
        "| (c) raw rounds | %s jobs/s (median reported) |"
        % ", ".join("%.0f" % r for r in raw["rounds_jobs_s"]),
        "| drain / raw | **%.2f** (target ≥ 0.30) |" % ratio,
        "| (b) pickup latency, %s jobs one every %d ms, 1 idle worker, poll 30 s | "
        "**p50 %.2f ms, p99 %.2f ms** from commit returned (min %.2f, max %.2f); "
        "from COMMIT sent: p50 %.2f ms, p99 %.2f ms; schedule()+commit p50 %.2f ms |"
        % (
            pickup["n"],
            PICKUP_INTERVAL * 1000,
            pickup["p50_ms"],
            pickup["p99_ms"],
            pickup["min_ms"],
            pickup["max_ms"],
            pickup["issued_p50_ms"],
            pickup["issued_p99_ms"],
            pickup["commit_p50_ms"],
        ),
        "| (d) one-row UPDATE + COMMIT (the WAL flush every turn waits for), %s samples | "
        "p50 %.2f ms, p90 %.2f ms; **flush bound %.0f jobs/s** (workers x min(concurrency, "
        "batch) / p50: a turn carries at most one job per slot and waits for one flush) |"
        % (COMMIT_SAMPLES, commit["p50_ms"], commit["p90_ms"], commit["flush_bound_jobs_s"]),
        "",
        "Targets: drain ≥ 20,000 jobs/s %s; ≥ 30%% of raw %s; pickup p99 < 10 ms %s."
        % (
            "met" if drain["jobs_s"] >= 20000 else "**missed**",
            "met" if ratio >= 0.30 else "**missed**",
            "met" if pickup["p99_ms"] < 10 else "**missed**",
        ),
        "",
        "```",
        final,
        "```",
    ]
    if drain["unexpected_log_lines"]:
        lines += [
            "",
            "**The drain's workers logged %s unexpected lines** (first 10):"
            % len(drain["unexpected_log_lines"]),
            "",
            "```",
            *drain["unexpected_log_lines"][:10],
            "```",
        ]
    lines += [
        "",
        "Statements in the server, EXPLAIN ANALYZE right after the drain "
        "(%s jobs pending, rolled back):" % explained.get("backlog"),
        "",
        "```",
        format_explain(explained),
        "```",
    ]
    if profile_text:
        lines += [
            "",
            "<details><summary>py-spy profile of the drain</summary>",
            "",
            "```",
            profile_text.rstrip(),
            "```",
            "",
            "</details>",
        ]
    append_results(
        path,
        "# Worker benchmark results\n\nAppended by `python bench/worker.py`; "
        "see bench/README.md.\n",
        "\n".join(lines) + "\n",
    )


def main() -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from scheduler_app.conf import DEFAULTS

    jobs = env_int("BENCH_JOBS", 20000)
    # The app's defaults, what a user gets without tuning.
    concurrency = env_int("BENCH_CONCURRENCY", DEFAULTS["CONCURRENCY"])
    batch = env_int("BENCH_BATCH", DEFAULTS["CLAIM_BATCH_SIZE"])
    n_workers = env_int("BENCH_WORKERS", 2)
    url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_URL
    profile = os.environ.get("BENCH_PROFILE")
    profile_dir = Path(profile).resolve() if profile else None
    results_path = Path(os.environ.get("BENCH_RESULTS") or REPO / "bench" / "results-worker.md")
    when = dt.datetime.now(dt.UTC)
    params = {
        "jobs": jobs,
        "concurrency": concurrency,
        "batch": batch,
        "workers": n_workers,
        "profile": bool(profile_dir),
    }
    print(
        "bench/worker.py %s db=%s" % (" ".join("%s=%s" % kv for kv in params.items()), url),
        flush=True,
    )

    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("synchronous_commit",), os.environ.get("BENCH_REVISION", ""))

    from django.db import connection

    drain = bench_drain(url, jobs, concurrency, batch, n_workers, profile_dir)
    print(
        "drain: %.0f jobs/s (%.2f s; workers %.2f CPU s, backends %.2f CPU s, machine %.0f%% busy, "
        "~%s worker statements)"
        % (
            drain["jobs_s"],
            drain["elapsed_s"],
            drain["worker_cpu_s"],
            drain["backend_cpu_s"],
            drain["machine_busy"] * 100,
            drain["statements"],
        ),
        flush=True,
    )
    if drain["unexpected_log_lines"]:
        print("WARNING: the drain's workers logged:", flush=True)
        print("\n".join(drain["unexpected_log_lines"][:10]), flush=True)
    try:
        explained = explain_statements(jobs, min(concurrency, batch))
    except Exception as exc:  # a diagnostic: report it, keep benchmarking
        explained = {"error": "%s: %s" % (type(exc).__name__, exc)}
    print(format_explain(explained), flush=True)
    with connection.cursor() as cursor:
        # Clear what the drain and the EXPLAINs (rolled back) left, before the pickup bench.
        cursor.execute("VACUUM scheduler_app_job, scheduler_app_jobattempt")
    profile_text = ""
    for path in drain["profiles"]:
        profile_text += summarise_profile(path, path.name)
    if profile_text:
        print(profile_text, flush=True)

    pickup = bench_pickup(url, concurrency, batch)
    print(
        "pickup: p50 %.2f ms, p99 %.2f ms, max %.2f ms (from COMMIT sent: p50 %.2f, p99 %.2f)"
        % (
            pickup["p50_ms"],
            pickup["p99_ms"],
            pickup["max_ms"],
            pickup["issued_p50_ms"],
            pickup["issued_p99_ms"],
        ),
        flush=True,
    )

    connection.close()
    raw = bench_raw(url, jobs)
    print("raw: %.0f jobs/s (%.2f s)" % (raw["jobs_s"], raw["elapsed_s"]), flush=True)

    commit = bench_commit(url)
    commit["flush_bound_jobs_s"] = n_workers * min(concurrency, batch) / commit["p50_ms"] * 1000
    print(
        "commit: p50 %.2f ms, p90 %.2f ms; flush bound %.0f jobs/s"
        % (commit["p50_ms"], commit["p90_ms"], commit["flush_bound_jobs_s"]),
        flush=True,
    )

    ratio = drain["jobs_s"] / raw["jobs_s"]
    final = (
        "drain_jobs_s=%.0f raw_jobs_s=%.0f ratio=%.3f pickup_p50_ms=%.2f pickup_p99_ms=%.2f "
        "commit_p50_ms=%.2f flush_bound_jobs_s=%.0f"
        % (
            drain["jobs_s"],
            raw["jobs_s"],
            ratio,
            pickup["p50_ms"],
            pickup["p99_ms"],
            commit["p50_ms"],
            commit["flush_bound_jobs_s"],
        )
    )
    write_results(
        results_path,
        when,
        params,
        machine,
        drain,
        pickup,
        raw,
        commit,
        final,
        profile_text,
        explained,
    )
    print(final, flush=True)


if __name__ == "__main__":
    main()
