"""Bulk sends driven by real runworker subprocesses: batches, workers and what the provider saw."""

from __future__ import annotations

import itertools
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import wait_until
from tests.processes.conftest import WorkerProcess, _process_state, start_worker  # noqa: F401
from tests.testapp.models import Customer, ProviderCall

#: The checklist items a test batch skips: it is sent without a dry-run or seed send.
RELAX = ("dry_run_clean", "seed_sent", "audience_within_limit")
#: Recipients a lane claims at once (SCHEDULER_APP['SEND_CHUNK_SIZE'], the default).
CHUNK = 100
#: Dispatch jobs per batch (SCHEDULER_APP['SEND_LANES'], the default).
LANES = 2


class GuaranteeBroken(AssertionError):
    """A send guarantee did not hold (kept apart from setup failures such as timeouts)."""


def check(condition: object, message: str) -> None:
    """Raise GuaranteeBroken with ``message`` unless ``condition`` holds."""
    if not condition:
        raise GuaranteeBroken(message)


def make_customers(count: int) -> None:
    """Create ``count`` customers with distinct addresses and names."""
    Customer.objects.bulk_create(
        [
            Customer(email="c%s@example.com" % n, first_name="Name%s" % n, plan="pro")
            for n in range(count)
        ],
        batch_size=5000,
    )


def make_batch(count: int, **fields) -> SendBatch:
    """Return a scheduled batch to ``count`` new customers through the fake provider."""
    make_customers(count)
    batch = SendBatch.objects.create(
        name="process test",
        subject_template="Hello {{ first_name|default:'there' }}",
        text_template="Hi {{ first_name }}, your plan is {{ plan }}.",
        audience="tests.customers",
        expected_max_audience=count,
        scheduled_at=timezone.now(),
        timezone="UTC",
        provider="fake",
        **{"rate_limit_key": "fake", **fields},
    )
    return schedule_batch(batch, relax=RELAX)


def calls_by_key(batch: SendBatch) -> Counter[str]:
    """Return how many provider calls each idempotency key of ``batch`` got."""
    rows = (
        ProviderCall.objects.filter(idempotency_key__startswith="%s:" % batch.pk)
        .values_list("idempotency_key")
        .annotate(n=Count("id"))
    )
    return Counter(dict(rows))


def expected_keys(batch: SendBatch) -> set[str]:
    """Return ``<batch>:<recipient key>`` for every customer (the audience's key is the id)."""
    return {"%s:%s" % (batch.pk, pk) for pk in Customer.objects.values_list("pk", flat=True)}


def assert_completed_once(batch: SendBatch, count: int) -> None:
    """Every recipient has exactly one sent marker and the batch completed with ``count`` sent."""
    batch.refresh_from_db()
    assert (batch.status, batch.total, batch.sent, batch.failed, batch.skipped) == (
        SendBatch.Status.COMPLETED,
        count,
        count,
        0,
        0,
    ), batch.status_reason
    markers = Recipient.objects.filter(batch=batch, is_seed=False)
    assert markers.count() == count
    assert markers.filter(status=Recipient.Status.SENT, sent_at__isnull=False).count() == count
    assert not (markers.values("recipient_key").annotate(n=Count("id")).filter(n__gt=1).exists())
    wrong_ids = markers.exclude(provider_message_id__startswith="fake-%s:" % batch.pk).count()
    assert wrong_ids == 0


def lanes_unfinished(batch: SendBatch) -> int:
    """Return how many dispatch jobs of ``batch`` are still pending or running."""
    return (
        Job.objects.unfinished()
        .filter(task_name=SEND_BATCH_TASK, unique_key__startswith="batch:%s:lane:" % batch.pk)
        .count()
    )


def batch_status(batch: SendBatch) -> str:
    return SendBatch.objects.filter(pk=batch.pk).values_list("status", flat=True).get()


@pytest.fixture
def send_worker(start_worker) -> Iterator[Callable[..., WorkerProcess]]:  # noqa: F811
    """Return a function that starts a runworker for sends and waits for it.

    One job at a time per worker unless ``concurrency`` says otherwise; a short
    lease and claim (SEND_CLAIM_SECONDS via tests/settings.py's environment
    variable) so that a killed worker's lane and chunk come back in seconds.
    """

    def start(
        *,
        claim_seconds: float = 3.0,
        lease: float = 3.0,
        concurrency: int = 1,
        window: int = 1,
        wait: bool = True,
        env: dict[str, str] | None = None,
    ):
        name = "sends-worker-%s" % next(numbers)
        worker = start_worker(
            "--concurrency",
            str(concurrency),
            "--no-scheduler",
            "--lease",
            str(lease),
            "--poll-interval",
            "0.2",
            env={
                "SCHEDULER_SEND_CLAIM_SECONDS": str(claim_seconds),
                "SCHEDULER_SEND_WINDOW": str(window),
                # Each provider call commits a ProviderCall row; without this every
                # one waits for a WAL flush (~4 ms here). A SIGKILLed client loses
                # nothing it committed either way: only a server crash could.
                "PGOPTIONS": "-c synchronous_commit=off",
                # The lanes' own statements too (they set synchronous_commit = on otherwise).
                "SCHEDULER_SEND_MARKER_SYNCHRONOUS_COMMIT": "false",
                # Names its PostgreSQL connections, so freeze() can see their state.
                "PGAPPNAME": name,
                **(env or {}),
            },
        )
        worker.app_name = name
        if wait:
            worker.wait_for_output("worker started")
        return worker

    numbers = itertools.count()
    yield start


def assert_stays(predicate: Callable[[], object], *, seconds: float, message: str) -> None:
    """Poll ``predicate`` for ``seconds`` (an observation window); fail as soon as it is false."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.05)
    assert predicate(), message


def call_count(batch: SendBatch) -> int:
    """Return how many provider calls ``batch`` made so far."""
    return ProviderCall.objects.filter(idempotency_key__startswith="%s:" % batch.pk).count()


def freeze(worker: WorkerProcess) -> None:
    """SIGSTOP ``worker`` at a moment it holds no lock another worker could wait for.

    On PostgreSQL every connection of the worker (named by PGAPPNAME) must be
    idle, outside a transaction: the fake provider locks its ProviderBehaviour
    rows, and a worker frozen holding one would stall the others. On SQLite
    WorkerProcess.pause() waits for the write lock to be free.
    """
    if connection.vendor != "postgresql":
        worker.pause()
        return
    for _ in range(200):
        worker.signal(signal.SIGSTOP)
        wait_until(lambda: _process_state(worker.pid) == "T", timeout=5, message="SIGSTOP")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = %s AND state <> 'idle'",
                [worker.app_name],
            )
            if cursor.fetchone()[0] == 0:
                return
        worker.resume()
        time.sleep(0.01)  # let it leave its transaction before trying again
    raise AssertionError("could not stop the worker outside a transaction")
