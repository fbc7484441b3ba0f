#!/usr/bin/env python
"""What partitioned recipients cost a lane: the CPU of its statements per recipient on a
recipient table that is one table, and on one partitioned by batch with many partitions.

Run from the repository root, alone on the machine::

    python bench/recipient_statements.py

On a database of its own (BENCH_DATABASE_URL, default ``bench_recipient_statements``) it
freezes a batch of BENCH_RECIPIENTS (20000) pending recipients and sends them as a lane
with per-recipient markers does, without a provider: claim a chunk of 100, then for each
recipient one ``mark_and_begin()`` (the prepared MARK_ONE_AND_BEGIN: the previous one's
marker and this one's charge), taking the CPU time of this process and its PostgreSQL
backend per recipient. Three tables, in this order: the recipient table as one table;
partitioned by batch (``recipient_partitions.convert()``) with BENCH_PARTITIONS (40)
partitions, the batch in the last; and the same with the batch in the overflow partition.
The last stdout line is ``plain_us=<n> partitioned_us=<n> overflow_us=<n>``.

Environment: BENCH_RECIPIENTS, BENCH_PARTITIONS, BENCH_DATABASE_URL, BENCH_RESULTS
(default bench/results-sends.md), BENCH_REVISION.
"""

from __future__ import annotations

import datetime as dt
import os
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

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_recipient_statements"
CHUNK = 100
CLAIM_FOR = dt.timedelta(minutes=5)

RECIPIENTS = """
INSERT INTO scheduler_app_recipient (batch_id, recipient_key, address, timezone, context,
    is_seed, status, attempts, next_attempt_at, claimed_by, provider_message_id, last_error)
SELECT %s, 'customer-' || g, 'customer' || g || '@example.com', '', '{"first_name": "Ada"}',
       false, 'pending', 0, now() - interval '1 minute', '', '', ''
FROM generate_series(1, %s) AS g
"""


def frozen_batch(recipients: int) -> int:
    """Return a sending batch with ``recipients`` pending recipients, analyzed."""
    from django.db import connection

    from scheduler_app.models import SendBatch

    batch = SendBatch.objects.create(
        name="news",
        subject_template="s",
        text_template="t",
        audience="bench",
        expected_max_audience=recipients,
        status=SendBatch.Status.SENDING,
        total=recipients,
    )
    with connection.cursor() as cursor:
        cursor.execute(RECIPIENTS, [batch.pk, recipients])
        cursor.execute("ANALYZE scheduler_app_recipient")
    return batch.pk


def lane_cpu_us(batch_id: int) -> float:
    """Send the batch's recipients as a lane does, without a provider; return the CPU
    microseconds per recipient (this thread and its backend)."""
    from scheduler_app import clock
    from scheduler_app.db import postgresql as pg

    sent = 0
    cpu = cpu_meter()
    while True:
        rows = pg.claim_recipients(
            batch_id=batch_id, claim="bench", limit=CHUNK, claim_for=CLAIM_FOR
        )
        if not rows:
            break
        mark = None
        for row in rows:
            pg.mark_and_begin(
                recipient_ids=[row[0]],
                claim="bench",
                claim_for=CLAIM_FOR,
                batch_id=batch_id,
                marks=[mark] if mark else [],
            )
            mark = (row[0], "sent", clock.now(), "m-%s" % row[0], None, None, 0)
            sent += 1
        pg.mark_recipients([mark], claim="bench", batch_id=batch_id)
    return cpu() * 1e6 / sent


def main() -> None:
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    os.environ["SCHEDULER_TEST_PLAIN_JOB_TABLE"] = "1"  # one table each, converted below
    setup_django(url)
    migrate()
    from django.db import connection
    from django.test import override_settings

    from scheduler_app import recipient_partitions

    machine = machine_description(("shared_buffers",), os.environ.get("BENCH_REVISION", ""))
    recipients = env_int("BENCH_RECIPIENTS", 20_000)
    wanted = env_int("BENCH_PARTITIONS", 40)

    plain_us = lane_cpu_us(frozen_batch(recipients))

    with override_settings(SCHEDULER_APP={"RETENTION_BATCHES_DAYS": 30}):
        recipient_partitions.convert()
        while len(recipient_partitions.range_partitions()) < wanted:
            last = recipient_partitions.range_partitions()[-1]
            with connection.cursor() as cursor:
                cursor.execute("SELECT setval('scheduler_app_sendbatch_id_seq', %s)", [last.end])
            recipient_partitions.ensure_partitions()
    made = recipient_partitions.range_partitions()
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('scheduler_app_sendbatch_id_seq', %s)", [made[-1].first - 1])
    in_partition = frozen_batch(recipients)
    assert made[-1].first <= in_partition < made[-1].end
    partitioned_us = lane_cpu_us(in_partition)

    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('scheduler_app_sendbatch_id_seq', %s)", [made[-1].end + 1])
    overflow_us = lane_cpu_us(frozen_batch(recipients))

    final = "plain_us=%.1f partitioned_us=%.1f overflow_us=%.1f" % (
        plain_us,
        partitioned_us,
        overflow_us,
    )
    section = (
        "\n## %s — bench/recipient_statements.py recipients=%s partitions=%s\n\n%s\n\n"
        "A lane's statements without a provider (claim 100, then one prepared mark-and-begin "
        "a recipient), CPU of the process and its PostgreSQL backend per recipient:\n\n"
        "| recipient table | CPU a recipient |\n|---|---|\n"
        "| one table | **%.1f µs** |\n"
        "| partitioned by batch, %s partitions, the batch in the last | **%.1f µs** |\n"
        "| partitioned by batch, the batch in the overflow partition | **%.1f µs** |\n"
        "\nFinal line: `%s`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            recipients,
            len(made),
            machine_line(machine),
            plain_us,
            len(made),
            partitioned_us,
            overflow_us,
            final,
        )
    )
    results = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-sends.md"))
    append_results(results, "# bench/sends.py results\n", section)
    print(final)


if __name__ == "__main__":
    main()
