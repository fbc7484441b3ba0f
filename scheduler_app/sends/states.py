"""Batch status changes: one guarded UPDATE each, so an operator and a lane never both win.

The lowest layer of sends: the operator functions (sends.batches) and the
lanes (sends.dispatch) both change a batch's status through here.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.controls import as_user, record
from scheduler_app.models import SendBatch

logger = logging.getLogger("scheduler_app.sends")
Status = SendBatch.Status

#: Scheduled or sending: the statuses in which a batch has lanes, can be paused or fail.
ACTIVE = (Status.SCHEDULED, Status.SENDING)
#: How the reason of a batch the stale-send guard paused begins.
STALE_PREFIX = "stale:"
#: Not finished: the statuses a batch can be cancelled from.
CANCELLABLE = (Status.DRAFT, *ACTIVE, Status.PAUSED)


def transition(
    batch_id: int,
    sources: tuple[str, ...],
    target: str,
    *,
    by: Any = None,
    reason: str = "",
    **fields: Any,
) -> bool:
    """Move the batch from one of ``sources`` to ``target``; return False if it was not in one."""
    return bool(
        SendBatch.objects.filter(pk=batch_id, status__in=sources).update(
            status=target,
            status_reason=reason,
            status_changed_by=as_user(by),
            status_changed_at=clock.now(),
            **fields,
        )
    )


def pause(batch_id: int, *, reason: str, by: Any = None) -> bool:
    """Pause a scheduled or sending batch with ``reason`` (audited); False if it was neither."""
    changed = transition(batch_id, ACTIVE, Status.PAUSED, by=by, reason=reason, lane_errors=0)
    if changed:
        record("batch", str(batch_id), "pause", by=by, reason=reason)
        if by is None:
            logger.warning("batch paused batch=%s reason=%s", batch_id, reason)
    return changed


def fail(batch_id: int, reason: str) -> bool:
    """Fail a batch that can never send (its audience or template is broken); audited."""
    changed = transition(batch_id, ACTIVE, Status.FAILED, reason=reason)
    if changed:
        record("batch", str(batch_id), "fail", reason=reason)
        logger.error("batch failed batch=%s reason=%s", batch_id, reason)
    return changed


def earliest_start(batch: SendBatch) -> dt.datetime | None:
    """Return when a scheduled batch may start: its send time, after its undo window + margin."""
    starts = [batch.scheduled_at] if batch.scheduled_at else []
    if batch.undo_deadline is not None:
        starts.append(batch.undo_deadline + dt.timedelta(seconds=app_settings.UNDO_SAFETY_MARGIN))
    return max(starts) if starts else None
