from django.db import migrations, models


class Migration(migrations.Migration):
    # Additive: a column with a database default, so workers of the previous release keep
    # inserting feedback events without it during a deploy.
    dependencies = [
        ("scheduler_app", "0029_lane_progress"),
    ]

    operations = [
        migrations.AddField(
            model_name="feedbackevent",
            name="message",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The provider's message id (or the send's key) the event is about.",
                max_length=255,
            ),
        ),
    ]
