import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; workers keep
    # claiming from the job table while the index builds.
    atomic = False

    dependencies = [
        ("scheduler_app", "0012_prune_and_recent_attempt_indexes"),
    ]

    operations = [
        # State only (no SQL): Job.attempt_history() is now a method merging these rows
        # with the job row.
        migrations.AlterField(
            model_name="jobattempt",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="recorded_attempts",
                to="scheduler_app.job",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("lease_expires_at__isnull", True), ("status", "pending")),
                fields=["run_at"],
                name="scheduler_job_next_due",
            ),
        ),
    ]
