"""Schedules declared in code (SCHEDULER_APP['SCHEDULES']), synced to the database.

Each entry maps a schedule name to its definition::

    "SCHEDULES": {
        "nightly-cleanup": {"task": "shop.cleanup", "cron": "0 3 * * *",
                            "timezone": "Europe/London"},
        "poll-feeds": {"task": "feeds.poll", "fixed_delay": 300, "jitter": 30},
    }

Keys: task (required); exactly one of cron, fixed_rate, fixed_delay
(seconds); timezone, payload, queue, overlap ("skip"/"allow"), misfire
("run_once"/"run_all"/"skip"), misfire_grace and jitter (seconds),
start_at (ISO 8601, fixed rate), enabled (initial value only).

Syncing (at every runworker start, or ``sync_declared_schedules()``) writes
the definition from code but never ``enabled``, so an operator's "disabled"
in the admin survives deploys. A declared schedule removed from code is
disabled, not deleted, so its history stays.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.dateparse import parse_datetime

from scheduler_app import clock
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Schedule
from scheduler_app.scheduling import check_payload

logger = logging.getLogger("scheduler_app.schedules")

KNOWN_KEYS = {
    "task",
    "cron",
    "fixed_rate",
    "fixed_delay",
    "timezone",
    "payload",
    "queue",
    "overlap",
    "misfire",
    "misfire_grace",
    "jitter",
    "start_at",
    "enabled",
}
KINDS = {
    "cron": Schedule.Kind.CRON,
    "fixed_rate": Schedule.Kind.FIXED_RATE,
    "fixed_delay": Schedule.Kind.FIXED_DELAY,
}
#: Fields that code owns; an operator's edits to them are overwritten at sync.
DEFINITION_FIELDS = (
    "task_name",
    "payload",
    "queue",
    "kind",
    "cron",
    "timezone",
    "interval",
    "start_at",
    "overlap_policy",
    "misfire_policy",
    "misfire_grace",
    "jitter",
)
#: Changing one of these moves the schedule's cursor to the new rule.
TIMING_FIELDS = ("kind", "cron", "timezone", "interval", "start_at")


def declared_schedules() -> dict[str, Schedule]:
    """Return unsaved Schedule instances for SCHEDULER_APP['SCHEDULES'], validated.

    Raises scheduler_app's ValidationError naming the schedule and the problem.
    """
    declared = app_settings.SCHEDULES
    if not isinstance(declared, dict):
        raise ValidationError("SCHEDULER_APP['SCHEDULES'] must be a dict of name -> definition.")
    return {name: _build(name, definition) for name, definition in declared.items()}


def sync_declared_schedules() -> list[Schedule]:
    """Create or update the declared schedules; return them as stored."""
    declared = declared_schedules()
    now = clock.now()
    stored = []
    with transaction.atomic():
        existing = {
            s.name: s for s in Schedule.objects.select_for_update().filter(name__in=declared)
        }
        for name, wanted in declared.items():
            current = existing.get(name)
            if current is None:
                wanted.declared_in_code = True
                wanted.created_at = wanted.updated_at = now
                wanted.save(force_insert=True)
                logger.info("schedule declared schedule=%s", name)
                stored.append(wanted)
                continue
            changed = [f for f in DEFINITION_FIELDS if getattr(current, f) != getattr(wanted, f)]
            if changed or not current.declared_in_code:
                for field in changed:
                    setattr(current, field, getattr(wanted, field))
                if set(changed) & set(TIMING_FIELDS):
                    current.next_run_at = None
                current.declared_in_code = True
                current.updated_at = now
                current.save(
                    update_fields=[*changed, "next_run_at", "declared_in_code", "updated_at"]
                )
                logger.info(
                    "schedule updated from code schedule=%s fields=%s", name, ",".join(changed)
                )
            stored.append(current)
        removed = Schedule.objects.filter(declared_in_code=True, enabled=True).exclude(
            name__in=declared
        )
        for name in removed.values_list("name", flat=True):
            logger.warning("schedule no longer declared, disabling schedule=%s", name)
        removed.update(enabled=False, updated_at=now)
    return stored


def _build(name: str, definition: Any) -> Schedule:
    def invalid(message: str) -> ValidationError:
        return ValidationError("SCHEDULER_APP['SCHEDULES'][%r]: %s" % (name, message))

    if not isinstance(definition, dict):
        raise invalid("must be a dict.")
    unknown = sorted(set(definition) - KNOWN_KEYS)
    if unknown:
        raise invalid("unknown key(s) %s." % ", ".join(unknown))
    kinds = [key for key in KINDS if key in definition]
    if len(kinds) != 1:
        raise invalid("give exactly one of cron, fixed_rate and fixed_delay.")
    kind = kinds[0]
    try:
        schedule = Schedule(
            name=name,
            task_name=definition.get("task", ""),
            payload=check_payload(definition.get("payload", {})),
            queue=definition.get("queue", ""),
            enabled=definition.get("enabled", True),
            kind=KINDS[kind],
            cron=definition[kind] if kind == "cron" else "",
            timezone=definition.get("timezone", "UTC"),
            interval=None if kind == "cron" else _seconds(definition[kind], kind),
            start_at=_datetime(definition.get("start_at")),
            overlap_policy=definition.get("overlap", Schedule.Overlap.SKIP),
            misfire_policy=definition.get("misfire", Schedule.Misfire.RUN_ONCE),
            misfire_grace=_seconds(definition.get("misfire_grace", 60), "misfire_grace"),
            jitter=_seconds(definition.get("jitter", 0), "jitter"),
        )
        # Constraints are checked by the database at sync; this runs with no database.
        schedule.full_clean(
            exclude=["next_run_at"], validate_unique=False, validate_constraints=False
        )
    except (ValueError, TypeError) as exc:
        raise invalid(str(exc)) from exc
    except DjangoValidationError as exc:
        raise invalid(
            "; ".join(
                "%s: %s" % (field, " ".join(errors))
                for field, errors in sorted(exc.message_dict.items())
            )
        ) from exc
    return schedule


def _seconds(value: Any, key: str) -> dt.timedelta:
    if isinstance(value, bool) or not isinstance(value, int | float | dt.timedelta):
        raise ValueError("%s must be a number of seconds" % key)
    duration = value if isinstance(value, dt.timedelta) else dt.timedelta(seconds=value)
    if duration < dt.timedelta(0):
        raise ValueError("%s must not be negative" % key)
    return duration


def _datetime(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        parsed = value
    else:
        parsed = parse_datetime(str(value))
        if parsed is None:
            raise ValueError("start_at must be an ISO 8601 datetime")
    if parsed is not None and parsed.tzinfo is None:
        raise ValueError("start_at must include a UTC offset")
    return parsed
