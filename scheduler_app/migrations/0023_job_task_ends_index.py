from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # The API's task filter read every job kept when a task had few: the index of a task's
    # final outcomes now holds its cancelled jobs too (written once, when a job is
    # cancelled), and takes the place of scheduler_job_task_outcomes (0024 drops it), whose
    # queries it serves. Built CONCURRENTLY, which cannot run in a transaction: workers
    # keep claiming meanwhile.
    atomic = False

    dependencies = [
        ("scheduler_app", "0022_drop_plain_address_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "failed", "cancelled"])),
                fields=["task_name", "status", "finished_at"],
                name="scheduler_job_task_ends",
            ),
        ),
    ]
