#!/usr/bin/env python
"""Retention of finished batches' recipients: the prune's DELETE against a dropped partition
of recipients (scheduler_app.recipient_partitions), and the recipient table's conversion.

Run from the repository root, alone on the machine::

    python bench/recipient_retention.py

On a database of its own (BENCH_DATABASE_URL, default ``bench_recipient_retention``), with
the recipient table as an install that holds rows has it (one table), it stores
BENCH_BATCHES (20) completed batches of BENCH_RECIPIENTS (50000) sent recipients each,
VACUUM ANALYZEs, deletes BENCH_COMPARE (200000) of them with the prune's statement, 1000 a
statement, and VACUUMs them away (autovacuum's work), taking the CPU time (this process
and its PostgreSQL backend) per recipient. Then it times ``recipient_partitions.convert()``
on the table, stores as many batches again (into a partition of their own, made by the
conversion as wide as the batches created in the last interval), VACUUM ANALYZEs them,
and prunes once with RETENTION_BATCHES_DAYS past their finish (``retention.prune()``: the
count for the audit, the check under the lock, the drop, the batch
rows), taking its CPU time per recipient removed, after making the partitions ahead (what
the prune runs before would have done; measured apart). The last stdout line is
``convert_s=<n> delete_us_per_recipient=<n> vacuum_us_per_recipient=<n>
drop_us_per_recipient=<n> ratio=<n> ratio_outside_the_kernel=<n>`` (the last leaves out
the backend's system time: the kernel freeing the dropped files).

Environment: BENCH_BATCHES, BENCH_RECIPIENTS, BENCH_COMPARE, BENCH_DATABASE_URL,
BENCH_RESULTS (default bench/results-prune.md), BENCH_REVISION.
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

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_recipient_retention"
FINISHED_AGO = dt.timedelta(days=40)
RETENTION_DAYS = 30

RECIPIENTS = """
INSERT INTO scheduler_app_recipient (batch_id, recipient_key, address, timezone, context,
    is_seed, status, attempts, next_attempt_at, claimed_by, sent_at, provider_message_id,
    last_error)
SELECT %s, 'customer-' || g, 'customer' || g || '@example.com', 'Europe/Paris',
       '{"first_name": "Ada", "order": 1234}', false, 'sent', 1, now(), '', now(),
       'msg-' || %s || '-' || g || '@email.example.com', ''
FROM generate_series(1, %s) AS g
"""


def finished_batches(count: int, recipients: int) -> list[int]:
    """Store ``count`` batches completed FINISHED_AGO, each with ``recipients`` sent ones."""
    from django.db import connection

    from scheduler_app import clock
    from scheduler_app.models import SendBatch

    finished = clock.now() - FINISHED_AGO
    ids = []
    for _ in range(count):
        batch = SendBatch.objects.create(
            name="news",
            subject_template="s",
            text_template="t",
            audience="bench",
            expected_max_audience=recipients,
            status=SendBatch.Status.COMPLETED,
            total=recipients,
            finished_at=finished,
            status_changed_at=finished,
        )
        with connection.cursor() as cursor:
            cursor.execute(RECIPIENTS, [batch.pk, batch.pk, recipients])
        ids.append(batch.pk)
    return ids


def backend_system_seconds() -> float:
    """Return the system CPU seconds of this connection's PostgreSQL backend: where the
    kernel frees a dropped table's files (at once on a filesystem mounted with discard)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    with open("/proc/%d/stat" % backend) as f:
        return int(f.read().rsplit(")", 1)[1].split()[12]) / os.sysconf("SC_CLK_TCK")


def exists(table: str) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [table])
        return cursor.fetchone()[0] is not None


