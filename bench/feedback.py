#!/usr/bin/env python
"""Provider feedback on a large recipient table: tying a bounce back to its recipient.

Run from the repository root::

    python bench/feedback.py

It drops and re-creates its own PostgreSQL database (``bench_feedback`` unless
BENCH_DATABASE_URL names another), migrates it, and stores one completed batch of
BENCH_RECIPIENTS (1000000) sent recipients, each with a provider message id, as a
past send leaves them. Then it records BENCH_EVENTS (300) hard bounces that name
only a provider message id, as an ESP's webhook does (Anymail's ``message_id``),
each through ``scheduler_app.feedback.suppressions.record_event()``, for recipients
spread over the whole table, and reports the time per event (p50 / p99) and the
backend's CPU per event. The EXPLAIN of the look-up by message id says which plan
it takes.

Environment: BENCH_RECIPIENTS, BENCH_EVENTS, BENCH_DATABASE_URL, BENCH_RESULTS
(default bench/results-sends.md), BENCH_REVISION (the revision to name). The last
stdout line is ``event_p50_ms=<n> event_p99_ms=<n> backend_ms=<n>``.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import statistics
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

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_feedback"


#: The provider message id of the bench's ``n``-th recipient (an ESP's form), around ``n``
#: padded to eight digits; store_sent_batch() builds the same in SQL.
MESSAGE_ID = ("0100018c-", "-bench@email.example.com")


def message_id(n: int) -> str:
    """The provider message id the bench gives its ``n``-th recipient."""
    return "%s%08d%s" % (MESSAGE_ID[0], n, MESSAGE_ID[1])


def store_sent_batch(recipients: int) -> int:
    """Store a completed batch of ``recipients`` sent recipients; return its id."""
    from django.db import connection

    from scheduler_app.models import Recipient, SendBatch

    batch = SendBatch.objects.create(
        name="bench feedback",
        subject_template="News",
        text_template="Hi",
        audience="tests.customers",
        expected_max_audience=recipients,
        provider="noop",
        rate_limit_key="noop",
        status=SendBatch.Status.COMPLETED,
        total=recipients,
        sent=recipients,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO %s (batch_id, recipient_key, address, timezone, context, is_seed, "
            "status, attempts, sent_at, claimed_by, provider_message_id, last_error) "
            "SELECT %%s, n::text, 'customer' || n || '@example.com', '', '{}', false, 'sent', "
            "1, now(), '', %%s || lpad(n::text, 8, '0') || %%s, '' "
            "FROM generate_series(1, %%s) AS n" % Recipient._meta.db_table,
            [batch.pk, *MESSAGE_ID, recipients],
        )
        cursor.execute("VACUUM ANALYZE %s" % Recipient._meta.db_table)
    return batch.pk


def lookup_plan(n: int) -> str:
    """The plan of the look-up by message id (scheduler_app.feedback.suppressions)."""
    from scheduler_app.models import Recipient

    ids = [message_id(n), "<%s>" % message_id(n)]
    queryset = Recipient.objects.filter(provider_message_id__in=ids).order_by("-pk")[:1]
    return queryset.explain(analyze=True)


def record_bounces(recipients: int, events: int) -> dict:
    """Record ``events`` hard bounces by message id; return latencies and backend CPU."""
    from django.db import connection

    from scheduler_app.feedback.suppressions import Feedback, record_event

    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    picks = random.Random(14).sample(range(1, recipients + 1), events)
    latencies = []
    cpu0 = process_cpu(backend)
    for n, pick in enumerate(picks):
        event = Feedback(
            event_id="bench-%d" % n,
            kind="hard_bounce",
            source="anymail",
            message_id=message_id(pick),
        )
        started = time.perf_counter()
        row = record_event(event)
        latencies.append((time.perf_counter() - started) * 1000)
        if row is None or row.recipient_id is None:
            raise SystemExit("event %s was not tied back to its recipient" % n)
    cpu = process_cpu(backend) - cpu0
    return {
        "p50": statistics.median(latencies),
        "p99": statistics.quantiles(latencies, n=100)[98],
        "backend_ms": cpu * 1000 / events,
    }


def main() -> None:
    recipients = env_int("BENCH_RECIPIENTS", 1_000_000)
    events = env_int("BENCH_EVENTS", 300)
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    setup_django(url)
    migrate()
    machine = machine_description(("shared_buffers",), os.environ.get("BENCH_REVISION", ""))
    started = time.perf_counter()
    store_sent_batch(recipients)
    stored_s = time.perf_counter() - started
    plan = lookup_plan(recipients // 2)
    result = record_bounces(recipients, events)
    section = (
        "\n## %s — bench/feedback.py recipients=%s events=%s\n\n%s\n\n"
        "| measure | result |\n|---|---|\n"
        "| storing the sent batch (INSERT ... SELECT, VACUUM ANALYZE) | %.1f s |\n"
        "| a hard bounce by provider message id, record_event() | **p50 %.2f ms, p99 %.2f ms** |\n"
        "| its backend's CPU per event | %.2f ms |\n\n"
        "The look-up by message id:\n\n```\n%s\n```\n\n"
        "Final line: `event_p50_ms=%.2f event_p99_ms=%.2f backend_ms=%.2f`\n"
        % (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            recipients,
            events,
            machine_line(machine),
            stored_s,
            result["p50"],
            result["p99"],
            result["backend_ms"],
            plan,
            result["p50"],
            result["p99"],
            result["backend_ms"],
        )
    )
    results_path = Path(os.environ.get("BENCH_RESULTS", REPO / "bench" / "results-sends.md"))
    append_results(results_path, "# Send benchmark results\n", section)
    print(
        "event_p50_ms=%.2f event_p99_ms=%.2f backend_ms=%.2f"
        % (result["p50"], result["p99"], result["backend_ms"])
    )


if __name__ == "__main__":
    main()
