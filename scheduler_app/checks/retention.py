"""Retention: the RETENTION_*, PRUNE_* and *HISTORY* settings (E054-E057, W058), and relations
to Job, Recipient, ScheduleOccurrence and JobAttempt that the PostgreSQL prune and
partitions cannot honour (E059, E065, E066)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db.models import DO_NOTHING

from scheduler_app.conf import app_settings, is_number
from scheduler_app.database import connection
from scheduler_app.models import Job, JobAttempt, Recipient, ScheduleOccurrence
from scheduler_app.schedules.recurrence import CronError, check_cron

#: Retention settings: a number of days > 0, or None to keep forever (check E054).
RETENTION_DAYS = (
    "RETENTION_JOBS_DAYS",
    "RETENTION_OCCURRENCES_DAYS",
    "RETENTION_CONTROL_EVENTS_DAYS",
    "RETENTION_RECIPIENT_CONTEXT_DAYS",
    "RETENTION_BATCHES_DAYS",
    "RETENTION_DRY_RUN_REPORTS_DAYS",
    "RETENTION_WORKERS_DAYS",
    "RETENTION_ALERTS_DAYS",
)
#: The days a message's unsubscribe link must keep working (CAN-SPAM's 30 days): a batch's
#: go with its recipients (RETENTION_BATCHES_DAYS, check W058).
UNSUBSCRIBE_LINK_DAYS = 30


@register(Tags.compatibility)
def check_retention_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the RETENTION_*, PRUNE_* and *HISTORY* settings (E054-E057, W058)."""
    problems: list[CheckMessage] = [
        Error(
            "SCHEDULER_APP[%r] must be a number of days > 0, or None to keep forever." % name,
            id="scheduler_app.E054",
        )
        for name in RETENTION_DAYS
        if getattr(app_settings, name) is not None
        and (not is_number(getattr(app_settings, name)) or getattr(app_settings, name) <= 0)
    ]
    batches = app_settings.RETENTION_BATCHES_DAYS
    if is_number(batches) and 0 < batches < UNSUBSCRIBE_LINK_DAYS:
        problems.append(
            Warning(
                "SCHEDULER_APP['RETENTION_BATCHES_DAYS'] is %s: a finished batch's "
                "recipients go after that many days, and with them the unsubscribe links of "
                "its messages, which must work for %d days after a message is sent."
                % (batches, UNSUBSCRIBE_LINK_DAYS),
                hint="Keep finished batches at least %d days." % UNSUBSCRIBE_LINK_DAYS,
                id="scheduler_app.W058",
            )
        )
    for name in (
        "PRUNE_BATCH_SIZE",
        "PRUNE_MAX_ROWS",
        "HISTORY_PARTITION_MINUTES",
        "HISTORY_PARTITIONS_AHEAD",
        "OCCURRENCE_PARTITION_DAYS",
    ):
        value = getattr(app_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                Error(
                    "SCHEDULER_APP[%r] must be a positive integer." % name,
                    id="scheduler_app.E055",
                )
            )
    if not isinstance(app_settings.PARTITIONED_HISTORY, bool):
        problems.append(
            Error(
                "SCHEDULER_APP['PARTITIONED_HISTORY'] must be True or False.",
                id="scheduler_app.E057",
            )
        )
    cron = app_settings.PRUNE_SCHEDULE
    if cron is not None:
        try:
            if not isinstance(cron, str):
                raise CronError("not a string")
            check_cron(cron)
        except CronError as exc:
            problems.append(
                Error(
                    "SCHEDULER_APP['PRUNE_SCHEDULE'] must be None or a cron expression "
                    "(UTC), not %r: %s." % (cron, exc),
                    id="scheduler_app.E056",
                )
            )
    return problems


@register(Tags.models)
def check_job_relations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a project's foreign key to Job but a DO_NOTHING one without a constraint (E059).

    The PostgreSQL prune deletes jobs in one statement (db.postgresql.PRUNE_JOBS) that
    handles scheduler_app's own relations only: the constraint would fail every run.
    """
    if app_settings.RETENTION_JOBS_DAYS is None:
        return []
    return [
        Error(
            "A relation to scheduler_app.Job that the prune cannot honour: on PostgreSQL "
            "it deletes finished jobs with one SQL statement, which ignores on_delete, so "
            "a database constraint would make every prune fail.",
            hint="Declare it with on_delete=models.DO_NOTHING and db_constraint=False (a "
            "pruned job leaves its id behind), keep the job's id in a plain integer field, "
            "or set SCHEDULER_APP['RETENTION_JOBS_DAYS'] = None and delete finished jobs "
            "yourself.",
            obj=field,
            id="scheduler_app.E059",
        )
        for field in _relations_to(Job, app_configs)
    ]


@register(Tags.models)
def check_recipient_relations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a project's foreign key to Recipient but a DO_NOTHING one without a
    constraint (E065), with partitioned recipients (PostgreSQL) or their retention.

    A partitioned recipient table has no unique id alone for a constraint to point at
    (the new partitions' rows would fail it), and retention deletes recipients with one
    statement, or drops them a partition at a time, ignoring on_delete.
    """
    partitioned = app_settings.PARTITIONED_HISTORY and connection.vendor == "postgresql"
    if app_settings.RETENTION_BATCHES_DAYS is None and not partitioned:
        return []
    return [
        Error(
            "A relation to scheduler_app.Recipient that partitioned recipients and their "
            "retention cannot honour: on PostgreSQL the recipient table is partitioned by "
            "batch (no constraint can point at its rows) and finished batches' recipients "
            "are dropped a partition at a time, which ignores on_delete.",
            hint="Declare it with on_delete=models.DO_NOTHING and db_constraint=False (a "
            "pruned recipient leaves its id behind), or keep the recipient's id in a plain "
            "integer field.",
            obj=field,
            id="scheduler_app.E065",
        )
        for field in _relations_to(Recipient, app_configs)
    ]


@register(Tags.models)
def check_history_relations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a project's foreign key to ScheduleOccurrence or JobAttempt but a DO_NOTHING
    one without a constraint (E066), with partitioned history (PostgreSQL).

    A partitioned occurrence (or attempt) table has no unique id alone for a constraint to
    point at, and retention drops its rows a partition at a time, ignoring on_delete.
    """
    if not app_settings.PARTITIONED_HISTORY or connection.vendor != "postgresql":
        return []
    return [
        Error(
            "A relation to %s that partitioned history cannot honour: on PostgreSQL its "
            "table is partitioned (no constraint can point at its rows) and retention drops "
            "its rows a partition at a time, which ignores on_delete." % model._meta.label,
            hint="Declare it with on_delete=models.DO_NOTHING and db_constraint=False (a "
            "pruned row leaves its id behind), or keep the id in a plain integer field.",
            obj=field,
            id="scheduler_app.E066",
        )
        for model in (ScheduleOccurrence, JobAttempt)
        for field in _relations_to(model, app_configs)
    ]


def _relations_to(model: type, app_configs: Any) -> list[Any]:
    """Return the fields of projects' models (not scheduler_app's) that relate to ``model``
    with a database constraint or an on_delete other than DO_NOTHING."""
    return [
        field
        for app_config in app_configs or apps.get_app_configs()
        if app_config.name != "scheduler_app"
        for model_class in app_config.get_models(include_auto_created=True)
        for field in model_class._meta.local_fields
        if field.is_relation
        and field.related_model is model
        and (field.db_constraint or field.remote_field.on_delete is not DO_NOTHING)
    ]
