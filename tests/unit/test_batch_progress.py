"""A batch's send rate is its sent count over its sending time, which ends when it finishes."""

from __future__ import annotations

import datetime as dt

from scheduler_app.clock import frozen_clock
from scheduler_app.models import SendBatch
from scheduler_app.sends.batches import batch_progress

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def test_the_rate_of_a_finished_batch_stays_what_it_was_at_the_finish():
    batch = SendBatch(
        status=SendBatch.Status.COMPLETED,
        total=476,
        sent=476,
        started_at=T0,
        finished_at=T0 + dt.timedelta(seconds=10),
    )
    with frozen_clock(T0 + dt.timedelta(seconds=10)):
        assert batch_progress(batch)["rate"] == 47.6
    with frozen_clock(T0 + dt.timedelta(minutes=4)):
        assert batch_progress(batch)["rate"] == 47.6


def test_the_rate_of_a_sending_batch_runs_to_now():
    batch = SendBatch(status=SendBatch.Status.SENDING, total=1000, sent=100, started_at=T0)
    with frozen_clock(T0 + dt.timedelta(seconds=20)):
        assert batch_progress(batch)["rate"] == 5.0
