"""Each task's alert targets: its first enabled schedule's over the task's own."""

from __future__ import annotations

from scheduler_app.models import Schedule
from scheduler_app.registry import all_tasks
from scheduler_app.targets import NO_TARGETS, Targets


def task_targets(schedules: list[Schedule]) -> dict[str, Targets]:
    """Return each task's targets: its first enabled schedule's (by name) over the task's own."""
    targets = {name: spec.targets for name, spec in all_tasks().items()}
    seen: set[str] = set()
    for schedule in schedules:
        if schedule.task_name not in seen:
            seen.add(schedule.task_name)
            own = Targets.of(schedule)
            targets[schedule.task_name] = own.over(targets.get(schedule.task_name, NO_TARGETS))
    return targets
