"""The scheduler's database: SCHEDULER_APP['DATABASE'] (E120), the routers that send
scheduler_app's models to it (E121), relations across databases (E122), what it costs
schedule() (W120), and the outbox mode's ENQUEUE_ON_COMMIT_OF (E123)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DEFAULT_DB_ALIAS, router
from django.db.models import DO_NOTHING

from scheduler_app.conf import app_settings
from scheduler_app.routers import APP_LABEL

ROUTER = "scheduler_app.routers.SchedulerRouter"


@register(Tags.database, Tags.models)
def check_scheduler_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The scheduler's database exists (E120), the routers send scheduler_app's models there
    (E121), no relation would cross databases (E122), the outbox mode's database (E123), and
    the cost of a database of its own without it (W120)."""
    alias = app_settings.DATABASE
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return [
            Error(
                "SCHEDULER_APP['DATABASE'] must be the alias of a database in DATABASES, not "
                "%r." % (alias,),
                hint="Known aliases: %s." % ", ".join(map(repr, settings.DATABASES)),
                id="scheduler_app.E120",
            )
        ]
    problems: list[CheckMessage] = []
    problems += _routing(alias)
    problems += _relations(alias)
    problems += _outbox(alias)
    return problems


def _routing(alias: str) -> list[CheckMessage]:
    """E121: reads, writes and migrations of scheduler_app's models go to ``alias``."""
    models = apps.get_app_config(APP_LABEL).get_models()
    wrong = sorted(
        {
            "%s %s to %r" % (what, model.__name__, where)
            for model in models
            for what, where in (
                ("reads", router.db_for_read(model)),
                ("writes", router.db_for_write(model)),
            )
            if where != alias
        }
        | {
            "migrate never creates %s there" % model.__name__
            for model in models
            if not router.allow_migrate_model(alias, model)
        }
    )
    if not wrong:
        return []
    return [
        Error(
            "SCHEDULER_APP['DATABASE'] is %r, but the routers send scheduler_app's models "
            "elsewhere: %s." % (alias, "; ".join(wrong[:5])),
            hint="Add %r to DATABASE_ROUTERS, before any router that sends every model to one "
            "database (such as a primary/replica router)." % ROUTER,
            id="scheduler_app.E121",
        )
    ]


def _relations(alias: str) -> list[CheckMessage]:
    """E122: a foreign key between scheduler_app's models and another app's, on two
    databases (Django cannot keep one across databases)."""
    problems: list[CheckMessage] = []
    for model in apps.get_models(include_auto_created=True):
        for field in model._meta.local_fields + list(model._meta.local_many_to_many):
            related = field.related_model
            if related is None or related == "self" or isinstance(related, str):
                continue
            labels = {model._meta.app_label, related._meta.app_label}
            if APP_LABEL not in labels or labels == {APP_LABEL}:
                continue
            other = related if model._meta.app_label == APP_LABEL else model
            where = router.db_for_write(other)
            if where == alias:
                continue
            # A project's key to a job that no constraint or cascade ties to it (E059's
            # advice) only holds an id: it works across databases.
            if (
                other is model
                and not field.many_to_many
                and not field.db_constraint
                and field.remote_field.on_delete is DO_NOTHING
            ):
                continue
            problems.append(
                Error(
                    "%s.%s relates %s to %s, which the routers put on database %r, while "
                    "scheduler_app's tables are on %r: Django cannot keep a foreign key "
                    "across databases (migrate fails to create it, deletes and joins fail)."
                    % (
                        model._meta.label,
                        field.name,
                        model._meta.label,
                        related._meta.label,
                        where,
                        alias,
                    ),
                    hint="Route %s to %r as well (a router listed before %s), or keep "
                    "SCHEDULER_APP['DATABASE'] on %r; see docs/separate-database.md."
                    % (other._meta.app_label, alias, ROUTER, where),
                    obj=field,
                    id="scheduler_app.E122",
                )
            )
    return problems


def _outbox(alias: str) -> list[CheckMessage]:
    """E123: ENQUEUE_ON_COMMIT_OF names another database; W120: without it, schedule() in a
    business transaction is not atomic with it."""
    business = app_settings.ENQUEUE_ON_COMMIT_OF
    if business is None:
        if alias == DEFAULT_DB_ALIAS:
            return []
        return [
            Warning(
                "scheduler_app's tables are on database %r: schedule() inside a transaction "
                "of another database (your business data's, such as %r) is not atomic with "
                "it. The job is written at once and stays scheduled if that transaction rolls "
                "back, and it may run before that transaction commits." % (alias, DEFAULT_DB_ALIAS),
                hint="Set SCHEDULER_APP['ENQUEUE_ON_COMMIT_OF'] to the business database's "
                "alias (the outbox mode: jobs are written when it commits, nothing if it rolls "
                "back; a crash between that commit and the write loses them), or silence "
                "scheduler_app.W120 if you accept it; see docs/separate-database.md.",
                id="scheduler_app.W120",
            )
        ]
    if not isinstance(business, str) or business not in settings.DATABASES:
        return [
            Error(
                "SCHEDULER_APP['ENQUEUE_ON_COMMIT_OF'] must be None or the alias of a database "
                "in DATABASES, not %r." % (business,),
                hint="Known aliases: %s." % ", ".join(map(repr, settings.DATABASES)),
                id="scheduler_app.E123",
            )
        ]
    if business == alias:
        return [
            Error(
                "SCHEDULER_APP['ENQUEUE_ON_COMMIT_OF'] is %r, the scheduler's own database: "
                "schedule() is already atomic with its transactions, and waiting for their "
                "commit could only lose jobs." % business,
                hint="Set it to the business database's alias, or to None.",
                id="scheduler_app.E123",
            )
        ]
    return []
