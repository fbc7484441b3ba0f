"""Schedules declared in code (SCHEDULER_APP['SCHEDULES']), synced to the database.

Each entry maps a schedule name to its definition::

    "SCHEDULES": {
        "nightly-cleanup": {"task": "shop.cleanup", "cron": "0 3 * * *",
                            "timezone": "Europe/London"},
        "poll-feeds": {"task": "feeds.poll", "fixed_delay": 300, "jitter": 30},
    }

The built-in ``scheduler-prune`` schedule (scheduler_app.retention, cron
from PRUNE_SCHEDULE) is declared with them unless PRUNE_SCHEDULE is None.

Keys: task (required); exactly one of cron, fixed_rate, fixed_delay
(seconds); timezone, payload, queue, overlap ("skip"/"allow"), misfire
("run_once"/"run_all"/"skip"), misfire_grace and jitter (seconds),
start_at (ISO 8601, fixed rate), enabled (initial value only), and the
targets (scheduler_app.targets): lateness_target, max_runtime and
expected_every (seconds), count_key, zero_runs_alert. Code owns a declared
schedule's targets: a sync overwrites what the admin changed.

Syncing (at every runworker start, ``manage.py sync_schedules`` or
``sync_declared_schedules()``) creates and updates what this process
declares, never ``enabled``, so an operator's "disabled" in the admin
survives deploys. During a rolling deploy old and new workers sync their own
declarations: a schedule records the SCHEDULES_VERSION that last wrote it,
and a lower version's declaration is logged and ignored, so the cursor never
flips between two rules. Sync never disables anything: a schedule removed
from code is pruned explicitly (``sync_schedules --prune`` or the admin
action), which disables it and keeps its history.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.utils.dateparse import parse_datetime

from scheduler_app import clock, database
from scheduler_app.conf import app_settings
from scheduler_app.exceptions import ValidationError
from scheduler_app.models import Schedule
from scheduler_app.payloads import check_payload
from scheduler_app.retention import builtin_schedule
from scheduler_app.targets import TARGET_FIELDS, as_duration, build_targets

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
    *TARGET_FIELDS,
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
    *TARGET_FIELDS,
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
    for name in declared:
        if not isinstance(name, str):
            raise ValidationError(
                "SCHEDULER_APP['SCHEDULES'] names must be strings, not %r." % (name,)
            )
    # The built-in ones first: a project that declares the same name replaces it.
    declared = {**builtin_schedule(), **declared}
    return {name: _build(name, definition) for name, definition in declared.items()}


def sync_declared_schedules() -> list[Schedule]:
    """Create or update the schedules this process declares; return them as stored.

    A schedule last written by a higher SCHEDULES_VERSION is left as it is.
    """
    declared = declared_schedules()
    version = app_settings.SCHEDULES_VERSION
    now = clock.now()
    stored = []
    with database.atomic():
        existing = {
            s.name: s for s in Schedule.objects.select_for_update().filter(name__in=declared)
        }
        for name, wanted in declared.items():
            current = existing.get(name) or _create(wanted, version, now)
            stored.append(current)
            if current is wanted:
                continue  # created as declared
            changed = [f for f in DEFINITION_FIELDS if getattr(current, f) != getattr(wanted, f)]
            if current.declared_version > version:
                if changed:
                    logger.warning(
                        "schedule declared by a newer version, ignoring ours schedule=%s "
                        "version=%s stored_version=%s fields=%s",
                        name,
                        version,
                        current.declared_version,
                        ",".join(changed),
                    )
                continue
            if not changed and current.declared_in_code and current.declared_version == version:
                continue
            for field in changed:
                setattr(current, field, getattr(wanted, field))
            if set(changed) & set(TIMING_FIELDS) and not _due(current, now):
                current.next_run_at = None  # follow the new rule from now on
            current.declared_in_code = True
            current.declared_version = version
            current.updated_at = now
            current.save(
                update_fields=[
                    *changed,
                    "next_run_at",
                    "declared_in_code",
                    "declared_version",
                    "updated_at",
                ]
            )
            logger.info(
                "schedule updated from code schedule=%s version=%s fields=%s",
                name,
                version,
                ",".join(changed),
            )
    return stored


def _create(wanted: Schedule, version: int, now: dt.datetime) -> Schedule:
    """Insert ``wanted`` and return it; if another process inserted its name first, return
    that schedule, locked.

    select_for_update() cannot lock a name no row has yet: two workers starting together
    both try the INSERT, and the second waits for the first's commit, then conflicts.
    """
    wanted.declared_in_code = True
    wanted.declared_version = version
    wanted.created_at = wanted.updated_at = now
    try:
        with database.atomic():
            wanted.save(force_insert=True)
    except IntegrityError:
        theirs = Schedule.objects.select_for_update().filter(name=wanted.name).first()
        if theirs is None:
            raise  # not the name's conflict: a constraint refused the definition
        return theirs
    logger.info("schedule declared schedule=%s version=%s", wanted.name, version)
    return wanted


def prune_declared_schedules(names: Iterable[str] | None = None) -> list[str]:
    """Disable the schedules from code that this process no longer declares; return their names.

    ``names`` narrows it to those schedules. A schedule last written by a
    higher SCHEDULES_VERSION is left alone. A pruned schedule keeps its
    history and belongs to the admin (declared_in_code False) until a
    version declares it again; it stays disabled until enabled in the admin.
    """
    version = app_settings.SCHEDULES_VERSION
    candidates = Schedule.objects.filter(
        declared_in_code=True, declared_version__lte=version
    ).exclude(name__in=list(declared_schedules()))
    if names is not None:
        candidates = candidates.filter(name__in=list(names))
    with database.atomic():
        pruned = list(candidates.select_for_update().values_list("name", flat=True))
        Schedule.objects.filter(name__in=pruned).update(
            enabled=False, declared_in_code=False, declared_version=version, updated_at=clock.now()
        )
    for name in pruned:
        logger.warning("schedule pruned schedule=%s version=%s", name, version)
    return pruned


def _due(schedule: Schedule, now: dt.datetime) -> bool:
    """Return True if the cursor is an occurrence that has come but is not enqueued yet.

    Such a cursor is kept when the timing changes, so that occurrence still runs.
    """
    return schedule.next_run_at is not None and schedule.next_run_at <= now


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
    queue = definition.get("queue", "")
    try:
        targets = build_targets(
            **{key: definition[key] for key in TARGET_FIELDS if key in definition}
        )
        schedule = Schedule(
            name=name,
            task_name=definition.get("task", ""),
            payload=check_payload(definition.get("payload", {})),
            queue=queue,
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
            **dataclasses.asdict(targets),
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
    duration = as_duration(value, key, allow_zero=True)
    assert duration is not None
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
