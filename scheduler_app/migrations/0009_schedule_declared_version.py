from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0008_sendbatch_context_types"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="declared_version",
            field=models.PositiveIntegerField(db_default=0, default=0, editable=False),
        ),
    ]
