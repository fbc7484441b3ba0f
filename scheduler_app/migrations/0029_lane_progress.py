import django.db.models.deletion
from django.db import migrations, models


def _counted(name):
    """Rename the model's field, not the column: older workers keep writing it."""
    return migrations.SeparateDatabaseAndState(
        state_operations=[
            migrations.RenameField("sendbatch", name, "counted_%s" % name),
            migrations.AlterField(
                "sendbatch",
                "counted_%s" % name,
                models.PositiveIntegerField(default=0, editable=False, db_column=name),
            ),
        ]
    )


class Migration(migrations.Migration):
    # Additive: a new table, and three fields renamed in the model only (their columns stay,
    # so workers of the previous release keep counting on the batch row during a deploy).
    dependencies = [
        ("scheduler_app", "0028_alert_memory"),
    ]

    operations = [
        migrations.CreateModel(
            name="LaneProgress",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("claim", models.CharField(max_length=200, unique=True)),
                ("sent", models.PositiveIntegerField(default=0)),
                ("failed", models.PositiveIntegerField(default=0)),
                ("skipped", models.PositiveIntegerField(default=0)),
                ("progressed_at", models.DateTimeField(blank=True, null=True)),
                (
                    "breaker_window",
                    models.CharField(blank=True, db_default="", default="", max_length=1000),
                ),
                (
                    "batch",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="lane_progress",
                        to="scheduler_app.sendbatch",
                    ),
                ),
            ],
            options={"ordering": ["id"], "verbose_name_plural": "lane progress"},
        ),
        _counted("sent"),
        _counted("failed"),
        _counted("skipped"),
    ]
