import django.core.validators
from django.db import migrations, models

import scheduler_app.models.sends


class Migration(migrations.Migration):
    # Validators only (the form refuses a breaker the batch cannot mean): no SQL.
    dependencies = [
        ("scheduler_app", "0026_schedule_durations_bounded"),
    ]

    operations = [
        migrations.AlterField(
            model_name="sendbatch",
            name="breaker_threshold",
            field=models.FloatField(
                blank=True,
                null=True,
                validators=[scheduler_app.models.sends.validate_breaker_threshold],
            ),
        ),
        migrations.AlterField(
            model_name="sendbatch",
            name="breaker_window",
            field=models.PositiveIntegerField(
                blank=True, null=True, validators=[django.core.validators.MinValueValidator(1)]
            ),
        ),
    ]
