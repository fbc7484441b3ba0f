# Additive: a nullable column, so workers of the previous release keep inserting batches.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler_app', '0007_job_send_message_permission'),
    ]

    operations = [
        migrations.AddField(
            model_name='sendbatch',
            name='context_types',
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
