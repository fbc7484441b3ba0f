from django.conf import settings
from django.db import migrations, models

import django.db.models.deletion
from scheduler_app.db.indexes import (
    AddIndexConcurrently,
    DropFieldIndexConcurrently,
    RemoveIndexConcurrently,
)


class Migration(migrations.Migration):
    # Every index on the job table is written on each claim and each finish: the
    # ones nothing needs go (task_status was the prefix of task_finished; finished is
    # served by prunable), the task index covers final outcomes only, and the foreign
    # keys' full indexes become partial ones over the few rows that have a value.
    # Built and dropped CONCURRENTLY, which cannot run in a transaction: workers
    # keep claiming meanwhile, and old workers need none of these indexes.
    atomic = False

    dependencies = [
        ("scheduler_app", "0015_suppressions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("owner__isnull", False)),
                fields=["owner", "-id"],
                name="scheduler_job_owned",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("cancelled_by__isnull", False)),
                fields=["cancelled_by"],
                name="scheduler_job_cancelled_by",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "failed"])),
                fields=["task_name", "status", "finished_at"],
                name="scheduler_job_task_outcomes",
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="scheduler_job_owner"),
        RemoveIndexConcurrently(model_name="job", name="scheduler_job_task_finished"),
        RemoveIndexConcurrently(model_name="job", name="scheduler_job_finished"),
        RemoveIndexConcurrently(model_name="job", name="scheduler_job_task_status"),
        DropFieldIndexConcurrently(
            model_name="job",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="scheduler_jobs",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        DropFieldIndexConcurrently(
            model_name="job",
            name="cancelled_by",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
