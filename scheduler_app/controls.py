"""Kill switches: pause and resume everything, a queue or a task.

Workers read the paused set at least every CONTROL_REFRESH seconds and stop
claiming what it covers; a running send checks it before every chunk.
Resuming continues exactly where things stopped: nothing is lost or redone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scheduler_app import clock, database
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Control, ControlEvent
from scheduler_app.registry import check_queue, get_task

#: Seconds between a worker's looks at the switches.
CONTROL_REFRESH = 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class PausedScopes:
    """What is paused right now."""

    everything: bool = False
    queues: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()

    def covers(self, *, queue: str | None = None, task_name: str | None = None) -> bool:
        """Return True if work on ``queue`` / ``task_name`` must not start."""
        return self.everything or queue in self.queues or task_name in self.tasks


def paused_scopes() -> PausedScopes:
    """Return the current kill-switch state in one query."""
    rows = list(Control.objects.filter(paused=True).values_list("scope", "target"))
    return PausedScopes(
        everything=any(scope == Control.Scope.GLOBAL for scope, _ in rows),
        queues=frozenset(t for scope, t in rows if scope == Control.Scope.QUEUE),
        tasks=frozenset(t for scope, t in rows if scope == Control.Scope.TASK),
    )


def pause(scope: str, target: str = "", *, by: Any = None, reason: str) -> bool:
    """Pause ``scope`` (global/queue/task) and ``target``; return False if already paused."""
    if not reason or not reason.strip():
        raise ValidationError("A reason is required to pause.")
    return _switch(scope, target, paused=True, by=by, reason=reason.strip())


def resume(scope: str, target: str = "", *, by: Any = None, reason: str = "") -> bool:
    """Resume ``scope`` and ``target``; return False if it was not paused."""
    return _switch(scope, target, paused=False, by=by, reason=reason.strip())


def record(scope: str, target: str, action: str, *, by: Any = None, reason: str = "") -> None:
    """Add an audit-trail entry."""
    ControlEvent.objects.create(
        scope=scope, target=target, action=action, reason=reason, by=as_user(by), at=clock.now()
    )


def _switch(scope: str, target: str, *, paused: bool, by: Any, reason: str) -> bool:
    if scope not in Control.Scope.values:
        raise ValidationError(
            "Unknown scope %r; use one of: %s." % (scope, ", ".join(Control.Scope.values))
        )
    target = "" if scope == Control.Scope.GLOBAL else target
    if scope != Control.Scope.GLOBAL and not target:
        raise ValidationError("Pausing a %s needs its name." % scope)
    if paused and scope == Control.Scope.QUEUE:
        check_queue(target)
    elif paused and scope == Control.Scope.TASK:
        get_task(target)
    # A resume finds the switch by name alone: a queue or task gone from the code since
    # its pause can still be resumed.
    switches = Control.objects.filter(scope=scope, target=target)
    now = clock.now()
    with database.atomic():
        if paused:
            Control.objects.get_or_create(scope=scope, target=target)
        changed = switches.filter(paused=not paused).update(
            paused=paused, reason=reason, changed_by=as_user(by), changed_at=now
        )
        if changed:
            record(scope, target, "pause" if paused else "resume", by=by, reason=reason)
    return bool(changed)


def as_user(by: Any) -> Any:
    """Return ``by`` if it is a saved user (for a ForeignKey), else None."""
    return by if getattr(by, "pk", None) is not None else None
