"""Targets: what "on time", "often enough" and "did real work" mean for a task or schedule.

Declared with the task (``@task(lateness_target=..., ...)``), with a
schedule declared in code (same keys in ``SCHEDULER_APP['SCHEDULES']``), or
on a schedule in the admin. A schedule's own value wins over its task's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

from scheduler_app.bounds import LONGEST_DURATION

#: The fields a task or schedule may declare; the same names on Schedule.
TARGET_FIELDS = ("lateness_target", "max_runtime", "expected_every", "count_key", "zero_runs_alert")
#: The share by which an absence window exceeds a schedule's longest gap.
CADENCE_SLACK = 1.1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Targets:
    """Targets of a task or schedule; None (or "") means "none declared"."""

    #: Alert when the p95 lateness of first attempts over the last 24 h exceeds this.
    lateness_target: dt.timedelta | None = None
    #: Alert when a run has been running for longer than this.
    max_runtime: dt.timedelta | None = None
    #: Alert when no run succeeded for this long ("absent").
    expected_every: dt.timedelta | None = None
    #: The result key that counts the items a run processed (e.g. "processed").
    count_key: str = ""
    #: Alert after this many consecutive successes whose count_key is 0.
    zero_runs_alert: int | None = None

    def over(self, fallback: Targets) -> Targets:
        """Return these targets, each missing one taken from ``fallback``."""
        return Targets(
            **{
                name: getattr(self, name) if getattr(self, name) else getattr(fallback, name)
                for name in TARGET_FIELDS
            }
        )

    @classmethod
    def of(cls, obj: Any) -> Targets:
        """Return the targets stored on ``obj`` (a Schedule), under the same field names."""
        return cls(**{name: getattr(obj, name) for name in TARGET_FIELDS})


NO_TARGETS = Targets()


def as_duration(
    value: float | dt.timedelta | None, name: str, *, allow_zero: bool = False
) -> dt.timedelta | None:
    """Return ``value`` (seconds or a timedelta) as a positive timedelta, or None.

    ``allow_zero`` accepts 0 too. Raises ValueError for anything else, NaN, and
    anything longer than LONGEST_DURATION (infinity and 1e300 would overflow a timedelta).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | dt.timedelta):
        raise ValueError("%s must be a number of seconds or a timedelta" % name)
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("%s must be a number of seconds, not NaN" % name)
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError("%s must %s" % (name, "not be negative" if allow_zero else "be positive"))
    if seconds > LONGEST_DURATION.total_seconds():
        raise ValueError(
            "%s must be at most %s days (%d seconds)"
            % (name, LONGEST_DURATION.days, LONGEST_DURATION.total_seconds())
        )
    return value if isinstance(value, dt.timedelta) else dt.timedelta(seconds=value)


def build_targets(
    *,
    lateness_target: float | dt.timedelta | None = None,
    max_runtime: float | dt.timedelta | None = None,
    expected_every: float | dt.timedelta | None = None,
    count_key: str = "",
    zero_runs_alert: int | None = None,
) -> Targets:
    """Return validated Targets from declared values (durations in seconds or timedeltas).

    Raises ValueError naming the bad option.
    """
    if not isinstance(count_key, str) or len(count_key) > 100:
        raise ValueError("count_key must be a string of at most 100 characters")
    if zero_runs_alert is not None and (
        isinstance(zero_runs_alert, bool)
        or not isinstance(zero_runs_alert, int)
        or zero_runs_alert < 1
    ):
        raise ValueError("zero_runs_alert must be a positive integer")
    if zero_runs_alert is not None and not count_key:
        raise ValueError("zero_runs_alert needs a count_key (the result key that counts items)")
    return Targets(
        lateness_target=as_duration(lateness_target, "lateness_target"),
        max_runtime=as_duration(max_runtime, "max_runtime"),
        expected_every=as_duration(expected_every, "expected_every"),
        count_key=count_key,
        zero_runs_alert=zero_runs_alert,
    )
