from django.db import migrations, models


class Migration(migrations.Migration):
    # Retention records the batches whose recipients' contexts it has blanked, and skips
    # them afterwards. Nullable without a default: adding it rewrites nothing, and old
    # workers, which do not name it, keep writing batches.
    dependencies = [
        ("scheduler_app", "0019_scheduled_runs_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="sendbatch",
            name="contexts_blanked_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
