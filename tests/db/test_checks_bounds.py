"""System check E007: numeric settings have bounds that keep the worker and the code working.

Each value below passed ``manage.py check`` and then broke something at runtime
(an OverflowError in a thread or a request, a DataError, a job run twice, a
spinning worker); the values at the bounds work.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core import checks as django_checks
from django.test import override_settings

from scheduler_app.conf import DEFAULTS

LONGEST = "at most 315532800 seconds (3652 days)"

TOO_LARGE = [
    # The lease renewal thread died (OverflowError: timestamp out of range).
    ("LEASE_SECONDS", 3e10, "from 1 to 315532800 seconds (3652 days)"),
    ("LEASE_SECONDS", 1e300, "from 1 to 315532800 seconds (3652 days)"),
    # The alert evaluation thread died.
    ("ALERT_INTERVAL", 1e300, LONGEST),
    # scheduler_health: OverflowError (alerts/store.py).
    ("ALERT_RENOTIFY_AFTER", 1e11, LONGEST),
    # OverflowError in workers.lost_after().
    ("WORKER_LOST_AFTER", 1e300, LONGEST),
    # /metrics answered 500.
    ("METRICS_WINDOW", 1e11, LONGEST),
    # OverflowError in schedule() / schedule_batch() / run_lane.
    ("UNDO_SAFETY_MARGIN", 1e300, LONGEST),
    ("LARGE_BATCH_WINDOW", 1e300, LONGEST),
    ("SEND_CLAIM_SECONDS", 1e300, LONGEST),
    # scheduler_prune: traceback (retention.cutoffs_for).
    ("RETENTION_JOBS_DAYS", 800000, "at most 3652 days"),
    ("RETENTION_ALERTS_DAYS", 1e300, "at most 3652 days"),
    # OverflowError in run_lane.
    ("BREAKER_WINDOW", 10**30, "at most 2147483647"),
    # DataError: bigint out of range.
    ("PRUNE_MAX_ROWS", 2**63, "at most 9223372036854775807"),
    # RuntimeError: can't start new thread.
    ("CONCURRENCY", 10**30, "from 1 to 1000"),
]

TOO_SMALL = [
    # A healthy worker's job was rescued while it ran, and ran again.
    ("LEASE_SECONDS", 0.001, "from 1 to 315532800 seconds (3652 days)"),
    ("LEASE_SECONDS", 0.99, "from 1 to 315532800 seconds (3652 days)"),
    # An idle worker spun at ~80% CPU.
    ("POLL_INTERVAL", 1e-9, "from 0.05 to 315532800 seconds (3652 days)"),
]


def run(**changes):
    with override_settings(SCHEDULER_APP={**settings.SCHEDULER_APP, **changes}):
        return [
            m
            for m in django_checks.run_checks(tags=[django_checks.Tags.compatibility])
            if m.id and m.id.startswith("scheduler_app.")
        ]


@pytest.mark.parametrize(("name", "value", "bound"), TOO_LARGE + TOO_SMALL)
def test_a_value_out_of_bounds_is_e007_naming_the_key_and_the_bound(name, value, bound):
    errors = run(**{name: value})

    assert [(e.id, e.msg) for e in errors] == [
        (
            "scheduler_app.E007",
            "SCHEDULER_APP[%r] must be %s, not %r." % (name, bound, value),
        )
    ]
    assert errors[0].level == django_checks.ERROR
    assert errors[0].hint


@pytest.mark.parametrize(
    "changes",
    [
        {"LEASE_SECONDS": 1, "POLL_INTERVAL": 0.05},
        {"LEASE_SECONDS": 315532800, "ALERT_RENOTIFY_AFTER": 315532800.0},
        {"RETENTION_JOBS_DAYS": 3652, "RETENTION_ALERTS_DAYS": 3652.0},
        {"BREAKER_WINDOW": 2**31 - 1, "CONCURRENCY": 1000},
        # A bigint column: a breaker of five billion rows was valid before E007 existed.
        {"PRUNE_MAX_ROWS": 5_000_000_000},
        {"PRUNE_MAX_ROWS": 2**63 - 1},
        {"UNDO_SAFETY_MARGIN": 0, "RETENTION_JOBS_DAYS": None},
    ],
)
def test_values_at_the_bounds_pass(changes):
    assert run(**changes) == []


def test_a_value_the_key_s_own_check_refuses_is_not_reported_twice():
    """0, negative values and floats for counts are E003's and E004's; E007 only judges
    the size of an otherwise valid value."""
    assert [e.id for e in run(LEASE_SECONDS=0, POLL_INTERVAL=-1, CONCURRENCY=1e300)] == [
        "scheduler_app.E003",
        "scheduler_app.E003",
        "scheduler_app.E004",
    ]


def test_every_numeric_setting_has_a_bound():
    """A numeric setting added later cannot skip the rule."""
    from scheduler_app.bounds import SETTING_BOUNDS, SHARES

    numeric = {
        key
        for key, default in DEFAULTS.items()
        if isinstance(default, int | float) and not isinstance(default, bool)
    }
    assert numeric - set(SETTING_BOUNDS) - set(SHARES) == set()
    assert set(SETTING_BOUNDS) - set(DEFAULTS) == set()


@pytest.mark.django_db
def test_the_largest_accepted_durations_work_where_larger_ones_overflowed():
    import datetime as dt
    import threading

    from scheduler_app import clock, retention, workers
    from scheduler_app.alerts.store import owe_renotifications
    from scheduler_app.bounds import LONGEST_DAYS, LONGEST_SECONDS

    now = clock.now()
    longest = dt.timedelta(seconds=LONGEST_SECONDS)
    assert LONGEST_SECONDS <= threading.TIMEOUT_MAX  # a thread can wait that long
    with override_settings(
        SCHEDULER_APP={
            **settings.SCHEDULER_APP,
            "RETENTION_JOBS_DAYS": LONGEST_DAYS,
            "WORKER_LOST_AFTER": LONGEST_SECONDS,
        }
    ):
        assert retention.cutoffs_for(now)["jobs"] == now - dt.timedelta(days=LONGEST_DAYS)
        assert workers.lost_after() == longest
    assert owe_renotifications(now, longest) == 0
    assert now + longest + longest < dt.datetime.max.replace(tzinfo=dt.UTC)


@pytest.mark.django_db
def test_scheduler_prune_max_rows_has_the_bound_of_prune_max_rows():
    """--max-rows 2**63 was a DataError (bigint out of range) traceback."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as raised:
        call_command("scheduler_prune", "--dry-run", "--max-rows", str(2**63))

    assert str(raised.value) == (
        "Error: argument --max-rows: must be from 1 to 9223372036854775807, got %s" % 2**63
    )
