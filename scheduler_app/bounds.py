"""The range of every numeric setting: one definition for system check E007 and runworker.

Beyond these bounds the code breaks at runtime rather than at ``manage.py check``:
a wait longer than ``threading.TIMEOUT_MAX`` kills the thread that waits
(OverflowError), a duration added to the current time runs past year 9999, an
integer past PostgreSQL's ``integer`` is a DataError, and thousands of job threads
cannot be started. Below the least values a guarantee fails instead: a lease
renewed every third of a millisecond expires under a healthy worker (its job runs
twice), and an idle worker polling every nanosecond spins a CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import threading
from collections.abc import Callable
from typing import Any

#: The longest duration anything accepts: a schedule's interval, grace, jitter or alert
#: target (models.schedules), a setting in seconds or days. Ten years: far past any
#: sensible lease, interval or retention, and now plus a few of them is a valid datetime.
LONGEST_DURATION = dt.timedelta(days=3652)

#: The shortest interval of a fixed-rate or fixed-delay schedule: the scheduler looks once
#: a second (SCHEDULER_INTERVAL), and a shorter one records occurrences it never runs.
SHORTEST_INTERVAL = dt.timedelta(seconds=1)

#: Settings in seconds: ten years, or less where a thread cannot wait that long.
LONGEST_SECONDS = int(min(LONGEST_DURATION.total_seconds(), threading.TIMEOUT_MAX))
#: Settings in days (RETENTION_*_DAYS): the same ten years; None keeps forever.
LONGEST_DAYS = LONGEST_DURATION.days
#: Integer settings: PostgreSQL's ``integer``, the smallest column any of them reaches
#: (jobs' max_attempts, batches' breaker_window, schedules' declared_version).
LARGEST_INTEGER = 2**31 - 1
#: PRUNE_MAX_ROWS: PruneRun.max_rows is a bigint column (a table can hold billions of rows).
LARGEST_BIGINT = 2**63 - 1
#: Jobs one worker runs at once, each in a thread with its own database connection.
MOST_CONCURRENCY = 1000
#: Provider calls one lane keeps in flight, each on a sender thread of its own.
MOST_SEND_WINDOW = 1000
#: The lease is renewed every third of it: a 1 s lease leaves 2/3 s for a renewal's
#: round trip and commit before a rescuer may take a running job away.
SHORTEST_LEASE = 1.0
#: Each idle wake-up queries the database: measured on SQLite, an idle worker polling
#: every 0.05 s uses ~4% of a CPU (0.01 s: ~17%; 1e-9 s: ~80%).
SHORTEST_POLL_INTERVAL = 0.05


@dataclasses.dataclass(frozen=True)
class Bound:
    """The range of a number, ``least`` and ``most`` included, and what breaks outside it."""

    most: float
    why: str
    least: float = 0
    unit: str = ""
    #: An integer setting: a float is its own check's business (E004, E055, ...), not this.
    integer: bool = False

    def describe(self) -> str:
        """Return e.g. 'at most 3652 days' or 'from 1 to 315532800 seconds (3652 days)'."""
        most = _show(self.most) + (" " + self.unit if self.unit else "")
        if self.unit == "seconds":
            most += " (%s days)" % _show(self.most / 86400)
        if self.least > 0:
            return "from %s to %s" % (_show(self.least), most)
        return "at most %s" % most

    def allows(self, value: float) -> bool:
        return self.least <= value <= self.most


def _show(number: float) -> str:
    """Return ``number`` without a pointless '.0', or a long float rounded."""
    return str(int(number)) if number == int(number) else "%g" % number


SECONDS = Bound(
    LONGEST_SECONDS,
    unit="seconds",
    why="Longer durations overflow Python's clocks and dates (OverflowError at runtime); "
    "ten years is the longest duration scheduler_app accepts anywhere.",
)
DAYS = Bound(
    LONGEST_DAYS,
    unit="days",
    why="A cutoff further back overflows the date arithmetic of scheduler_prune; use None "
    "to keep rows forever.",
)
INTEGER = Bound(
    LARGEST_INTEGER,
    integer=True,
    why="Larger numbers do not fit the database's integer columns and queries.",
)

#: Numeric settings that are shares: their own checks keep them within 0 and 1.
SHARES = ("BREAKER_THRESHOLD", "COMPLAINT_RATE_LIMIT", "BOUNCE_RATE_LIMIT", "FAILING_RATE")

#: Every other numeric setting's bound (a test keeps it complete against conf.DEFAULTS).
SETTING_BOUNDS: dict[str, Bound] = {
    "CONCURRENCY": Bound(
        MOST_CONCURRENCY,
        least=1,
        integer=True,
        why="Each job a worker runs at once is a thread with its own database connection; "
        "run more workers instead.",
    ),
    "CLAIM_BATCH_SIZE": dataclasses.replace(INTEGER, least=1),
    "POLL_INTERVAL": dataclasses.replace(
        SECONDS,
        least=SHORTEST_POLL_INTERVAL,
        why="Each time an idle worker wakes it queries the database: a shorter interval spins "
        "a CPU. On PostgreSQL, NOTIFY wakes a worker for new jobs anyway.",
    ),
    "LEASE_SECONDS": dataclasses.replace(
        SECONDS,
        least=SHORTEST_LEASE,
        why="The worker renews its leases every third of the lease: a shorter lease can "
        "expire under a healthy worker, and its running job is run again.",
    ),
    "SHUTDOWN_TIMEOUT": SECONDS,
    "DATABASE_UNAVAILABLE_TIMEOUT": SECONDS,
    "SUMMARY_INTERVAL": SECONDS,
    "UNDO_SAFETY_MARGIN": SECONDS,
    "SCHEDULES_VERSION": INTEGER,
    "SCHEDULER_INTERVAL": SECONDS,
    "SEND_LANES": INTEGER,
    "SEND_WINDOW": Bound(
        MOST_SEND_WINDOW,
        least=1,
        integer=True,
        why="Each call in flight is a sender thread of the lane with its own provider "
        "connection; run more lanes instead.",
    ),
    "SEND_CHUNK_SIZE": INTEGER,
    "SEND_CLAIM_SECONDS": SECONDS,
    "RECIPIENT_MAX_ATTEMPTS": INTEGER,
    "BREAKER_WINDOW": INTEGER,
    "PROGRESS_LOG_EVERY": INTEGER,
    "LARGE_BATCH": INTEGER,
    "LARGE_BATCH_WINDOW": SECONDS,
    "DRY_RUN_SHORT_BODY": INTEGER,
    "DEFAULT_MAX_ATTEMPTS": INTEGER,
    "UNKNOWN_TASK_GRACE": SECONDS,
    "UNSUBSCRIBE_RATE_LIMIT": INTEGER,
    "SOFT_BOUNCE_LIMIT": INTEGER,
    "SOFT_BOUNCE_WINDOW": SECONDS,
    "FEEDBACK_MIN_SENT": INTEGER,
    "CELERY_MAX_IN_FLIGHT": INTEGER,
    "CELERY_MAX_BROKER_WAIT": SECONDS,
    "CELERY_JOBS_PER_MESSAGE": INTEGER,
    "ALERT_INTERVAL": SECONDS,
    "ALERT_RENOTIFY_AFTER": SECONDS,
    "ALERT_RESOLVE_AFTER": SECONDS,
    "OVERDUE_AFTER": SECONDS,
    "FAILING_WINDOW": SECONDS,
    "WORKER_HEARTBEAT_INTERVAL": SECONDS,
    "WORKER_LOST_AFTER": SECONDS,
    "STALE_SEND_AFTER": SECONDS,
    "STALLED_SEND_AFTER": SECONDS,
    "METRICS_CACHE_SECONDS": SECONDS,
    "METRICS_WINDOW": SECONDS,
    "METRICS_MAX_BATCHES": INTEGER,
    "RETENTION_JOBS_DAYS": DAYS,
    "RETENTION_OCCURRENCES_DAYS": DAYS,
    "RETENTION_CONTROL_EVENTS_DAYS": DAYS,
    "RETENTION_RECIPIENT_CONTEXT_DAYS": DAYS,
    "RETENTION_BATCHES_DAYS": DAYS,
    "RETENTION_DRY_RUN_REPORTS_DAYS": DAYS,
    "RETENTION_WORKERS_DAYS": DAYS,
    "RETENTION_ALERTS_DAYS": DAYS,
    "PRUNE_BATCH_SIZE": INTEGER,
    "PRUNE_MAX_ROWS": dataclasses.replace(
        INTEGER,
        most=LARGEST_BIGINT,
        why="Larger numbers do not fit the prune log's bigint column.",
    ),
    "HISTORY_PARTITION_MINUTES": INTEGER,
    "HISTORY_PARTITIONS_AHEAD": INTEGER,
    "OCCURRENCE_PARTITION_DAYS": INTEGER,
}


def out_of_bounds(name: str, value: Any) -> Bound | None:
    """Return the bound a valid-looking ``value`` of setting ``name`` breaks, or None.

    Only finite numbers above 0 (integers, for an integer setting) are judged: the type,
    the sign, None and NaN are each setting's own check, so a value gets one error, not
    two.
    """
    bound = SETTING_BOUNDS.get(name)
    if (
        bound is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
        or (bound.integer and not isinstance(value, int))
    ):
        return None
    return None if bound.allows(value) else bound


def positive_int(setting: str) -> Callable[[str], int]:
    """Return an argparse type for a command option that stands for SCHEDULER_APP[setting]:
    an integer within the setting's bound, the one system check E007 applies to it."""
    # Counts start at 1 on the command line: no option stands for "none".
    bound = dataclasses.replace(
        SETTING_BOUNDS[setting], least=max(1, SETTING_BOUNDS[setting].least)
    )

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not an integer" % value) from None
        _check_bound(bound, number, value)
        return number

    return parse


def positive_float(setting: str) -> Callable[[str], float]:
    """Return an argparse type for an option that stands for SCHEDULER_APP[setting]: a
    finite number above 0 within the setting's bound (check E007's)."""
    bound = SETTING_BOUNDS[setting]

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a number" % value) from None
        if not math.isfinite(number):
            raise argparse.ArgumentTypeError("must be a finite number, got %r" % value)
        _check_bound(bound, number, value)
        return number

    return parse


def _check_bound(bound: Bound, number: float, value: str) -> None:
    if number <= 0 or not bound.allows(number):
        allowed = bound.describe() if bound.least > 0 else "above 0 and " + bound.describe()
        raise argparse.ArgumentTypeError("must be %s, got %s" % (allowed, value))
