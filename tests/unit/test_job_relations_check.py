"""System checks E059, E065 and E066: a project's relation to Job, Recipient,
ScheduleOccurrence or JobAttempt that the PostgreSQL prune (one raw DELETE, or a partition
dropped, no on_delete) and partitioned tables cannot honour is refused with the way out; a
constraint would fail every prune.

The models are declared in an isolated app registry: no table, no other test sees them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, models
from django.test import override_settings
from django.test.utils import isolate_apps

from scheduler_app.checks.retention import (
    check_history_relations,
    check_job_relations,
    check_recipient_relations,
)
from scheduler_app.models import Job, JobAttempt, Recipient, ScheduleOccurrence

HINT = (
    "Declare it with on_delete=models.DO_NOTHING and db_constraint=False (a pruned job "
    "leaves its id behind), keep the job's id in a plain integer field, or set "
    "SCHEDULER_APP['RETENTION_JOBS_DAYS'] = None and delete finished jobs yourself."
)


def test_a_relation_to_job_is_refused_with_the_way_out():
    with isolate_apps("tests.testapp") as apps:

        class Order(models.Model):  # noqa: DJ008
            job = models.ForeignKey(Job, on_delete=models.CASCADE)
            reminder = models.OneToOneField(
                Job, on_delete=models.SET_NULL, null=True, related_name="+"
            )
            # No constraint to fail, but on PostgreSQL the prune would not cascade.
            audit = models.ForeignKey(
                Job, on_delete=models.CASCADE, db_constraint=False, related_name="+"
            )

            class Meta:
                app_label = "testapp"

        class Receipt(models.Model):  # noqa: DJ008
            # What the hint proposes: the prune leaves these alone.
            job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, db_constraint=False)
            job_number = models.BigIntegerField()

            class Meta:
                app_label = "testapp"

        errors = check_job_relations(app_configs=apps.get_app_configs())

    assert [(e.id, e.obj.name) for e in errors] == [
        ("scheduler_app.E059", "job"),
        ("scheduler_app.E059", "reminder"),
        ("scheduler_app.E059", "audit"),
    ]
    assert str(errors[0]) == (
        "testapp.Order.job: (scheduler_app.E059) A relation to scheduler_app.Job that the "
        "prune cannot honour: on PostgreSQL it deletes finished jobs with one SQL statement, "
        "which ignores on_delete, so a database constraint would make every prune fail.\n\t"
        "HINT: " + HINT
    )


def test_no_job_retention_or_no_relation_passes():
    with isolate_apps("tests.testapp") as apps:

        class Order(models.Model):  # noqa: DJ008
            job = models.ForeignKey(Job, on_delete=models.CASCADE)

            class Meta:
                app_label = "testapp"

        no_job_retention = {**settings.SCHEDULER_APP, "RETENTION_JOBS_DAYS": None}
        with override_settings(SCHEDULER_APP=no_job_retention):
            assert check_job_relations(app_configs=apps.get_app_configs()) == []
    # scheduler_app's own relations (attempts, occurrences, cursors) are the prune's.
    assert check_job_relations() == []


def test_a_relation_to_recipient_is_refused_while_recipients_may_be_partitioned():
    with isolate_apps("tests.testapp") as apps:

        class Reply(models.Model):  # noqa: DJ008
            recipient = models.ForeignKey(Recipient, on_delete=models.CASCADE)
            # What the hint proposes: partitions and the prune leave it alone.
            quoted = models.ForeignKey(
                Recipient, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
            )

            class Meta:
                app_label = "testapp"

        pruned = {**settings.SCHEDULER_APP, "RETENTION_BATCHES_DAYS": 90}
        with override_settings(SCHEDULER_APP=pruned):
            errors = check_recipient_relations(app_configs=apps.get_app_configs())
        kept = {
            **settings.SCHEDULER_APP,
            "PARTITIONED_HISTORY": False,
            "RETENTION_BATCHES_DAYS": None,
        }
        with override_settings(SCHEDULER_APP=kept):
            assert check_recipient_relations(app_configs=apps.get_app_configs()) == []

    assert [(e.id, e.obj.name) for e in errors] == [("scheduler_app.E065", "recipient")]
    # scheduler_app's own relation (feedback events) has no constraint and is the prune's.
    assert check_recipient_relations() == []


def test_a_relation_to_an_occurrence_or_attempt_is_refused_while_they_may_be_partitioned():
    with isolate_apps("tests.testapp") as apps:

        class Audit(models.Model):  # noqa: DJ008
            occurrence = models.ForeignKey(ScheduleOccurrence, on_delete=models.CASCADE)
            # What the hint proposes: partitions leave it alone.
            seen = models.ForeignKey(
                ScheduleOccurrence,
                on_delete=models.DO_NOTHING,
                db_constraint=False,
                related_name="+",
            )
            attempt = models.ForeignKey(JobAttempt, on_delete=models.SET_NULL, null=True)

            class Meta:
                app_label = "testapp"

        partitioned = {**settings.SCHEDULER_APP, "PARTITIONED_HISTORY": True}
        with override_settings(SCHEDULER_APP=partitioned):
            errors = check_history_relations(app_configs=apps.get_app_configs())
        one_table = {**settings.SCHEDULER_APP, "PARTITIONED_HISTORY": False}
        with override_settings(SCHEDULER_APP=one_table):
            assert check_history_relations(app_configs=apps.get_app_configs()) == []

    expected = (
        [("scheduler_app.E066", "occurrence"), ("scheduler_app.E066", "attempt")]
        if connection.vendor == "postgresql"
        else []
    )
    assert [(e.id, e.obj.name) for e in errors] == expected
    assert check_history_relations() == []
