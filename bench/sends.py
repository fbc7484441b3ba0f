#!/usr/bin/env python
"""Bulk-send benchmarks: freezing a large audience, and delivering a batch end to end.

Run from the repository root::

    python bench/sends.py

It drops and re-creates its own PostgreSQL database (``bench_sends`` unless
BENCH_DATABASE_URL names another), creates scheduler_app's tables (migrate)
and the test app's (``--run-syncdb``), fills ``testapp_customer`` with
BENCH_AUDIENCE rows in one INSERT ... SELECT generate_series, and measures:

(a) freeze: scheduler_app.sends.audience.freeze() of the whole
    "tests.customers" audience (BENCH_AUDIENCE rows) into Recipient, in one
    transaction; the time includes the commit. freeze_rows_s = rows / freeze_s.
(b) send: BENCH_WORKERS (2) real ``runworker`` subprocesses are started and
    waited for (their "worker started" line and their LISTEN connection).
    A batch of the first BENCH_RECIPIENTS customers (plan "send"), provider
    "noop", is scheduled with schedule_batch() (checklist relaxed: no dry-run
    of a 100,000-row audience here); its commit is t0. The lanes freeze the
    audience, then claim chunks, render, call the provider and write the
    markers and counters. send_recipients_s = recipients / (the batch's
    finished_at - t0): end to end, the lanes' own freeze included. Every
    0.25 s the bench also samples pg_stat_activity for backends waiting for a
    lock, and those whose statement names the batch table (a lane queued on
    the batch row: 0 since the lanes count in their own rows, #31), once the
    batch is sending (its start, the freeze, holds the batch row on purpose).

Duplicates: a recipient is marked sent at most once per batch by
construction (UNIQUE (batch, recipient_key), and the mark is fenced by the
claim), so the bench counts provider-level repeats instead. The noop
provider records nothing, but every claim of a recipient adds one to its
``attempts`` right before the provider call, and the noop provider never
fails or defers (and no rate limit is set, so no claim is handed back), so
``sum(attempts) - count(*)`` over the sent markers is exactly the number of
provider calls beyond one per recipient.

Workers run ``runworker`` through this script (``python bench/sends.py
runworker ...``), which applies BENCH_SEND_CHUNK to SCHEDULER_APP's
SEND_CHUNK_SIZE before Django reads tests.settings (that file does not read
it from the environment); BENCH_SEND_LANES is applied in this process, which
enqueues the lanes.

The suppression check of tests.settings (tests.testapp.sending.suppressed)
runs on every chunk, as in production: it looks customers up by email, so
the bench indexes testapp_customer.email, as a project would.

Environment: BENCH_AUDIENCE (1000000), BENCH_RECIPIENTS (100000),
BENCH_WORKERS (2), BENCH_SEND_LANES (2), BENCH_SEND_CHUNK (the app default, 1000),
BENCH_SEND_WINDOW (the app default, 50),
BENCH_PROVIDER (noop; noop-idempotent declares idempotent = True),
BENCH_SYNC_COMMIT (1; 0 sets SEND_MARKER_SYNCHRONOUS_COMMIT = False in the workers),
BENCH_CONCURRENCY (runworker --concurrency; default lanes / workers, at
least 1), BENCH_DATABASE_URL, BENCH_PROFILE (a directory: record the send's
workers with py-spy and print their hot spots; perturbs the figures;
BENCH_PROFILE_IDLE=0 records only samples on the CPU),
BENCH_RESULTS (default bench/results-sends.md), BENCH_LABEL (a note on
what was measured, e.g. a patched copy, written into the results section),
BENCH_HISTORY (1: keep the freeze's BENCH_AUDIENCE rows as a past send's
sent markers, so that the send runs on a table with history whose
statistics do not know the new batch, as in production; default: the
recipient table is emptied before the send).

A dated section is appended to the results file; the last stdout line is
``freeze_rows_s=<n> freeze_s=<n> send_recipients_s=<n> duplicates=<n>``.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
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

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_sends"
POLL = 0.020
SEND_TIMEOUT = 1800.0
#: Providers the bench adds to tests.settings.
BENCH_PROVIDERS = {"noop-idempotent": "tests.testapp.sending.IdempotentNoopProvider"}
RELAX_ALL = (
    "audience_within_limit",
    "dry_run_clean",
    "seed_sent",
    "schedule_unambiguous",
    "no_other_large_batch",
)


# -- the worker entry point (python bench/sends.py runworker ...) ---------------------


def run_worker_command(args: list[str]) -> None:
    """Run ``manage.py runworker`` with BENCH_SEND_CHUNK applied to tests.settings."""
    sys.path.insert(0, str(REPO))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import tests.settings

    if os.environ.get("BENCH_SEND_CHUNK"):
        tests.settings.SCHEDULER_APP["SEND_CHUNK_SIZE"] = int(os.environ["BENCH_SEND_CHUNK"])
    if os.environ.get("BENCH_SYNC_COMMIT", "1") == "0":
        tests.settings.SCHEDULER_APP["SEND_MARKER_SYNCHRONOUS_COMMIT"] = False
    tests.settings.SCHEDULER_APP["PROVIDERS"] = {
        **tests.settings.SCHEDULER_APP["PROVIDERS"],
        **BENCH_PROVIDERS,
    }
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", "runworker", *args])


# -- database set-up -------------------------------------------------------------------


def setup_django_with_lanes(url: str, lanes: int) -> None:
    """Set Django up with SEND_LANES = ``lanes``, and create the tables (testapp's too)."""
    setup_django(url)
    from django.conf import settings
    from django.test.utils import override_settings

    # The lanes are enqueued by this process (schedule_batch), so SEND_LANES applies here.
    providers = {**settings.SCHEDULER_APP["PROVIDERS"], **BENCH_PROVIDERS}
    override_settings(
        SCHEDULER_APP={**settings.SCHEDULER_APP, "SEND_LANES": lanes, "PROVIDERS": providers}
    ).enable()
    migrate(run_syncdb=True)


def populate(audience: int, recipients: int) -> float:
    """Insert ``audience`` customers (the first ``recipients`` on plan "send"); return seconds."""
    from django.db import connection

    from tests.testapp.models import Customer

    table = Customer._meta.db_table
    zones = "ARRAY['Europe/Paris','America/New_York','Asia/Tokyo','Pacific/Auckland','']"
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO %s (email, first_name, plan, tz, unsubscribed) "
            "SELECT 'customer' || g || '@example.com', 'Name' || g, "
            "       CASE WHEN g <= %%s THEN 'send' ELSE 'free' END, "
            "       (%s)[1 + mod(g, 5)], false "
            "FROM generate_series(1, %%s) AS g" % (table, zones),
            [recipients, audience],
        )
        # The suppression check looks customers up by email, for every chunk.
        cursor.execute("CREATE INDEX bench_customer_email ON %s (email)" % table)
        cursor.execute("VACUUM ANALYZE %s" % table)
    return time.perf_counter() - started


