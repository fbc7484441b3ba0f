"""Pure decisions: given the due occurrences and the schedule's policies, what to do.

Misfire policy (occurrences older than the grace period when the scheduler
sees them count as missed):
  run_once  run the latest due occurrence once; skip the earlier ones.
  run_all   run every due occurrence, oldest first, each with its own time.
  skip      run only occurrences within the grace period; skip missed ones.

Overlap policy, applied after the misfire policy:
  skip      while an earlier run of the schedule is pending or running, an
            occurrence is skipped. The runs of one catch-up count as earlier
            runs for each other, so under skip a catch-up runs at most once.
  allow     every occurrence the misfire policy keeps is enqueued.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """Which occurrences to enqueue, and which to skip with their reason."""

    enqueue: tuple[dt.datetime, ...]
    skipped_misfire: tuple[dt.datetime, ...] = ()
    skipped_overlap: tuple[dt.datetime, ...] = ()


def decide(
    due: Sequence[dt.datetime],
    *,
    now: dt.datetime,
    grace: dt.timedelta,
    misfire: str,
    overlap: str,
    previous_unfinished: bool,
    more_due: bool = False,
) -> Decision:
    """Return what to do with ``due`` (ascending occurrence times, all <= now).

    ``more_due``: later occurrences are due too (a backlog longer than one
    tick), so none of ``due`` is the latest.
    """
    if not due:
        return Decision(enqueue=())
    if misfire == "run_all":
        keep, missed = list(due), []
    elif misfire == "skip":
        keep = [at for at in due if now - at <= grace]
        missed = [at for at in due if now - at > grace]
    elif misfire == "run_once":
        keep, missed = ([], list(due)) if more_due else ([due[-1]], list(due[:-1]))
    else:
        raise ValueError("Unknown misfire policy %r" % misfire)
    overlapping: list[dt.datetime] = []
    if overlap == "skip":
        if previous_unfinished:
            keep, overlapping = [], keep
        else:
            keep, overlapping = keep[:1], keep[1:]
    elif overlap != "allow":
        raise ValueError("Unknown overlap policy %r" % overlap)
    return Decision(
        enqueue=tuple(keep), skipped_misfire=tuple(missed), skipped_overlap=tuple(overlapping)
    )
