"""The pre-flight checklist: computed from the batch, never typed in.

Items (names are stable; SCHEDULER_APP['CHECKLIST_RELAX'] and the
``relax_checklist`` permission use them):
  audience_within_limit  the audience was counted (by a dry-run) and is within
                         expected_max_audience
  dry_run_clean          a dry-run of the current template and audience exists
                         and found no problems
  seed_sent              a seed send of the current template and audience happened
  schedule_unambiguous   a send time (UTC) and a valid IANA time zone are set
  no_other_large_batch   no other large batch is scheduled close to this one
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import zoneinfo

from django.db.models import Q

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import SendBatch
from scheduler_app.sends.content import fingerprint

#: The names of the checklist items, in the order of the module docstring.
ITEM_NAMES = (
    "audience_within_limit",
    "dry_run_clean",
    "seed_sent",
    "schedule_unambiguous",
    "no_other_large_batch",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckItem:
    """One checklist item and whether the batch passes it."""

    name: str
    ok: bool
    detail: str


class ChecklistFailed(ValidationError):
    """The batch fails its pre-flight checklist."""

    code = "checklist_failed"

    def __init__(self, failing: list[CheckItem]) -> None:
        self.failing = failing
        super().__init__(
            "The pre-flight checklist failed: %s" % "; ".join(item.detail for item in failing)
        )


def run_checklist(batch: SendBatch) -> list[CheckItem]:
    """Return every checklist item for ``batch``, passing or not."""
    current = fingerprint(batch)
    items = []

    counted = batch.dry_run_audience
    if counted is None:
        items.append(
            CheckItem(
                name="audience_within_limit",
                ok=False,
                detail="The audience has not been counted; run a dry-run.",
            )
        )
    else:
        items.append(
            CheckItem(
                name="audience_within_limit",
                ok=counted <= batch.expected_max_audience,
                detail="Audience of %s recipients against an expected maximum of %s."
                % (counted, batch.expected_max_audience),
            )
        )

    if batch.dry_run_fingerprint != current:
        items.append(
            CheckItem(
                name="dry_run_clean",
                ok=False,
                detail=(
                    "No dry-run of the current template and audience."
                    if batch.dry_run_at is None
                    else "The template or audience changed since the last dry-run."
                ),
            )
        )
    else:
        problems = batch.dry_run_problems or 0
        items.append(
            CheckItem(
                name="dry_run_clean",
                ok=problems == 0,
                detail="The dry-run found %s problem(s)." % problems,
            )
        )

    seeded = batch.seed_fingerprint == current
    items.append(
        CheckItem(
            name="seed_sent",
            ok=seeded,
            detail=(
                "A seed send of the current template happened."
                if seeded
                else "No seed send of the current template and audience."
            ),
        )
    )

    zone_ok = True
    try:
        clock.time_zone(batch.timezone)
    except zoneinfo.ZoneInfoNotFoundError:
        zone_ok = False
    items.append(
        CheckItem(
            name="schedule_unambiguous",
            ok=batch.scheduled_at is not None and zone_ok,
            detail=(
                "Send time %s (intended time zone %s)."
                % (
                    batch.scheduled_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                    batch.timezone,
                )
                if batch.scheduled_at and zone_ok
                else "A send time and a valid time zone are both needed."
            ),
        )
    )

    items.append(_no_other_large_batch(batch, counted))
    return items


def _no_other_large_batch(batch: SendBatch, counted: int | None) -> CheckItem:
    large = app_settings.LARGE_BATCH
    size = counted if counted is not None else batch.expected_max_audience
    if size < large or batch.scheduled_at is None:
        return CheckItem(
            name="no_other_large_batch",
            ok=True,
            detail="This batch is not large, or has no time yet.",
        )
    window = dt.timedelta(seconds=app_settings.LARGE_BATCH_WINDOW)
    clash = (
        SendBatch.objects.exclude(pk=batch.pk)
        .filter(
            status__in=[
                SendBatch.Status.SCHEDULED,
                SendBatch.Status.SENDING,
                SendBatch.Status.PAUSED,
            ],
            scheduled_at__range=(batch.scheduled_at - window, batch.scheduled_at + window),
        )
        .filter(Q(total__gte=large) | Q(total=None, expected_max_audience__gte=large))
        .order_by("scheduled_at")
        .first()
    )
    if clash is None:
        return CheckItem(
            name="no_other_large_batch", ok=True, detail="No other large batch within the window."
        )
    return CheckItem(
        name="no_other_large_batch",
        ok=False,
        detail="Large batch %r is scheduled at %s, within %s of this one."
        % (clash.name, clash.scheduled_at.isoformat(), window),
    )