# -- (a) freeze ----------------------------------------------------------------------------

#: The app's statement before #14, to compare with today's: de-duplicated by ON CONFLICT
#: only, unsorted (the app's statement now de-duplicates and sorts in the SELECT).
FREEZE_ON_CONFLICT = """
INSERT INTO {table} (batch_id, recipient_key, address, timezone, context, is_seed, status,
                     attempts, next_attempt_at, claimed_by, provider_message_id, last_error)
SELECT %s, a.sa_key::text, COALESCE(a.sa_address::text, ''),
       COALESCE(a.sa_timezone::text, ''), a.sa_context, false, 'pending', 0, now(), '', '', ''
FROM ({select}) AS a
ON CONFLICT (batch_id, recipient_key) DO NOTHING
"""


def own_backend_pid() -> int:
    """Return the process id of this connection's PostgreSQL backend (for its CPU)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def compare_freezes(batch_id: int, query) -> dict:
    """Time the freeze three ways, each in a transaction rolled back: the app's statement
    before #14 (ON CONFLICT only), the app's freeze(), and the app's freeze() with the
    recipient table's foreign key to the batch dropped (inside the transaction, so the
    rollback restores it): what the per-row check of that key costs.

    Each starts on an empty table (TRUNCATE: a rolled-back freeze leaves its rows and
    index entries dead, which the next one would have to step over) and runs the
    foreign key checks before its rollback (they are deferred to the commit, which a
    rollback skips), so all three do the work a committed freeze does but the commit.
    """
    from django.db import connection, transaction

    from scheduler_app import clock
    from scheduler_app.models import Recipient, SendBatch
    from scheduler_app.sends.audience import freeze

    select_sql, params = query.frozen_rows().order_by().query.sql_with_params()
    table = Recipient._meta.db_table
    times = {}
    backend = own_backend_pid()
    with connection.cursor() as cursor:
        foreign_keys = [
            name
            for name, constraint in connection.introspection.get_constraints(cursor, table).items()
            if constraint["foreign_key"] == (SendBatch._meta.db_table, "id")
        ]
    drop_fk = ["ALTER TABLE %s DROP CONSTRAINT %s" % (table, name) for name in foreign_keys]
    variants = {
        "on_conflict": (FREEZE_ON_CONFLICT, []),
        "app": (None, []),
        "app_no_fk": (None, drop_fk),
    }
    for name, (sql, before) in variants.items():
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE %s CASCADE" % table)
        with transaction.atomic():
            with connection.cursor() as cursor:
                for statement in before:
                    cursor.execute(statement)
            started = time.perf_counter()
            cpu0 = process_cpu(backend)
            if sql is None:
                freeze(batch_id, query, next_attempt_at=clock.now())
            with connection.cursor() as cursor:
                if sql is not None:
                    cursor.execute(sql.format(table=table, select=select_sql), [batch_id, *params])
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            times[name] = time.perf_counter() - started
            times[name + "_cpu"] = process_cpu(backend) - cpu0
            transaction.set_rollback(True)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE %s CASCADE" % table)
    return times


def bench_freeze(audience: int, *, history: bool) -> dict:
    from django.db import connection, transaction

    from scheduler_app import clock
    from scheduler_app.models import Recipient, SendBatch
    from scheduler_app.sends.audience import freeze, get_audience

    batch = SendBatch.objects.create(
        name="bench freeze",
        subject_template="News",
        text_template="Hi {{ first_name|default:'there' }}",
        audience="tests.customers",
        expected_max_audience=audience,
        provider="noop",
        rate_limit_key="noop",
    )
    query = get_audience(batch.audience, batch.audience_params)
    ways = compare_freezes(batch.pk, query)
    backend = own_backend_pid()
    cpu0 = process_cpu(backend)
    started = time.perf_counter()
    with transaction.atomic():
        rows = freeze(batch.pk, query, next_attempt_at=clock.now())
    elapsed = time.perf_counter() - started
    backend_cpu = process_cpu(backend) - cpu0
    if rows != audience:
        raise SystemExit("the freeze inserted %s rows, not %s" % (rows, audience))
    table = Recipient._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s), pg_relation_size(%s)", [table, table])
        size, heap = cursor.fetchone()
        if history:
            # Keep the frozen rows as a past send's markers: the send then runs on a table
            # with history whose statistics know nothing of the new batch, as in production.
            cursor.execute(
                "UPDATE %s SET status = 'sent', attempts = 1, sent_at = now() "
                "WHERE batch_id = %%s" % table,
                [batch.pk],
            )
            SendBatch.objects.filter(pk=batch.pk).update(
                status=SendBatch.Status.COMPLETED, total=rows, sent=rows
            )
        else:
            # The send is measured on its own: an empty recipient table.
            cursor.execute("TRUNCATE %s CASCADE" % table)
        cursor.execute("VACUUM ANALYZE %s" % table)
    if not history:
        SendBatch.objects.filter(pk=batch.pk).delete()
    return {
        "rows": rows,
        "freeze_s": elapsed,
        "rows_s": rows / elapsed,
        "backend_cpu_s": backend_cpu,
        "table_mb": size / 1024 / 1024,
        "heap_mb": heap / 1024 / 1024,
        "ways": ways,
    }


# -- runworker subprocesses ------------------------------------------------------------------


class WorkerProcess(BaseWorkerProcess):
    """A ``runworker`` subprocess (through this script) whose output a thread reads."""

    stop_timeout = 30.0

    def __init__(self, url: str, chunk: int, window: int, *args: str) -> None:
        #: When (wall clock) lines about a batch's start arrived: the lanes' freeze ends there.
        self.marks: dict[str, dt.datetime] = {}
        # Per batch, the lanes log progress every PROGRESS_LOG_EVERY (1000) recipients at
        # INFO, nothing per recipient.
        super().__init__(
            [sys.executable, str(Path(__file__).resolve()), "runworker", *args],
            {
                "DATABASE_URL": url,
                "BENCH_SEND_CHUNK": str(chunk),
                "SCHEDULER_SEND_WINDOW": str(window),
            },
            keep_lines=400,
        )

    def on_line(self, line: str) -> None:
        for mark in ("audience frozen", "batch sending"):
            if mark in line:
                self.marks.setdefault(mark, dt.datetime.now(dt.UTC))


# -- lock waits ------------------------------------------------------------------------------


class LockWaits:
    """Samples of this database's backends waiting for a lock during the send: all of them,
    and those whose statement names the batch table (a lane queued on the batch row)."""

    SQL = """
    SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
           count(*) FILTER (WHERE wait_event_type = 'Lock'
                            AND query ILIKE '%%scheduler_app_sendbatch%%')
    FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
    """

    def __init__(self) -> None:
        self.samples = 0
        self.waiting = 0
        self.on_batch = 0

    def sample(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(self.SQL)
            waiting, on_batch = cursor.fetchone()
        self.samples += 1
        self.waiting += waiting
        self.on_batch += on_batch


# -- CPU accounting --------------------------------------------------------------------------


class BackendCpu:
    """CPU used by this database's PostgreSQL backends (not the bench's own), sampled.

    Workers' connections come and go, so the bench samples pg_stat_activity
    while it polls: a backend first seen after start() started after it (its
    CPU counts from 0); one that began and ended between two samples is
    missed. Other databases on the server (other test runs) are not counted.
    """

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.kind: dict[int, str] = {}

    def _pids(self) -> list[int]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, backend_type FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            rows = cursor.fetchall()
        self.kind.update(rows)
        return [pid for pid, _ in rows]

    def start(self) -> None:
        for pid in self._pids():
            self.first[pid] = self.last[pid] = process_cpu(pid)

    def sample(self) -> None:
        for pid in self._pids():
            cpu = process_cpu(pid)
            self.first.setdefault(pid, 0.0)
            self.last[pid] = max(cpu, self.last.get(pid, 0.0))
        for pid in list(self.last):  # still alive: read it again
            cpu = process_cpu(pid)
            if cpu:
                self.last[pid] = max(cpu, self.last[pid])

    def used(self, kind: str | None = None) -> float:
        """Return CPU seconds used by the backends (of ``kind``, e.g. "autovacuum worker")."""
        return sum(
            self.last[pid] - self.first[pid]
            for pid in self.last
            if kind is None or self.kind.get(pid) == kind
        )


# -- py-spy (BENCH_PROFILE) --------------------------------------------------------------------


#: Frames whose inclusive share says where a lane spends its time.
LANE_FRAMES = [
    ("run_lane (scheduler_app/sends/dispatch.py)", "run_lane (the lane, all of it)"),
    (
        "claim_recipients (scheduler_app/db/postgresql/recipients.py)",
        "  claim_recipients: CLAIM chunk",
    ),
    ("_send_chunk (scheduler_app/sends/lane.py)", "  _send_chunk"),
    ("acquire (scheduler_app/sends/limiter.py)", "    limiter.acquire"),
    ("_suppressed (scheduler_app/sends/dispatch.py)", "    suppression check"),
    ("MessageTemplate.render (scheduler_app/sends/rendering.py)", "    render"),
    ("_deliver (scheduler_app/sends/dispatch.py)", "    provider call (noop)"),
    ("_record (scheduler_app/sends/dispatch.py)", "  _record: markers + counters"),
    (
        "mark_recipients (scheduler_app/db/postgresql/recipients.py)",
        "    mark_recipients: MARK chunk",
    ),
    ("paused_scopes (scheduler_app/controls.py)", "  paused_scopes (kill switches)"),
    ("chunk_size_for (scheduler_app/sends/limiter.py)", "  chunk_size_for"),
    ("Connection.wait (psycopg/connection.py)", "  (any) waiting for PostgreSQL"),
]


def summarise_profile(path: Path, top: int = 14) -> str:
    """Return where the sampled worker spent its time, in the threads that ran a lane."""
    incl: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = 0
    try:
        text = path.read_text()
    except OSError as exc:
        return "%s: no profile (%s)\n" % (path.name, exc)
    for raw_frames, count in collapsed_stacks(text):
        frames = [frame_name(f) for f in raw_frames]
        if not any(f.startswith("run_lane ") for f in frames):
            continue  # the claim loop, listener, heartbeat: not the send
        total += count
        leaf[frames[-1]] += count
        for frame in set(frames):
            incl[frame] += count
    if not total:
        return "%s: no samples in run_lane\n" % path.name
    out = ["%s: %s samples in lanes (%.1f s at 200 Hz)" % (path.name, total, total / 200)]
    for frame, label in LANE_FRAMES:
        out.append("    %5.1f%%  %s" % (100 * incl[frame] / total, label))
    out.append("  leaf frames:")
    for frame, n in leaf.most_common(top):
        out.append("    %5.1f%%  %s" % (100 * n / total, frame))
    return "\n".join(out) + "\n"


# -- (b) send -------------------------------------------------------------------------------------


def bench_send(
    url: str,
    recipients: int,
    n_workers: int,
    concurrency: int,
    chunk: int,
    window: int,
    profile_dir: Path | None,
    provider: str,
) -> dict:
    from django.db import connection, transaction
    from django.db.models import Count, Sum

    from scheduler_app import clock
    from scheduler_app.models import Recipient, SendBatch
    from scheduler_app.sends.batches import schedule_batch

    workers = [
        WorkerProcess(url, chunk, window, "--concurrency", str(concurrency))
        for _ in range(n_workers)
    ]
    profilers: list[Profiler] = []
    try:
        wait_ready(workers)
        batch = SendBatch.objects.create(
            name="bench send",
            subject_template="News for {{ first_name|default:'you' }}",
            text_template="Hi {{ first_name|default:'there' }}, here is the news for {{ plan }}.",
            audience="tests.customers",
            audience_params={"plan": "send"},
            expected_max_audience=recipients,
            provider=provider,
            rate_limit_key="noop",
            scheduled_at=clock.now() - dt.timedelta(seconds=1),
            timezone="UTC",
        )
        if profile_dir:
            profile_dir.mkdir(parents=True, exist_ok=True)
            # --idle: a lane mostly waits for PostgreSQL, keep those samples (BENCH_PROFILE_IDLE=0
            # keeps only the samples on the CPU: where the workers' own CPU goes).
            idle = os.environ.get("BENCH_PROFILE_IDLE", "1") != "0"
            profilers = [
                Profiler(
                    w.pid, profile_dir / ("send-%s.txt" % w.pid), rate=200, idle=idle, threads=False
                )
                for w in workers
            ]
            time.sleep(1.0)  # let py-spy attach
        backends = BackendCpu()
        backends.start()
        lock_waits = LockWaits()
        x0 = transactions()
        w0 = sum(process_cpu(w.pid) for w in workers)
        m0 = machine_cpu()
        with transaction.atomic():
            schedule_batch(batch, relax=RELAX_ALL)
        t0 = dt.datetime.now(dt.UTC)
        deadline = time.monotonic() + SEND_TIMEOUT
        next_sample = time.monotonic()
        while True:
            state = SendBatch.objects.filter(pk=batch.pk).values("status").get()
            if state["status"] in ("completed", "failed", "paused", "cancelled"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the send did not finish: %s" % state)
            for worker in workers:
                if worker.proc.poll() is not None:
                    raise RuntimeError("worker %s died:\n%s" % (worker.pid, worker.output()))
            if time.monotonic() >= next_sample:
                backends.sample()
                if state["status"] == "sending":  # the lanes' start (the freeze) holds the row
                    lock_waits.sample()
                next_sample = time.monotonic() + 0.25
            time.sleep(POLL)
        polled = dt.datetime.now(dt.UTC)
        w1 = sum(process_cpu(w.pid) for w in workers)
        backends.sample()
        m1 = machine_cpu()
        time.sleep(1.1)  # backends report their transaction counts at most once a second
        statements = transactions() - x0
    finally:
        for profiler in profilers:
            profiler.stop()
        for worker in workers:
            worker.stop()
    batch.refresh_from_db()
    if batch.status != "completed":
        raise RuntimeError(
            "the batch ended %s: %s\n%s"
            % (batch.status, batch.status_reason, "\n".join(w.output() for w in workers))
        )
    markers = Recipient.objects.filter(batch=batch)
    sent = markers.filter(status="sent").aggregate(
        n=Count("id"), keys=Count("recipient_key", distinct=True), attempts=Sum("attempts")
    )
    if not (sent["n"] == sent["keys"] == batch.sent == batch.total == recipients):
        raise RuntimeError("not every recipient was sent once: %s, batch %s" % (sent, batch.sent))
    pg_cpu = backends.used()
    autovacuum_cpu = backends.used("autovacuum worker")
    elapsed = (batch.finished_at - t0).total_seconds()
    # The lane that froze the audience logged "batch sending" right after (read on arrival).
    frozen = min(w.marks["batch sending"] for w in workers if "batch sending" in w.marks)
    lane_lines = [
        line
        for w in workers
        for line in w.lines
        if "batch " in line and "progress" not in line and "scheduled" not in line
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [Recipient._meta.db_table])
        size = cursor.fetchone()[0]
    return {
        "recipients": recipients,
        "elapsed_s": elapsed,
        "recipients_s": recipients / elapsed,
        "start_s": (frozen - t0).total_seconds(),
        "sending_s": (batch.finished_at - frozen).total_seconds(),
        "polled_s": (polled - t0).total_seconds(),
        "duplicates": sent["attempts"] - sent["n"],
        "worker_cpu_s": w1 - w0,
        "backend_cpu_s": pg_cpu,
        "autovacuum_cpu_s": autovacuum_cpu,
        "machine_busy": (m1[0] - m0[0]) / max(m1[1] - m0[1], 1),
        "statements": statements,
        "cpu_bound_s": recipients / ((w1 - w0 + pg_cpu) / (os.cpu_count() or 1)),
        "own_share": (w1 - w0 + pg_cpu) / ((os.cpu_count() or 1) * (polled - t0).total_seconds()),
        "table_mb": size / 1024 / 1024,
        "lane_lines": lane_lines,
        "lock_samples": lock_waits.samples,
        "lock_waits": lock_waits.waiting,
        "batch_lock_waits": lock_waits.on_batch,
        "profiles": [p.path for p in profilers],
    }


# -- results ---------------------------------------------------------------------------------


def write_results(
    path: Path,
    when: dt.datetime,
    params: dict,
    machine: dict,
    populate_s: float,
    freeze: dict,
    send: dict,
    final: str,
    profile_text: str,
) -> None:
    per_k = 1000 / send["recipients"]
    lines = [
        "",
        "## %s — audience=%s recipients=%s workers=%s lanes=%s chunk=%s concurrency=%s "
        "window=%s%s"
        % (
            when.strftime("%Y-%m-%d %H:%M UTC"),
            params["audience"],
            params["recipients"],
            params["workers"],
            params["lanes"],
            params["chunk"],
            params["concurrency"],
            params["window"],
            PROFILED_NOTE if params["profile"] else "",
        )
        + (" history=1" if params["history"] else "")
        + " provider=%s sync_commit=%s"
        % (params["provider"], "on" if params["sync_commit"] else "off"),
        "",
        *(["Variant: %s" % params["label"], ""] if params["label"] else []),
        machine_line(machine),
        "",
        "| measure | result |",
        "|---|---|",
        "| (a) freeze of %s customers (one INSERT ... SELECT, commit included) | "
        "**%.2f s, %.0f rows/s** (target < 10 s; its backend used %.2f s of CPU); "
        "recipient table %.0f MB after it "
        "(heap %.0f MB, the rest its four indexes and TOAST); "
        "populating the customers took %.1f s |"
        % (
            freeze["rows"],
            freeze["freeze_s"],
            freeze["rows_s"],
            freeze["backend_cpu_s"],
            freeze["table_mb"],
            freeze["heap_mb"],
            populate_s,
        ),
        "| (a) the freeze three ways, each on an empty table, foreign keys checked, rolled "
        "back, before (a), in this order (its backend's CPU) | ON CONFLICT only (the freeze "
        "before #14) %.2f s (%.2f s); the app's freeze() %.2f s (%.2f s); the app's freeze() "
        "without the foreign key to the batch %.2f s (%.2f s) |"
        % (
            freeze["ways"]["on_conflict"],
            freeze["ways"]["on_conflict_cpu"],
            freeze["ways"]["app"],
            freeze["ways"]["app_cpu"],
            freeze["ways"]["app_no_fk"],
            freeze["ways"]["app_no_fk_cpu"],
        ),
        "| (b) send of %s recipients, noop provider, %s runworker processes | "
        "**%.0f recipients/s** end to end (%.2f s from the schedule's commit to finished_at; "
        "target ≥ 10,000/s) |"
        % (send["recipients"], params["workers"], send["recipients_s"], send["elapsed_s"]),
        "| (b) where the time went | %.2f s from the commit until a lane had frozen the "
        'audience (pickup + freeze of %s rows; from its "batch sending" log line), '
        "%.2f s sending |" % (send["start_s"], send["recipients"], send["sending_s"]),
        "| (b) CPU during the send | workers %.2f s, their PostgreSQL backends %.2f s "
        "(of which autovacuum %.2f s) "
        "(%.1f ms + %.1f ms per 1000 recipients); machine %.0f%% busy; ~%s transactions |"
        % (
            send["worker_cpu_s"],
            send["backend_cpu_s"],
            send["autovacuum_cpu_s"],
            send["worker_cpu_s"] * per_k * 1000,
            send["backend_cpu_s"] * per_k * 1000,
            send["machine_busy"] * 100,
            send["statements"],
        ),
        "| (b) CPU-bound estimate | %.0f recipients/s: what %s cores would deliver if the "
        "workers and PostgreSQL had them to themselves (recipients / ((worker + PostgreSQL CPU "
        "s) / cores)); during this run they got %.0f%% of the machine |"
        % (
            send["cpu_bound_s"],
            machine["cores"],
            100 * send["own_share"],
        ),
        "| (b) lock waits | %s backends waiting for a lock in %s samples (every 0.25 s) of "
        "pg_stat_activity while the batch was sending; **%s** of them on a statement naming "
        "the batch table |" % (send["lock_waits"], send["lock_samples"], send["batch_lock_waits"]),
        "| (b) duplicates | **%s** provider calls beyond one per recipient "
        "(sum(attempts) - sent markers; every recipient has exactly one sent marker) |"
        % send["duplicates"],
        "",
        "Final line: `%s`" % final,
        "",
    ]
    if profile_text:
        lines += [
            "Profile of the send (py-spy, lane threads only):",
            "",
            "```",
            profile_text,
            "```",
            "",
        ]
    append_results(
        path,
        "# bench/sends.py results\n\nEach run appends a section; see the docstring of "
        "bench/sends.py for what is measured and how.\n",
        "\n".join(lines),
    )


def main() -> None:
    audience = env_int("BENCH_AUDIENCE", 1_000_000)
    recipients = env_int("BENCH_RECIPIENTS", 100_000)
    if recipients > audience:
        raise SystemExit("BENCH_RECIPIENTS must not exceed BENCH_AUDIENCE")
    n_workers = env_int("BENCH_WORKERS", 2)
    lanes = env_int("BENCH_SEND_LANES", 2)
    from scheduler_app.conf import DEFAULTS

    chunk = env_int("BENCH_SEND_CHUNK", DEFAULTS["SEND_CHUNK_SIZE"])
    window = env_int("BENCH_SEND_WINDOW", DEFAULTS["SEND_WINDOW"])
    provider = os.environ.get("BENCH_PROVIDER") or "noop"
    sync_commit = os.environ.get("BENCH_SYNC_COMMIT", "1") != "0"
    concurrency = env_int("BENCH_CONCURRENCY", max(1, -(-lanes // n_workers)))
    url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_URL
    profile = os.environ.get("BENCH_PROFILE")
    profile_dir = Path(profile).resolve() if profile else None
    results_path = Path(os.environ.get("BENCH_RESULTS") or REPO / "bench" / "results-sends.md")
    history = os.environ.get("BENCH_HISTORY", "") not in ("", "0")
    when = dt.datetime.now(dt.UTC)
    params = {
        "audience": audience,
        "recipients": recipients,
        "workers": n_workers,
        "lanes": lanes,
        "chunk": chunk,
        "concurrency": concurrency,
        "window": window,
        "profile": bool(profile_dir),
        "label": os.environ.get("BENCH_LABEL", ""),
        "history": history,
        "provider": provider,
        "sync_commit": sync_commit,
    }
    print(
        "bench/sends.py %s db=%s" % (" ".join("%s=%s" % kv for kv in params.items()), url),
        flush=True,
    )

    recreate_database(url)
    setup_django_with_lanes(url, lanes)
    machine = machine_description(("synchronous_commit", "shared_buffers"))

    populate_s = populate(audience, recipients)
    print("populate: %s customers in %.1f s" % (audience, populate_s), flush=True)

    freeze = bench_freeze(audience, history=history)
    print(
        "freeze: %s rows in %.2f s (%.0f rows/s, backend CPU %.2f s; rolled back: %s)"
        % (
            freeze["rows"],
            freeze["freeze_s"],
            freeze["rows_s"],
            freeze["backend_cpu_s"],
            " ".join("%s=%.2f" % kv for kv in freeze["ways"].items()),
        ),
        flush=True,
    )

    send = bench_send(url, recipients, n_workers, concurrency, chunk, window, profile_dir, provider)
    print(
        "send: %s recipients in %.2f s (%.0f/s; audience frozen after %.2f s; workers %.1f CPU s, "
        "PostgreSQL %.1f CPU s (autovacuum %.1f), machine %.0f%% busy, ~%s transactions; "
        "CPU-bound estimate %.0f/s; lock waits on the batch table %s in %s samples)"
        % (
            send["recipients"],
            send["elapsed_s"],
            send["recipients_s"],
            send["start_s"],
            send["worker_cpu_s"],
            send["backend_cpu_s"],
            send["autovacuum_cpu_s"],
            send["machine_busy"] * 100,
            send["statements"],
            send["cpu_bound_s"],
            send["batch_lock_waits"],
            send["lock_samples"],
        ),
        flush=True,
    )
    profile_text = "".join(summarise_profile(path) for path in send["profiles"])
    if profile_text:
        print(profile_text, flush=True)

    final = "freeze_rows_s=%.0f freeze_s=%.2f send_recipients_s=%.0f duplicates=%d" % (
        freeze["rows_s"],
        freeze["freeze_s"],
        send["recipients_s"],
        send["duplicates"],
    )
    write_results(
        results_path, when, params, machine, populate_s, freeze, send, final, profile_text
    )
    print(final, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["runworker"]:
        run_worker_command(sys.argv[2:])
    else:
        main()
