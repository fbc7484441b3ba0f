from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # Each scheduler tick asks whether a schedule's run is still pending or running; it
    # read every job the schedule had run. This index holds only the unfinished jobs
    # schedules enqueued. Built CONCURRENTLY, which cannot run in a transaction: workers
    # keep claiming meanwhile, and old workers need no index.
    atomic = False

    dependencies = [
        ("scheduler_app", "0018_job_table_autovacuum"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ["pending", "running"]),
                    ("unique_key__startswith", "schedule:"),
                ),
                fields=["id"],
                name="scheduler_job_runs_unfinished",
            ),
        ),
    ]
