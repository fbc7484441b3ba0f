from django.db import migrations, models

from scheduler_app.db.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY: workers keep claiming and finishing jobs meanwhile.
    # scheduler_job_prunable serves the pruner; scheduler_attempt_started the metrics
    # view's and the overview's recent attempts.
    atomic = False

    dependencies = [
        ("scheduler_app", "0011_prune_runs_overview"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "failed", "cancelled"])),
                fields=["finished_at"],
                name="scheduler_job_prunable",
            ),
        ),
        AddIndexConcurrently(
            model_name="jobattempt",
            index=models.Index(fields=["started_at"], name="scheduler_attempt_started"),
        ),
    ]
