from django.db import migrations

from scheduler_app.db.indexes import RemoveIndexConcurrently


class Migration(migrations.Migration):
    # 0023's scheduler_job_task_ends serves every query of the index it replaces. A
    # migration of its own, so that an interrupted migrate can run again: 0023 is
    # recorded once its index is built, and this drop (IF EXISTS) repeats.
    atomic = False

    dependencies = [
        ("scheduler_app", "0023_job_task_ends_index"),
    ]

    operations = [
        RemoveIndexConcurrently(
            model_name="job",
            name="scheduler_job_task_outcomes",
        ),
    ]
