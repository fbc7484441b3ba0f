from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY: workers keep claiming and finishing jobs meanwhile.
    atomic = False

    dependencies = [
        ("scheduler_app", "0010_alerts_workers_targets"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                fields=["task_name", "status", "finished_at"], name="scheduler_job_task_finished"
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "failed"])),
                fields=["finished_at"],
                name="scheduler_job_finished",
            ),
        ),
    ]
