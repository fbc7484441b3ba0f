"""Send claims are compared with the database's clock: a host whose clock is off steals nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from scheduler_app import clock
from scheduler_app.db import backend
from scheduler_app.models import LaneProgress, Recipient, SendBatch
from scheduler_app.sends import limiter
from tests.sends.helpers import run_lane_now

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


@pytest.fixture
def host_clock_ahead(monkeypatch):
    """This host's clock runs a minute ahead of the database's."""
    monkeypatch.setattr(clock, "now", lambda: timezone.now() + dt.timedelta(minutes=1))


def test_a_host_whose_clock_runs_ahead_does_not_take_over_a_live_claim(
    customer, make_batch, host_clock_ahead
):
    customer("ann@example.com", "Ann")
    customer("bob@example.com", "Bob")
    batch = make_batch(scheduled_at=timezone.now() - dt.timedelta(minutes=5))
    run_lane_now(batch)  # freezes the audience; everyone is sent
    SendBatch.objects.filter(pk=batch.pk).update(status="sending")
    LaneProgress.objects.filter(batch=batch).delete()
    Recipient.objects.filter(batch=batch).update(
        status="pending", attempts=0, next_attempt_at=timezone.now() - dt.timedelta(minutes=5)
    )
    claimed = backend().claim_recipients(
        batch_id=batch.pk, claim="live-lane", limit=10, claim_for=dt.timedelta(seconds=30)
    )
    assert len(claimed) == 2

    run = run_lane_now(batch)

    # By this host's clock the live lane's claim ran out 30 s ago; by the database's it
    # has 30 s to go: nothing is taken over, the lane waits for the claim.
    assert run.retry is not None
    assert set(Recipient.objects.filter(batch=batch).values_list("claimed_by", "attempts")) == {
        ("live-lane", 0)
    }
    until = Recipient.objects.filter(batch=batch).values_list("claimed_until", flat=True)[0]
    assert dt.timedelta(seconds=25) < until - timezone.now() <= dt.timedelta(seconds=30)


def test_the_rate_limit_counts_tokens_by_the_database_clock(monkeypatch):
    """Two hosts a second apart share a 10/s limit: each reservation is 0.1 s after the last,
    whichever host makes it (by host clocks, the host ahead found ten tokens unearned)."""
    limiter.set_rate("esp", 10)
    waits = []
    for skew in (0.0, 1.0, 0.0, 1.0):
        monkeypatch.setattr(
            clock, "now", lambda skew=skew: timezone.now() + dt.timedelta(seconds=skew)
        )
        waits.append(limiter.reserve("esp"))
    # The bucket starts empty: the four tokens are due 0.1, 0.2, 0.3 and 0.4 s from now.
    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=0.05)
