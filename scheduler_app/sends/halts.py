"""Kill switches as a lane sees them: why it must stop sending now.

A lane stops when its batch is no longer sending (paused, cancelled, completed, failed)
or when a kill switch covers the send queue or the lane task. It looks before every
chunk, and within a chunk at most HALT_RECHECK seconds apart (before each recipient and
while it waits for room in its window or for a rate-limit token), so a pause takes
effect within about a second and the calls then in flight. Behind a kill switch the lane
hands its job back and looks again after PAUSED_RECHECK; a stopped batch ends the lane.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from scheduler_app.conf import app_settings
from scheduler_app.controls import paused_scopes
from scheduler_app.models import SendBatch
from scheduler_app.sends.task_names import SEND_BATCH_TASK

#: How soon a lane behind a kill switch looks again.
PAUSED_RECHECK = dt.timedelta(seconds=2)
KILL_SWITCHED = "sends are paused by a kill switch"
#: Seconds between a lane's looks at pause/cancel and the kill switches inside a chunk.
HALT_RECHECK = 1.0


def halt_check(batch_id: int) -> Callable[[], str]:
    """Return a function saying why the lane must stop ('' to go on), looking once a second."""
    next_look = time.monotonic() + HALT_RECHECK

    def check() -> str:
        nonlocal next_look
        if time.monotonic() < next_look:
            return ""
        next_look = time.monotonic() + HALT_RECHECK
        return why_not_send(batch_id)

    return check


def why_not_send(batch_id: int) -> str:
    """Return why a lane of the batch must not send now ('' to go on): its status, or
    KILL_SWITCHED."""
    status = SendBatch.objects.filter(pk=batch_id).values_list("status", flat=True).first()
    if status != SendBatch.Status.SENDING:
        return "batch is %s" % status
    if paused_scopes().covers(queue=app_settings.SEND_QUEUE, task_name=SEND_BATCH_TASK):
        return KILL_SWITCHED
    return ""
