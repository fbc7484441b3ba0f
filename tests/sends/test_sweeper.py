"""The lane sweeper: a batch that should be sending but has no lane gets its lanes back."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from scheduler_app import clock
from scheduler_app.db import backend
from scheduler_app.models import Job, Recipient, SendBatch
from scheduler_app.sends.batches import schedule_batch
from scheduler_app.sends.start import start_sending
from scheduler_app.sends.sweeper import revive_stranded_batches
from scheduler_app.sends.task_names import SEND_BATCH_TASK
from tests.helpers import wait_until
from tests.sends.helpers import run_lane_job, run_lane_now
from tests.testapp.models import ProviderBehaviour

RELAX = ("audience_within_limit", "dry_run_clean", "seed_sent")


@pytest.fixture
def two_customers(customer):
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")


def lanes(batch: SendBatch) -> list[str]:
    return sorted(
        Job.objects.filter(
            task_name=SEND_BATCH_TASK, unique_key__startswith="batch:%s:lane:" % batch.pk
        ).values_list("status", flat=True)
    )


def fail_lanes(batch: SendBatch) -> None:
    """Stage what 25 crashes did to every lane: each failed for good."""
    Job.objects.filter(task_name=SEND_BATCH_TASK).update(status=Job.Status.FAILED)


@pytest.mark.django_db
def test_a_sending_batch_without_lanes_gets_them_back_once(make_batch, two_customers):
    batch = make_batch()
    start_sending(batch.pk)  # frozen and sending, but without a lane
    assert lanes(batch) == []

    assert revive_stranded_batches() == [batch.pk]
    assert lanes(batch) == ["pending", "pending"]
    assert revive_stranded_batches() == []  # it has lanes now
    assert lanes(batch) == ["pending", "pending"]

    run_lane_now(batch)
    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 2)


@pytest.mark.django_db
def test_a_batch_whose_lanes_all_failed_is_revived_and_completes(make_batch, two_customers):
    batch = schedule_batch(make_batch(status=SendBatch.Status.DRAFT), relax=RELAX)
    fail_lanes(batch)
    SendBatch.objects.filter(pk=batch.pk).update(status="sending", started_at=clock.now())

    assert revive_stranded_batches() == [batch.pk]
    assert lanes(batch) == ["failed", "failed", "pending", "pending"]


@pytest.mark.django_db
def test_a_batch_that_lost_one_lane_gets_one_back(make_batch, two_customers):
    batch = schedule_batch(make_batch(status=SendBatch.Status.DRAFT), relax=RELAX)
    SendBatch.objects.filter(pk=batch.pk).update(status="sending", started_at=clock.now())
    lost = Job.objects.filter(task_name=SEND_BATCH_TASK).first()
    Job.objects.filter(pk=lost.pk).update(status=Job.Status.FAILED)

    assert revive_stranded_batches() == [batch.pk]
    assert lanes(batch) == ["failed", "pending", "pending"]
    assert revive_stranded_batches() == []


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["draft", "paused", "cancelled", "completed", "failed"])
def test_batches_that_must_not_send_are_left_alone(make_batch, two_customers, status):
    make_batch(status=status, started_at=clock.now())

    assert revive_stranded_batches() == []
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_scheduled_batch_is_revived_only_after_its_undo_window_and_margin(
    make_batch, two_customers, settings
):
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "UNDO_SAFETY_MARGIN": 2}
    with clock.frozen_clock(clock.now()) as frozen:
        batch = schedule_batch(
            make_batch(status=SendBatch.Status.DRAFT, undo_window=dt.timedelta(seconds=30)),
            relax=RELAX,
        )
        fail_lanes(batch)

        frozen.advance(dt.timedelta(seconds=31))  # window over, margin not
        assert revive_stranded_batches() == []
        frozen.advance(dt.timedelta(seconds=2))
        assert revive_stranded_batches() == [batch.pk]

    assert lanes(batch) == ["failed", "failed", "pending", "pending"]


@pytest.mark.django_db
def test_a_scheduled_batch_is_not_revived_before_its_send_time(make_batch, two_customers):
    batch = schedule_batch(
        make_batch(status="draft", scheduled_at=clock.now() + dt.timedelta(hours=1)),
        relax=RELAX,
    )
    fail_lanes(batch)

    assert revive_stranded_batches() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres_only
def test_sweepers_racing_give_a_batch_its_lanes_exactly_once(make_batch, two_customers):
    batch = make_batch(status=SendBatch.Status.SENDING, started_at=clock.now())
    barrier = threading.Barrier(4)
    revived: list[list[int]] = []

    def sweep() -> None:
        try:
            barrier.wait(timeout=10)
            revived.append(revive_stranded_batches())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(revived) == [[], [], [], [batch.pk]]
    assert lanes(batch) == ["pending", "pending"]


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_two_lanes_of_a_batch_side_by_side(make_batch, two_customers, settings):
    """A second lane of a batch in the process that runs one sends beside it: more lanes
    than processes cost nothing (they used to be deferred every 2 s, doing nothing)."""
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "SEND_CHUNK_SIZE": 1}
    batch = make_batch()
    ProviderBehaviour.objects.create(address="", answer="ok", delay=0.5)
    first = threading.Thread(target=lambda: (run_lane_now(batch), connection.close()))
    first.start()
    try:
        wait_until(
            lambda: (
                Recipient.objects.filter(batch=batch, attempts=1).exists() or not first.is_alive()
            ),
            timeout=10,
        )
        second = run_lane_job(batch)
    finally:
        first.join(timeout=30)
    assert second == {"sent": 1}
    batch.refresh_from_db()
    assert (batch.status, batch.sent) == ("completed", 2)


@pytest.mark.django_db
def test_a_lane_that_finds_the_rest_claimed_by_another_lane_looks_again_soon(
    make_batch, two_customers
):
    """The other lane sends its chunk in about a second and claims the next: a lane that
    slept until that chunk's claim expired (a minute) left the other to send alone."""
    batch = make_batch()
    start_sending(batch.pk)
    claimed = backend().claim_recipients(
        batch_id=batch.pk, claim="other-lane", limit=10, claim_for=dt.timedelta(minutes=1)
    )
    assert len(claimed) == 2

    run = run_lane_now(batch)

    assert run.retry is not None
    assert run.retry.reason == "waiting for recipients due later"
    assert run.retry.delay == dt.timedelta(seconds=2)