def vacuum_analyze(table: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE %s" % table)


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    # The tables of an install that holds rows, which the bench converts: migrate leaves
    # them one table each (tests/settings.py).
    os.environ["SCHEDULER_TEST_PLAIN_JOB_TABLE"] = "1"
    setup_django(url)
    migrate()
    from django.db import connection
    from django.test import override_settings

    from scheduler_app import clock, recipient_partitions
    from scheduler_app.db.postgresql import prune_recipients
    from scheduler_app.models import SendBatch
    from scheduler_app.retention import PARTITIONED_RECIPIENTS, prune
    from scheduler_app.retention import finished_batches as finished_before

    machine = machine_description(
        ("autovacuum", "shared_buffers"), os.environ.get("BENCH_REVISION", "")
    )
    batches = env_int("BENCH_BATCHES", 20)
    recipients = env_int("BENCH_RECIPIENTS", 50_000)
    began = time.perf_counter()
    finished_batches(batches, recipients)
    vacuum_analyze(recipient_partitions.RECIPIENT)
    fill_s = time.perf_counter() - began

    # The prune's DELETE on the table as it is, then the VACUUM its dead rows need.
    compare = env_int("BENCH_COMPARE", 200_000)
    done = finished_before(clock.now() - dt.timedelta(days=RETENTION_DAYS))
    cpu = cpu_meter()
    deleted, began = 0, time.perf_counter()
    while deleted < compare:
        removed = prune_recipients(
            batches=done, limit=min(1000, compare - deleted), table=recipient_partitions.RECIPIENT
        )
        if not removed:
            break
        deleted += removed
    delete_s, delete_cpu = time.perf_counter() - began, cpu()
    cpu = cpu_meter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM %s" % recipient_partitions.RECIPIENT)
    vacuum_cpu = cpu()
    left = batches * recipients - deleted

    # Contexts kept: blanking them (RETENTION_RECIPIENT_CONTEXT_DAYS) would rewrite every
    # recipient row before its partition goes, a cost of its own (docs/retention.md).
    kept = override_settings(
        SCHEDULER_APP={
            "RETENTION_BATCHES_DAYS": RETENTION_DAYS,
            "RETENTION_RECIPIENT_CONTEXT_DAYS": None,
        }
    )
    began = time.perf_counter()
    with kept:  # partitions are made only while batches are not kept for ever
        recipient_partitions.convert()
    convert_s = time.perf_counter() - began

    partitioned = finished_batches(batches, recipients)
    (partition,) = {
        p.name
        for p in recipient_partitions.range_partitions()
        for batch_id in partitioned
        if p.first <= batch_id < p.end
    }
    vacuum_analyze(partition)
    with connection.cursor() as cursor:  # the range is full: no new batch can fall in it
        cursor.execute("SELECT setval('scheduler_app_sendbatch_id_seq', %s)", [max(partitioned)])
    # The first batches, in the before partition, would go row by row: kept out of it.
    SendBatch.objects.exclude(pk__in=partitioned).update(status=SendBatch.Status.SENDING)
    with kept:
        # What the prune runs before did: the partitions ahead of the batch ids handed out
        # (a fixed cost an interval, whatever the partitions will hold), measured apart.
        cpu = cpu_meter()
        ahead = len(recipient_partitions.ensure_partitions())
        ahead_ms = cpu() * 1000 / ahead
        cpu = cpu_meter()
        kernel = backend_system_seconds()
        began = time.perf_counter()
        run = prune(clock.now())
        drop_s, drop_cpu = time.perf_counter() - began, cpu()
        kernel = backend_system_seconds() - kernel
    counted = run.counts[PARTITIONED_RECIPIENTS]  # the audit's, from the statistics
    assert run.counts["recipients"] == 0 and not exists(partition), run.counts
    dropped = batches * recipients
    drop_us = drop_cpu * 1e6 / dropped
    user_us = (drop_cpu - kernel) * 1e6 / dropped
    delete_us, vacuum_us = delete_cpu * 1e6 / deleted, vacuum_cpu * 1e6 / deleted
    final = (
        "convert_s=%.2f delete_us_per_recipient=%.2f vacuum_us_per_recipient=%.2f "
        "drop_us_per_recipient=%.3f ratio=%.0f ratio_outside_the_kernel=%.0f"
        % (convert_s, delete_us, vacuum_us, drop_us, delete_us / drop_us, delete_us / user_us)
    )
    section = (
        "\n## %s — bench/recipient_retention.py batches=%s recipients=%s\n\n%s\n\n"
        "| measure | result |\n|---|---|\n"
        "| fill (SQL, then VACUUM ANALYZE) | %.1f s |\n"
        "| the prune's DELETE of recipients, %s of them, 1000 a statement | %.0f recipients/s "
        "(CPU %.2f µs a recipient, and %.2f µs for the VACUUM of its dead rows) |\n"
        "| `recipient_partitions.convert()` on %s recipients (CHECK validated, then the swap) "
        "| **%.2f s** |\n"
        "| making the partitions ahead (each prune run makes those missing: about one an "
        "interval) | %.1f ms of CPU a partition (%s made) |\n"
        "| a prune that drops a partition of %s recipients (audit count from the "
        "statistics: %s, check under the lock, drop, batch rows): wall, CPU "
        "| %.0f ms, **%.3f µs a recipient** (%.0fx less than the DELETE, %.0fx with its "
        "VACUUM); of which the backend in the kernel %.0f ms (freeing the files), the rest "
        "%.3f µs a recipient (%.0fx) |\n"
        "\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            batches,
            recipients,
            machine_line(machine),
            fill_s,
            deleted,
            deleted / delete_s,
            delete_us,
            vacuum_us,
            left,
            convert_s,
            ahead_ms,
            ahead,
            dropped,
            counted,
            drop_s * 1000,
            drop_us,
            delete_us / drop_us,
            (delete_us + vacuum_us) / drop_us,
            kernel * 1000,
            user_us,
            delete_us / user_us,
            final,
        )
    )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-prune.md"))
    append_results(results, "# Retention benchmark results\n", section)
    print(final)


if __name__ == "__main__":
    main()
